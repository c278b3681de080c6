"""`provision launch`'s core: start a training job on every node with the launchers role's files.

Thin over Ansible (playbooks/launch.yml + module provision.cluster.launch_job); no SSH of its own:

1. `ansible-inventory` checks the inventory (LaunchFailure with one line when it is unusable);
2. one `start` play starts the node's part of the job on all nodes at once (forks), detached,
   its output going to ~cluster_user/.provision/launch/runs/RUN_ID/out.log;
3. `poll` plays (each waits at most poll_wait seconds on every node) bring back the new output,
   handed to an Output (whole lines, each node's also to its `provision diagnose` scanner), until
   every node ended;
4. when a node fails (or the timeout passes, or Ctrl-C) a `stop` play ends the others.

`run_job` returns the exit status (provision.exits: 0 the job succeeded everywhere, 1 it failed, 3 a node
was unreachable, the job timed out or was interrupted); what it
has to say goes to a `say(message)` callback, the job's output to the Output. The command layer
(provision.commands.launch) parses the options and prints.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from provision import ansible
from provision.exits import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_UNREACHABLE

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
# what playbooks/launch.yml's results are read through
ENVIRONMENT = {"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_CALLBACKS_ENABLED": ansible.callbacks("ansible.posix.json"),
               "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_RETRY_FILES_ENABLED": "0", "ANSIBLE_NOCOLOR": "1"}


class LaunchFailure(Exception):
    """Ansible could not do a step (message: one line)."""


def read_inventory(inventory: str | None, group: str, limit: str | None = None) -> list[str]:
    """Hosts of GROUP (within --limit) in order; LaunchFailure with one line when the inventory is unusable."""
    try:
        hosts = ansible.group_hosts(ansible.read_inventory(inventory, limit), group)
    except ansible.AnsibleError as exc:
        raise LaunchFailure(str(exc)) from None
    if not hosts:
        raise LaunchFailure("inventory %s: group %r has no host (set cluster_group or fix the inventory)"
                            % (inventory or "(ansible.cfg)", group))
    return hosts


def parse_extra_vars(items: list[str]) -> dict[str, str]:
    """-e KEY=VALUE items -> {KEY: VALUE}; ValueError names the first item that is not KEY=VALUE."""
    extra = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError("-e wants KEY=VALUE, got %r" % item)
        extra[key] = value
    return extra


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


@dataclass
class Play:
    """Runs playbooks/launch.yml with the JSON callback and returns each host's task result."""

    inventory: str | None
    group: str
    run_id: str
    env: dict[str, str]
    extra: dict = field(default_factory=dict)
    # the sudo password of the login user (-K, --become-password-file): to ansible-playbook on its stdin
    become_password: str | None = field(default=None, repr=False)
    limit: str | None = None
    args: list[str] = field(default_factory=list)  # -f, -u, -v, -T as ansible-playbook takes them

    def run(self, action: str, timeout: float, **variables) -> dict[str, dict]:
        evars = {"launch_action": action, "launch_run_id": self.run_id, "cluster_group": self.group,
                 **self.extra, **variables}
        argv = ansible.playbook_argv("playbooks/launch.yml", self.inventory, limit=self.limit,
                                     extra_vars=[json.dumps(evars)], args=self.args)
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
                    if str(res.get("action", "")).endswith("launch_job") or problem(res):
                        results[host] = res
        return results


def problem(res: dict, host: str = "") -> str | None:
    """Why a host's result is not a started/polled job (become, unreachable, failed), or None."""
    line = become_line(res, host)
    if line:
        return line
    if res.get("unreachable"):
        return "unreachable: %s" % str(res.get("msg", "")).strip().splitlines()[0:1]
    if res.get("failed"):
        return str(res.get("msg", "failed")).strip().splitlines()[0]
    return None


def become_line(res: dict, host: str) -> str:
    """What is wrong with become (sudo) when that is why the task failed, else ''."""
    if not (res.get("failed") or res.get("unreachable")):
        return ""
    become = ansible.collection_module("ssh.become")
    message = " ".join(str(res.get(k) or "") for k in ("msg", "module_stderr", "module_stdout"))
    found = become.become_problem(host or "the node", message)
    return "%s; fix: %s" % found if found else ""


class Output:
    """Hands whole lines with a `[node]` prefix to echo; keeps partial lines until they end, and streams each
    node's output into its own `provision diagnose` scanner (bounded memory, whatever the output's size) for
    the diagnosis when the job fails."""

    def __init__(self, hosts: list[str], echo: Callable[[str], None]):
        self.width = max(len(h) for h in hosts)
        self.echo = echo
        self.partial: dict[str, str] = {}
        self.scanners: dict = {}

    def feed(self, host: str, text: str, final: bool = False) -> None:
        if text:
            self.scanner(host).feed(text)
        buf = self.partial.get(host, "") + text
        lines = buf.split("\n")
        self.partial[host] = "" if final else lines.pop()
        for line in lines if not final else [ln for ln in lines if ln] or []:
            self.echo("[%s] %s" % (host.ljust(self.width), line.rstrip("\r")))

    def scanner(self, host: str):
        """The diagnose scanner of a node's output (its lines carry no node: they are that node's)."""
        if host not in self.scanners:
            from provision import diagnose

            self.scanners[host] = diagnose.scanner(host, node=host)
        return self.scanners[host]


def run_job(play: Play, hosts: list[str], script: str, program: list[str], chdir: str | None,
            timeout: float, poll_wait: float, output: Output, say: Callable[[str], None]) -> int:
    """Start, follow and (on a failure) stop the job -> EXIT_OK, EXIT_FAILED, EXIT_UNREACHABLE (a node could
    not be reached and none failed otherwise) or EXIT_INTERRUPTED (timed out, Ctrl-C)."""
    deadline = time.monotonic() + timeout
    step = 120.0 + poll_wait  # bound of one Ansible round trip
    started: list[str] = []
    try:
        args = {"launch_script": script, "launch_args": program}
        if chdir:
            args["launch_chdir"] = chdir
        say("run %s (%s)" % (play.run_id, "master only" if play.extra.get("launch_on") == "master"
                             else ", ".join(hosts)))
        results = play.run("start", step, **args)
        # where it started: every node, or only the master (cluster_master) for launchers that
        # reach the others themselves; the play decides, we follow its results
        started = [h for h in hosts if h in results and not problem(results[h], h)]
        failed = {h: problem(results[h], h) for h in hosts if h in results and h not in started}
        if not results:
            failed = {h: "not started" for h in hosts}
        if failed:
            for host, why in failed.items():
                say("%s: %s" % (host, why))
            stop(play, started, step, say)
            unreachable = all(h in results and results[h].get("unreachable") for h in failed)
            return EXIT_UNREACHABLE if unreachable else EXIT_FAILED
        offsets = {h: 0 for h in started}
        running = set(started)
        codes: dict[str, int] = {}
        while running:
            if time.monotonic() > deadline:
                say("timed out after %d s; stopping %s" % (timeout, ", ".join(sorted(running))))
                stop(play, sorted(running), step, say)
                return EXIT_INTERRUPTED
            wait = max(0.0, min(poll_wait, deadline - time.monotonic()))
            results = play.run("poll", step + wait, launch_offsets=offsets, launch_wait=wait,
                               launch_poll_hosts=sorted(running))
            for host in sorted(running):
                res = results.get(host)
                why = problem(res, host) if res else "no answer to the poll"
                if why:
                    say("%s: %s" % (host, why))
                    codes[host] = -1
                    running.discard(host)
                    continue
                output.feed(host, res.get("output", ""))
                offsets[host] = int(res.get("offset", offsets[host]))
                if not res.get("running"):
                    output.feed(host, "", final=True)
                    codes[host] = int(res["exit_status"])
                    running.discard(host)
            bad = {h: c for h, c in codes.items() if c != 0}
            if bad and running:
                say("%s failed (exit %s); stopping %s" % (", ".join(bad), ", ".join(str(c) for c in bad.values()),
                                                          ", ".join(sorted(running))))
                stop(play, sorted(running), step, say)
                for host in sorted(running):
                    say("%s: stopped" % host)
                return EXIT_FAILED
        bad = {h: c for h, c in codes.items() if c != 0}
        if bad:
            say("failed on %s" % ", ".join("%s (exit %d)" % kv for kv in bad.items()))
            return EXIT_FAILED
        say("run %s succeeded on %d node(s)" % (play.run_id, len(started)))
        return EXIT_OK
    except LaunchFailure as exc:
        say(str(exc))
        stop(play, started, step, say)
        return EXIT_FAILED
    except KeyboardInterrupt:
        say("interrupted; stopping %s" % ", ".join(started))
        stop(play, started, step, say)
        return EXIT_INTERRUPTED


def stop(play: Play, hosts: list[str], step: float, say: Callable[[str], None]) -> None:
    if not hosts:
        return
    try:
        play.run("stop", step, launch_poll_hosts=hosts)
    except LaunchFailure as exc:
        say("could not stop %s: %s" % (", ".join(hosts), exc))


def diagnosis(outputs: dict) -> list[str]:
    """After a failed job: what `provision diagnose` names in each node's output, the first failure first, then
    its consequences, as lines (none when nothing was said). outputs: node -> its output (text) or its fed
    scanner. A diagnosis that fails is one line: it must not hide the job's own failure."""
    if not outputs:
        return []
    try:
        from provision import diagnose

        doc = diagnose.diagnose(list(outputs.items()), nodes={h: h for h in outputs})
    except Exception as exc:
        return ["diagnose: %s" % exc]
    if not any(f.get("bytes") for f in doc["files"]):
        return []
    lines = ["diagnose: %s: %s: %s | fix: %s" % (c.get("node") or "?", c["check"], c["detail"], c["fix"])
             for c in doc["causes"]]
    lines += ["diagnose: then %s: %s (a consequence): %s" % (c.get("node") or "?", c["check"], c["detail"])
              for c in doc["consequences"]]
    if not doc["causes"]:
        lines.append("diagnose: no known cause in the job's output (`provision diagnose` on the full logs may say more)")
    return lines
