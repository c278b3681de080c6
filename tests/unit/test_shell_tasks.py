"""Every value templated into a shell command is quoted (issue 31, item 7): `ansible.builtin.shell`/`raw`
tasks of the roles and playbooks end each `{{ ... }}` with `| quote` (or `| int`, a number), and the
wheel peer's URL puts an IPv6 address in brackets (item 11)."""

from __future__ import annotations

import re

import helpers
import yaml

from ansible_collections.provision.cluster.plugins.module_utils.common.cluster_plan import url_host

SHELL_MODULES = ("ansible.builtin.shell", "ansible.builtin.raw", "shell", "raw")


def _tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        if any(m in node for m in SHELL_MODULES):
            yield node
        for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
            if key in node:
                yield from _tasks(node[key])


def shell_commands():
    for path in sorted(list((helpers.REPO / "roles").rglob("tasks/*.yml")) + list((helpers.REPO / "playbooks").rglob("*.yml"))):
        for task in _tasks(yaml.safe_load(path.read_text()) or []):
            module = next(m for m in SHELL_MODULES if m in task)
            args = task[module]
            yield path.relative_to(helpers.REPO), task.get("name"), args["cmd"] if isinstance(args, dict) else args


# whole commands our filters build, quoting what goes in themselves (machine_probe: the interpreter path,
# module_utils/common/machine.py probe)
CONSTANT_COMMANDS = {"ansible_facts.discovered_interpreter_python | default(none) | provision.cluster.machine_probe"}


def test_every_templated_value_in_a_shell_command_is_quoted():
    commands = list(shell_commands())
    assert commands, "no shell task found: the walk is broken"
    unquoted = []
    for path, name, cmd in commands:
        for expr in re.findall(r"\{\{(.*?)\}\}", cmd, re.S):
            if expr.strip() in CONSTANT_COMMANDS:
                continue
            if not re.search(r"\|\s*(quote|int)\s*$", expr.strip()):
                unquoted.append(f"{path}: {name}: {{{{{expr}}}}}")
    assert unquoted == []


def test_the_wheel_peer_url_brackets_an_ipv6_address():
    assert url_host("fd00::2") == "[fd00::2]" and url_host("10.0.0.1") == "10.0.0.1" and url_host("node1") == "node1"
    assert url_host("[fd00::2]") == "[fd00::2]"
    wheels = (helpers.REPO / "roles" / "python_env" / "tasks" / "wheels.yml").read_text()
    assert "'http://%s:%s/' % (cluster_plan.address_of[seed] | provision.cluster.url_host," in wheels
