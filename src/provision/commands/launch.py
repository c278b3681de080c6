"""`provision launch`: start a training job on every node with the launchers role's files.

The command layer: options, usage errors (exit 2) and printing; the work is provision.launch's
(start, poll and stop plays of playbooks/launch.yml). Exit status (provision.exits): 0 the job succeeded
everywhere, 1 it failed, 2 usage/inventory error, 3 a node unreachable, the job timed out or was interrupted.
"""

from __future__ import annotations

import sys

import click

from provision import ansible
from provision import launch as core
from provision.commands._options import ansible_args, ansible_options
from provision.exits import EXIT_OK, EXIT_USAGE
from provision.launch import LAUNCHERS, LaunchFailure, Play

__all__ = ["LAUNCHERS", "LaunchFailure", "Play", "Printer", "command"]


class Printer(core.Output):
    """The job's output on stdout, each line with its `[node]` prefix, flushed line by line."""

    def __init__(self, hosts: list[str]):
        super().__init__(hosts, _echo_out)


def _echo_out(line: str) -> None:
    click.echo(line)
    sys.stdout.flush()


def _say(message: str) -> None:
    click.echo("provision launch: %s" % message, err=True)


@click.command("launch", context_settings={"ignore_unknown_options": True})
@ansible_options
@click.option("--launcher", type=click.Choice(sorted(LAUNCHERS)), default="torchrun", show_default=True,
              help="torchrun = c10d rendezvous on every node; deepspeed/mpirun/horovodrun/colossalai start on "
                   "the master and reach the others themselves.")
@click.option("--group", default="cluster", show_default=True, help="Inventory group of the nodes (cluster_group).")
@click.option("--timeout", type=float, default=3600, show_default=True, metavar="SECONDS",
              help="Seconds the whole job may take; then every node is stopped and the exit status is 3.")
@click.option("--poll-wait", type=float, default=2.0, show_default=True,
              help="Seconds each poll waits on the nodes for new output.")
@click.option("--chdir", default=None, help="Working directory of the job on the nodes.")
@click.argument("program", nargs=-1, type=click.UNPROCESSED, required=True)
def command(inventory, limit, extra_vars, forks, user, connect_timeout, verbose, ask_become_pass, become_password_file,
            launcher, group, timeout, poll_wait, chdir, program):
    """Start PROGRAM (script.py args...) on all nodes with the rendered launcher; stream the output.

    \b
    provision launch -i inventory/lab/ -- train.py --epochs 1
    provision launch -i hosts.nodelist.yml --launcher deepspeed -- train.py --deepspeed ds.json

    Needs the launchers stage first (ansible-playbook site.yml --tags launchers). -e takes KEY=VALUE
    (e.g. launchers_dir=/data/launch). Exit status: 0 success on every node, 1 the job failed, 2 usage
    or inventory error, 3 a node unreachable, the job timed out or was interrupted.
    """
    if timeout <= 0 or poll_wait < 0:
        _usage("--timeout must be > 0 and --poll-wait >= 0")
    try:
        extra = core.parse_extra_vars(extra_vars)
    except ValueError as exc:
        _usage(str(exc))
    script, where = LAUNCHERS[launcher]
    env = ansible.environment(core.ENVIRONMENT)
    try:
        password = ansible.become_password(ask_become_pass, become_password_file)
        hosts = core.read_inventory(ansible.resolve_inventory(inventory), group, limit)
    except ansible.AnsibleError as exc:
        _usage(str(exc))
    except LaunchFailure as exc:
        _usage(str(exc))
    play = Play(inventory, group, core.new_run_id(), env, extra={"launch_on": where, **extra}, become_password=password,
                limit=limit, args=ansible_args(forks, user, verbose, connect_timeout))
    printer = Printer(hosts)
    code = core.run_job(play, hosts, script, list(program), chdir, timeout, poll_wait, printer, _say)
    if code != EXIT_OK:
        _diagnose_output(printer.scanners)
    sys.exit(code)


def _usage(message: str) -> None:
    click.echo("provision launch: %s" % message, err=True)
    sys.exit(EXIT_USAGE)


def _diagnose_output(outputs: dict) -> None:
    """After a failed job: what `provision diagnose` names in each node's output (never changes the exit
    status). outputs: node -> its output (text) or its fed scanner."""
    for line in core.diagnosis(outputs):
        _say(line)
