"""`provision launch`: start a training job on every node with the launchers role's files.

Thin over Ansible (playbooks/launch.yml + module provision.cluster.launch_job); no SSH of its own:

1. `ansible-inventory` checks the inventory (exit 2 with one line when it is unusable);
2. one `start` play starts the node's part of the job on all nodes at once (forks), detached,
   its output going to ~cluster_user/.provision/launch/runs/RUN_ID/out.log;
3. `poll` plays (each waits at most --poll-wait seconds on every node) bring back the new output,
   printed with a `[node]` prefix, until every node ended;
4. when a node fails (or --timeout passes, or Ctrl-C) a `stop` play ends the others.

Exit status: 0 the job succeeded everywhere, 1 it failed (or timed out), 2 usage/inventory error.
"""

from __future__ import annotations

import json
import secrets
import sys
import time
from dataclasses import dataclass, field

import click

from provision import ansible
from provision.commands._options import become_options
from provision.terminal import EXIT_FAILED, EXIT_OK, EXIT_USAGE

# launcher -> (script rendered by the launchers role, where it runs)
LAUNCHERS = {
    "torchrun": ("torchrun-c10d.sh", "all"),
    "torchrun-static": ("torchrun-static.sh", "all"),
    "accelerate": ("accelerate.sh", "all"),
    "deepspeed": ("deepspeed.sh", "master"),
    "mpirun": ("mpirun.sh", "master"),
    "horovodrun": ("horovodrun.sh", "master"),
    "colossalai": ("colossalai.sh", "master"),
}


class LaunchFailure(Exception):
    """Ansible could not do a step (message: one line)."""


def read_inventory(inventory: str | None, group: str) -> list[str]:
    """Hosts of GROUP in order; LaunchFailure with one line when the inventory is unusable."""
    try:
        hosts = ansible.group_hosts(ansible.read_inventory(inventory), group)
    except ansible.AnsibleError as exc:
        raise LaunchFailure(str(exc)) from None
    if not hosts:
        raise LaunchFailure("inventory %s: group %r has no host (set cluster_group or fix the inventory)"
                            % (inventory or "(ansible.cfg)", group))
    return hosts


@dataclass
class Play:
    """Runs playbooks/launch.yml with the JSON callback and returns each host's task result."""

    inventory: str | None
    group: str
    run_id: str
    env: dict[str, str]
    extra: dict = field(default_factory=dict)
    become_password: str | None = field(default=None, repr=False)

    def run(self, action: str, timeout: float, **variables) -> dict[str, dict]:
        evars = {"launch_action": action, "launch_run_id": self.run_id, "cluster_group": self.group,
                 **self.extra, **variables}
        argv = ansible.playbook_argv("playbooks/launch.yml", self.inventory, extra_vars=[json.dumps(evars)])
        try:
            run = ansible.run_playbook(argv, self.env, timeout=timeout, become_password=self.become_password)
        except ansible.AnsibleError as exc:
            raise LaunchFailure("%s: %s" % (action, exc)) from None
        if run.timed_out:
            raise LaunchFailure("%s: ansible-playbook did not finish in %d s" % (action, timeout))
        try:
            data = json.loads(run.stdout)
        except ValueError:
            raise LaunchFailure("%s: %s" % (action, ansible.error_line(run.stderr + run.stdout))) from None
        # only the launch_job task's results: the plan's include (a pre-task) answers on every
        # node, also where a master-only launcher starts nothing (a host that never got that far
        # is unreachable or failed: kept, so that it is reported)
        results: dict[str, dict] = {}
        for play in data.get("plays", []):
            for task in play.get("tasks", []):
                for host, res in task.get("hosts", {}).items():
                    if res.get("skipped"):
                        continue
                    if str(res.get("action", "")).endswith("launch_job") or _problem(res):
                        results[host] = res
        return results


def _problem(res: dict, host: str = "") -> str | None:
    line = _become_line(res, host)
    if line:
        return line
    if res.get("unreachable"):
        return "unreachable: %s" % str(res.get("msg", "")).strip().splitlines()[0:1]
    if res.get("failed"):
        return str(res.get("msg", "failed")).strip().splitlines()[0]
    return None


def _become_line(res: dict, host: str) -> str:
    """What is wrong with become (sudo) when that is why the task failed, else ''."""
    if not (res.get("failed") or res.get("unreachable")):
        return ""
    become = ansible.collection_module("become")
    message = " ".join(str(res.get(k) or "") for k in ("msg", "module_stderr", "module_stdout"))
    found = become.become_problem(host or "the node", message)
    return "%s; fix: %s" % found if found else ""


class Printer:
    """Prints whole lines with a `[node]` prefix; keeps partial lines until they end, and the last
    TAIL characters of each node's output for `provision diagnose` when the job fails."""

    TAIL = 4 << 20

    def __init__(self, hosts: list[str]):
        self.width = max(len(h) for h in hosts)
        self.partial: dict[str, str] = {}
        self.tail: dict[str, str] = {}

    def feed(self, host: str, text: str, final: bool = False) -> None:
        if text:
            self.tail[host] = (self.tail.get(host, "") + text)[-self.TAIL:]
        buf = self.partial.get(host, "") + text
        lines = buf.split("\n")
        self.partial[host] = "" if final else lines.pop()
        for line in lines if not final else [ln for ln in lines if ln] or []:
            click.echo("[%s] %s" % (host.ljust(self.width), line.rstrip("\r")))
        sys.stdout.flush()


@click.command("launch", context_settings={"ignore_unknown_options": True})
@click.option("-i", "--inventory", default=None, help="Inventory (as for ansible-playbook); default: ansible.cfg's.")
@click.option("--launcher", type=click.Choice(sorted(LAUNCHERS)), default="torchrun", show_default=True,
              help="torchrun = c10d rendezvous on every node; deepspeed/mpirun/horovodrun/colossalai start on "
                   "the master and reach the others themselves.")
@click.option("--group", default="cluster", show_default=True, help="Inventory group of the nodes (cluster_group).")
@click.option("--timeout", type=float, default=3600, show_default=True,
              help="Seconds the whole job may take; then every node is stopped and the exit status is 1.")
@click.option("--poll-wait", type=float, default=2.0, show_default=True,
              help="Seconds each poll waits on the nodes for new output.")
@click.option("--chdir", default=None, help="Working directory of the job on the nodes.")
@click.option("-e", "--extra-vars", "extra_vars", multiple=True,
              help="KEY=VALUE passed to Ansible (e.g. launchers_dir=/data/launch).")
@become_options
@click.argument("program", nargs=-1, type=click.UNPROCESSED, required=True)
def command(inventory, launcher, group, timeout, poll_wait, chdir, extra_vars, program, ask_become_pass,
            become_password_file):
    """Start PROGRAM (script.py args...) on all nodes with the rendered launcher; stream the output.

    \b
    provision launch -i inventory/lab/ -- train.py --epochs 1
    provision launch -i hosts.nodelist.yml --launcher deepspeed -- train.py --deepspeed ds.json

    Needs the launchers stage first (ansible-playbook site.yml --tags launchers). Exit status:
    0 success on every node, 1 the job failed or timed out, 2 usage or inventory error.
    """
    if timeout <= 0 or poll_wait < 0:
        _usage("--timeout must be > 0 and --poll-wait >= 0")
    extra = {}
    for item in extra_vars:
        key, sep, value = item.partition("=")
        if not sep or not key:
            _usage("-e wants KEY=VALUE, got %r" % item)
        extra[key] = value
    script, where = LAUNCHERS[launcher]
    env = ansible.environment({"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
                               "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
                               "ANSIBLE_RETRY_FILES_ENABLED": "0", "ANSIBLE_NOCOLOR": "1"})
    try:
        password = ansible.become_password(ask_become_pass, become_password_file)
        hosts = read_inventory(inventory, group)
    except ansible.AnsibleError as exc:
        _usage(str(exc))
    except LaunchFailure as exc:
        _usage(str(exc))
    run_id = time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)
    play = Play(inventory, group, run_id, env, extra={"launch_on": where, **extra}, become_password=password)
    printer = Printer(hosts)
    code = _drive(play, hosts, script, list(program), chdir, timeout, poll_wait, printer)
    if code == EXIT_FAILED:
        _diagnose_output(printer.tail)
    sys.exit(code)


def _usage(message: str) -> None:
    click.echo("provision launch: %s" % message, err=True)
    sys.exit(EXIT_USAGE)


def _drive(play: Play, hosts: list[str], script: str, program: list[str], chdir: str | None,
           timeout: float, poll_wait: float, printer: Printer | None = None) -> int:
    deadline = time.monotonic() + timeout
    step = 120.0 + poll_wait  # bound of one Ansible round trip
    printer = printer or Printer(hosts)
    started: list[str] = []
    try:
        args = {"launch_script": script, "launch_args": program}
        if chdir:
            args["launch_chdir"] = chdir
        click.echo("provision launch: run %s (%s)" % (play.run_id, "master only" if play.extra.get("launch_on") ==
                                                       "master" else ", ".join(hosts)), err=True)
        results = play.run("start", step, **args)
        # where it started: every node, or only the master (cluster_master) for launchers that
        # reach the others themselves; the play decides, we follow its results
        started = [h for h in hosts if h in results and not _problem(results[h], h)]
        failed = {h: _problem(results[h], h) for h in hosts if h in results and h not in started}
        if not results:
            failed = {h: "not started" for h in hosts}
        if failed:
            for host, why in failed.items():
                click.echo("provision launch: %s: %s" % (host, why), err=True)
            _stop(play, started, step)
            return EXIT_FAILED
        offsets = {h: 0 for h in started}
        running = set(started)
        codes: dict[str, int] = {}
        while running:
            if time.monotonic() > deadline:
                click.echo("provision launch: timed out after %d s; stopping %s"
                           % (timeout, ", ".join(sorted(running))), err=True)
                _stop(play, sorted(running), step)
                return EXIT_FAILED
            wait = max(0.0, min(poll_wait, deadline - time.monotonic()))
            results = play.run("poll", step + wait, launch_offsets=offsets, launch_wait=wait,
                               launch_poll_hosts=sorted(running))
            for host in sorted(running):
                res = results.get(host)
                why = _problem(res, host) if res else "no answer to the poll"
                if why:
                    click.echo("provision launch: %s: %s" % (host, why), err=True)
                    codes[host] = -1
                    running.discard(host)
                    continue
                printer.feed(host, res.get("output", ""))
                offsets[host] = int(res.get("offset", offsets[host]))
                if not res.get("running"):
                    printer.feed(host, "", final=True)
                    codes[host] = int(res["exit_status"])
                    running.discard(host)
            bad = {h: c for h, c in codes.items() if c != 0}
            if bad and running:
                click.echo("provision launch: %s failed (exit %s); stopping %s"
                           % (", ".join(bad), ", ".join(str(c) for c in bad.values()),
                              ", ".join(sorted(running))), err=True)
                _stop(play, sorted(running), step)
                for host in sorted(running):
                    click.echo("provision launch: %s: stopped" % host, err=True)
                return EXIT_FAILED
        bad = {h: c for h, c in codes.items() if c != 0}
        if bad:
            click.echo("provision launch: failed on %s" % ", ".join("%s (exit %d)" % kv for kv in bad.items()),
                       err=True)
            return EXIT_FAILED
        click.echo("provision launch: run %s succeeded on %d node(s)" % (play.run_id, len(started)), err=True)
        return EXIT_OK
    except LaunchFailure as exc:
        click.echo("provision launch: %s" % exc, err=True)
        _stop(play, started, step)
        return EXIT_FAILED
    except KeyboardInterrupt:
        click.echo("provision launch: interrupted; stopping %s" % ", ".join(started), err=True)
        _stop(play, started, step)
        return EXIT_FAILED


def _diagnose_output(outputs: dict[str, str]) -> None:
    """After a failed job: what `provision diagnose` names in each node's output (never changes the exit status)."""
    if not any(outputs.values()):
        return
    try:
        from provision import diagnose

        doc = diagnose.diagnose(list(outputs.items()), nodes={h: h for h in outputs})
    except Exception as exc:  # a diagnosis that fails must not hide the job's own failure
        click.echo("provision launch: diagnose: %s" % exc, err=True)
        return
    for c in doc["causes"]:
        click.echo("provision launch: diagnose: %s: %s: %s | fix: %s"
                   % (c.get("node") or "?", c["check"], c["detail"], c["fix"]), err=True)
    if not doc["causes"]:
        click.echo("provision launch: diagnose: no known cause in the job's output "
                   "(`provision diagnose` on the full logs may say more)", err=True)


def _stop(play: Play, hosts: list[str], step: float) -> None:
    if not hosts:
        return
    try:
        play.run("stop", step, launch_poll_hosts=hosts)
    except LaunchFailure as exc:
        click.echo("provision launch: could not stop %s: %s" % (", ".join(hosts), exc), err=True)
