"""One set of CLI rules (docs/cli.md), checked on every command and subcommand of the tree: the tree is
walked (click's, introspected), never listed by hand. A new command that breaks a rule fails here."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import sys
import types
from pathlib import Path

import click
import pytest

import helpers  # noqa: F401
from provision.cli import cli

SRC = Path(__file__).resolve().parents[3] / "src" / "provision"
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def walk(group: click.Group = cli, path: tuple[str, ...] = ()):
    """(path, command) of every leaf command under group."""
    for name, cmd in sorted(group.commands.items()):
        if isinstance(cmd, click.Group):
            yield from walk(cmd, path + (name,))
        else:
            yield path + (name,), cmd


COMMANDS = list(walk())
IDS = [" ".join(p) for p, _ in COMMANDS]


def _sources(cmd: click.Command) -> str:
    """The source of the command's module and of the provision modules it uses (not provision.ansible,
    which defines the calls looked for)."""
    module = inspect.getmodule(cmd.callback)
    seen = {module.__name__}
    texts = [inspect.getsource(module)]
    for value in vars(module).values():
        used = value if isinstance(value, types.ModuleType) else inspect.getmodule(value)
        if used is None or not used.__name__.startswith("provision") or used.__name__ in seen \
                or used.__name__ == "provision.ansible":
            continue
        seen.add(used.__name__)
        try:
            texts.append(inspect.getsource(used))
        except (OSError, TypeError):
            pass
    return "\n".join(texts)


def runs_ansible(cmd: click.Command) -> bool:
    """The command runs ansible-playbook: it or a core module it uses calls run_playbook or playbook_argv."""
    text = _sources(cmd)
    return "run_playbook(" in text or "playbook_argv(" in text


def canonical() -> dict[str, click.Parameter]:
    """The shared flags as commands/_options.py defines them, by dest."""
    from provision.commands import _options

    @click.command()
    @_options.ansible_options
    def probe(**kw):
        pass

    return {p.name: p for p in probe.params}


ANSIBLE_FLAGS = {"inventory": "-i", "limit": "-l", "extra_vars": "-e", "forks": "-f", "user": "-u",
                 "verbose": "-v", "connect_timeout": "-T", "ask_become_pass": "-K", "become_password_file": None}


def shape(p: click.Parameter) -> tuple:
    """What a flag means, not its default (bootstrap handles 8 hosts at once unless told)."""
    return (tuple(p.opts), tuple(p.secondary_opts), p.name, p.multiple, getattr(p, "count", False),
            getattr(p, "is_flag", False), p.envvar, p.required, type(p.type).__name__)


def test_the_walk_finds_every_command():
    names = set(IDS)
    assert {"verify", "site", "launch", "bootstrap", "diagnose", "report", "setup", "lab up", "lab status",
            "lab fault", "lab snapshots"} <= names, names
    assert {i for (p, c), i in zip(COMMANDS, IDS) if runs_ansible(c)} == {"verify", "site", "launch"}


def _where(keep):
    """(params, ids) of the walked commands that `keep` selects: the others are not parametrized, not skipped."""
    pairs = [(pc, i) for pc, i in zip(COMMANDS, IDS) if keep(pc[1])]
    return [pc for pc, _ in pairs], [i for _, i in pairs]


ANSIBLE_COMMANDS, ANSIBLE_IDS = _where(runs_ansible)
CLUSTER_COMMANDS, CLUSTER_IDS = _where(lambda cmd: "inventory" in {p.name for p in cmd.params})


def test_the_selections_are_not_empty():
    assert len(ANSIBLE_COMMANDS) >= 3 and len(CLUSTER_COMMANDS) >= 4, (ANSIBLE_IDS, CLUSTER_IDS)


@pytest.mark.parametrize("path, cmd", ANSIBLE_COMMANDS, ids=ANSIBLE_IDS)
def test_commands_that_run_ansible_take_its_flags(path, cmd):
    want = canonical()
    have = {p.name: p for p in cmd.params}
    for dest, short in ANSIBLE_FLAGS.items():
        assert dest in have, f"provision {' '.join(path)} has no {short or dest} ({dest})"
        assert shape(have[dest]) == shape(want[dest]), f"provision {' '.join(path)}: {dest} differs"


@pytest.mark.parametrize("path, cmd", COMMANDS, ids=IDS)
def test_a_shared_flag_means_the_same_everywhere(path, cmd):
    """-i, -l, -e, -f, -u, -v, -T, -K: wherever a command has one, it is the shared definition."""
    want = canonical()
    spelled = {o: dest for dest, p in want.items() for o in p.opts}
    for p in cmd.params:
        for opt in p.opts:
            if opt in spelled:
                assert p.name == spelled[opt], f"provision {' '.join(path)}: {opt} goes to {p.name}"
                assert shape(p) == shape(want[p.name]), f"provision {' '.join(path)}: {opt} differs from _options"


@pytest.mark.parametrize("path, cmd", COMMANDS, ids=IDS)
def test_timeouts_have_one_meaning_per_name(path, cmd):
    for p in cmd.params:
        if "--timeout" in p.opts and not p.hidden:
            assert p.name == "timeout" and "whole" in (p.help or ""), \
                f"provision {' '.join(path)}: --timeout must bound the whole run"
        if "--connect-timeout" in p.opts:
            assert p.name == "connect_timeout" and "-T" in p.opts


@pytest.mark.parametrize("path, cmd", COMMANDS, ids=IDS)
def test_check_is_ansibles_dry_run_only(path, cmd):
    for p in cmd.params:
        if "--check" in p.opts and not p.hidden:
            assert runs_ansible(cmd) and "dry run" in (p.help or ""), \
                f"provision {' '.join(path)}: a visible --check is Ansible's dry run (verify selects with --only)"


@pytest.mark.parametrize("path, cmd", COMMANDS, ids=IDS)
def test_a_bad_option_is_a_usage_error(path, cmd, capsys):
    from provision.cli import run

    if cmd.context_settings.get("ignore_unknown_options"):  # site and launch hand unknown options on (to ansible-playbook, the program)
        assert run([*path, "-i", ".", "--forks", "0", *_dummy_args(cmd)]) == 2
        assert "--forks" in capsys.readouterr().err
        return
    assert run([*path, "--no-such-option"]) == 2
    assert "no-such-option" in capsys.readouterr().err


def _dummy_args(cmd: click.Command) -> list[str]:
    return ["x" for p in cmd.params if isinstance(p, click.Argument) and p.required]


@pytest.mark.parametrize("path, cmd", CLUSTER_COMMANDS, ids=CLUSTER_IDS)
def test_a_cluster_command_without_inventory_is_a_usage_error(path, cmd, capsys, monkeypatch):
    from provision.cli import run

    monkeypatch.delenv("PROVISION_INVENTORY", raising=False)
    assert run([*path, *_dummy_args(cmd)]) == 2
    assert "no inventory" in capsys.readouterr().err


# --------------------------------------------------------------------------- --json
def _no_labs(monkeypatch, tmp_path):
    from provision import lab as lab_core

    monkeypatch.setattr(lab_core, "list_containers", lambda name: [])
    monkeypatch.setattr(lab_core, "list_networks", lambda name: [])
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))


# each --json command: invocations that need no network and no podman (every --json command needs one here)
JSON_RUNS = {
    "verify": [["--list-checks", "--json"], ["-i", "/nonexistent/inventory", "--json"],
               ["--brief", "--json", "-i", "."]],
    "lab up": [["--json", "--node-option", "bogus"]],
    "lab status": [["--name", "nothing", "--json"]],
    "lab snapshots": [["--json"]],
    "bootstrap": [["-i", "/nonexistent/inventory", "--json"]],
    "diagnose": [[str(FIXTURES / "h100-node" / "failures" / "nccl-bogus-ifname.log"), "--json"],
                 ["/nonexistent.log", "--json"]],
}


def test_every_json_command_is_covered():
    with_json = {i for (p, c), i in zip(COMMANDS, IDS) if "json_mode" in {q.name for q in c.params}}
    assert with_json == set(JSON_RUNS)


@pytest.mark.parametrize("name, args", [(n, a) for n, runs in JSON_RUNS.items() for a in runs],
                         ids=[f"{n}:{i}" for n, runs in JSON_RUNS.items() for i in range(len(runs))])
def test_json_is_one_document_with_a_schema(name, args, capsys, monkeypatch, tmp_path):
    from provision.cli import run

    _no_labs(monkeypatch, tmp_path)
    code = run([*name.split(), *args])
    out = capsys.readouterr().out
    doc = json.loads(out)  # exactly one document: anything else on stdout fails to parse
    assert isinstance(doc, dict) and isinstance(doc.get("schema"), int), out[:200]
    assert code in (0, 1, 2, 3)
    if "error" in doc:
        assert doc["ok"] is False and doc["exit_code"] == code


# --------------------------------------------------------------------------- exit codes from one place
def _exit_literals(path: Path) -> list[str]:
    """sys.exit(<int>), SystemExit(<int>), exit_code = <int> and EXIT_* = <int> in a file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and type(node.args[0].value) is int:
            fn = ast.unparse(node.func)
            if fn in ("sys.exit", "SystemExit", "exit", "app.exit", "term.done"):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Constant, ast.Tuple)):
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            names = [ast.unparse(t) for t in node.targets]
            if any(n.split(".")[-1].upper().startswith(("EXIT", "EXIT_CODE")) for n in names) and \
                    any(isinstance(v, ast.Constant) and type(v.value) is int for v in values):
                found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_exit_codes_come_from_one_place():
    files = [SRC / "cli.py", SRC / "app.py", SRC / "terminal.py", SRC / "launch.py", SRC / "verify.py",
             SRC / "diagnose.py", SRC / "slurm_health.py", *sorted((SRC / "commands").glob("*.py"))]
    found = [f for path in files for f in _exit_literals(path)]
    assert not found, "exit codes as numbers, not provision.exits: " + "; ".join(found)
    exits = importlib.import_module("provision.exits")
    assert [int(c) for c in exits.ExitCode] == [0, 1, 2, 3]
    from provision import terminal

    assert (terminal.EXIT_OK, terminal.EXIT_FAILED, terminal.EXIT_USAGE) == (0, 1, 2)


@pytest.mark.parametrize("rc, ours", [(0, 0), (1, 1), (2, 1), (4, 3), (6, 1), (5, 2), (99, 3), (250, 1), (-15, 3)])
def test_ansible_playbook_statuses_become_ours(rc, ours):
    from provision.exits import from_ansible

    assert from_ansible(rc) == ours


@pytest.mark.parametrize("rc, ours", [(0, 0), (2, 1), (4, 3), (99, 3)])
def test_site_exits_with_provisions_codes(rc, ours):
    """A failed host is 1 (ansible-playbook: 2), an unreachable one 3 (ansible-playbook: 4)."""
    from provision.commands import site

    assert site.run([sys.executable, "-c", f"raise SystemExit({rc})"], {}, None) == ours


def test_site_timeout_stops_the_run_and_exits_3():
    from provision.commands import site

    assert site.run([sys.executable, "-c", "import time; time.sleep(60)"], {}, 1) == 3
