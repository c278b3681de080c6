"""src/provision/ansible.py: the one place the CLI asks Ansible for anything."""

from __future__ import annotations

import sys

import pytest

import helpers  # noqa: F401
from provision import ansible


def test_error_line_takes_the_first_ansible_error():
    stderr = ("[WARNING]: Failed to load inventory plugin\n"
              "[ERROR]: Completely failed to parse inventory source /x/broken.yml\n  more\n")
    assert ansible.error_line(stderr) == "Completely failed to parse inventory source /x/broken.yml"
    assert ansible.error_line("ERROR! the playbook could not be found\n") == "the playbook could not be found"
    # ansible-core 2.19: the plugin's own message comes after "<<< caused by >>>" (and in the warning)
    lab = ("[WARNING]: Failed to parse inventory with 'ansible_collections.provision.cluster.plugins.inventory.lab' "
           "plugin: lab inventory: lab 'x' has no running node; run `provision lab up --name x`\n\nFailed to parse "
           "inventory with 'ansible_collections.provision.cluster.plugins.inventory.lab' plugin.\n\n<<< caused by >>>\n\n"
           "lab inventory: lab 'x' has no running node; run `provision lab up --name x`\n"
           "[ERROR]: Completely failed to parse inventory source /r/inventory/lab/lab.yml\n")
    assert ansible.error_line(lab) == "lab inventory: lab 'x' has no running node; run `provision lab up --name x`"
    assert ansible.error_line("") == "ansible gave no result"


def test_resolve_inventory(tmp_path):
    with pytest.raises(ansible.AnsibleError, match="no inventory"):
        ansible.resolve_inventory(None)
    with pytest.raises(ansible.AnsibleError, match="does not exist"):
        ansible.resolve_inventory(str(tmp_path / "nope"))
    assert ansible.resolve_inventory("node1,node2,") == "node1,node2,"
    assert ansible.resolve_inventory(str(tmp_path)) == str(tmp_path.resolve())


def test_tool_prefers_the_venv_beside_this_python():
    assert ansible.tool("ansible-playbook").startswith(str(__import__("pathlib").Path(sys.executable).parent))
    with pytest.raises(ansible.AnsibleError, match="pip install ansible-core"):
        ansible.tool("ansible-no-such-tool")


def test_read_inventory_groups_in_order_and_one_line_errors(tmp_path):
    inv = tmp_path / "hosts.yml"
    inv.write_text("cluster:\n  children:\n    rack1: {hosts: {b: {}, a: {}}}\n    rack2: {hosts: {c: {x: 1}}}\n")
    data = ansible.read_inventory(str(inv))
    assert ansible.group_hosts(data, "cluster") == ["b", "a", "c"]
    assert ansible.plain({"v": {"__ansible_unsafe": "x"}, "l": [{"__ansible_unsafe": "y"}]}) == {"v": "x", "l": ["y"]}
    bad = tmp_path / "bad.yml"
    bad.write_text("cluster: [this is: not an inventory\n")
    with pytest.raises(ansible.AnsibleError) as err:
        ansible.read_inventory(str(bad))
    assert str(err.value).startswith(f"inventory {bad}: ") and "\n" not in str(err.value)


def test_run_playbook_is_bounded_and_kills_the_group(tmp_path):
    run = ansible.run_playbook([sys.executable, "-c", "import time; print('x', flush=True); time.sleep(30)"],
                               {}, timeout=1)
    assert run.timed_out and run.duration_s < 10 and run.stdout == "x\n"


def test_run_playbook_bound_grows_with_the_hosts_it_reports(tmp_path):
    """A bound that is a function of the hosts seen in result events: 1 s with none, 1 s more for each host.
    The child reports two hosts at once, then sleeps 2.5 s: a flat 1 s would stop it, the grown 3 s does not;
    a third run that reports no host is stopped at 1 s."""
    events = ('import json, time\nfor h in ("node1", "node2"):\n'
              '    print(json.dumps({"event": "result", "host": h, "status": "ok"}), flush=True)\n'
              'time.sleep(2.5)\n')
    grown = ansible.run_playbook([sys.executable, "-c", events], {}, timeout=lambda hosts: 1.0 + hosts, events=True)
    assert not grown.timed_out and grown.rc == 0 and grown.timeout_s == 3.0 and len(grown.events) == 2
    flat = ansible.run_playbook([sys.executable, "-c", events], {}, timeout=1, events=True)
    assert flat.timed_out and flat.timeout_s == 1.0
    quiet = ansible.run_playbook([sys.executable, "-c", "import time; time.sleep(20)"], {},
                                 timeout=lambda hosts: 1.0 + hosts, events=True)
    assert quiet.timed_out and quiet.timeout_s == 1.0 and quiet.duration_s < 10


def test_collection_module_is_the_playbooks_code():
    catalog = ansible.collection_module("verify.catalog")
    assert catalog.__name__ == "ansible_collections.provision.cluster.plugins.module_utils.verify.catalog"


def test_run_playbook_hands_the_become_password_on_stdin(tmp_path):
    """The way ansible-playbook reads it (`--become-password-file -`): standard input, never argv or env."""
    out = tmp_path / "seen"
    probe = ("import os, sys; open(%r, 'w').write(repr((sys.stdin.read(), sys.argv[1:], "
             "[k for k, v in os.environ.items() if 'pw-123' in v])))" % str(out))
    run = ansible.run_playbook([sys.executable, "-c", probe], dict(__import__("os").environ), timeout=60,
                               become_password="pw-123")
    assert run.rc == 0, run.stderr
    stdin, argv, env = eval(out.read_text())  # noqa: S307 - our own repr
    assert stdin == "pw-123\n" and argv == ["--become-password-file", "-"] and env == []


def test_become_password_sources(tmp_path, monkeypatch):
    assert ansible.become_password() is None
    assert ansible.become_password(ask=True, prompt=lambda p: "typed") == "typed"
    with pytest.raises(ansible.AnsibleError, match="empty"):
        ansible.become_password(ask=True, prompt=lambda p: "")
    f = tmp_path / "pw"
    f.write_text("first\nsecond\n")
    f.chmod(0o600)
    assert ansible.become_password(password_file=str(f)) == "first"
    with pytest.raises(ansible.AnsibleError, match="give one of them"):
        ansible.become_password(ask=True, password_file=str(f))
    f.chmod(0o640)
    with pytest.raises(ansible.AnsibleError, match="chmod 600"):
        ansible.become_password(password_file=str(f))
