"""The SSH fabric (sshd, ssh_mesh, pdsh stages) on a real 2-node lab, with faults.

One lab for the module; the tests run in order (each leaves the fabric green again):
first run + second run over SSH, a key removed in one direction, sshd killed, a node whose host
keys were regenerated, and a second (non-root) cluster user.
"""

from __future__ import annotations

import json
import re
import subprocess

import bounds
import helpers
import pytest
from helpers import REPO, lab_name, node_exec, run_playbook

pytestmark = pytest.mark.lab

LAB = lab_name("ssh")
NODES = 2


@pytest.fixture(scope="module")
def lab(lab_factory, tmp_path_factory):
    lab = lab_factory(LAB, nodes=NODES)
    inv = tmp_path_factory.mktemp("inv")
    # an inventory naming the lab (PROVISION_LAB_NAME also set by helpers), sharing the lab group_vars
    (inv / "lab.yml").write_text(f"plugin: provision.cluster.lab\nlab_name: {LAB}\n")
    (inv / "group_vars").symlink_to(REPO / "inventory" / "lab" / "group_vars")
    stages = inv / "stages.yml"
    stages.write_text("".join(f"- name: {s}\n  ansible.builtin.import_playbook: {REPO}/playbooks/{s}.yml\n"
                              for s in ("sshd", "ssh_mesh", "pdsh")))
    lab.inventory = inv
    lab.stages = stages
    return lab


def stages(lab, *args, **kw):
    return run_playbook(lab.stages, lab_name=LAB, inventory=lab.inventory, extra_args=list(args), timeout=bounds.STAGES, **kw)


def connection(lab, host="node1"):
    proc = subprocess.run([helpers.tool("ansible-inventory"), "-i", str(lab.inventory), "--host", host],
                          cwd=REPO, env=helpers.ansible_env(LAB), capture_output=True, text=True, timeout=bounds.COMMAND,
                          check=True)
    return json.loads(proc.stdout)["ansible_connection"]


def test_first_run_then_second_run_over_ssh_changes_nothing(lab):
    assert connection(lab) == "containers.podman.podman"
    # --check --diff on bare nodes: runs through, changes nothing (sshd still not running)
    dry = stages(lab, "--check", "--diff")
    assert dry.rc == 0 and dry.recap["node1"]["failed"] == 0, dry
    assert "+Port 2222" in dry.output
    assert node_exec(LAB, 1, "pgrep -x sshd", check=False).returncode == 1
    assert node_exec(LAB, 1, "test -e /etc/ssh/ssh_host_ed25519_key", check=False).returncode == 1
    first = stages(lab)
    assert first.rc == 0, first
    # first contact done: the controller now reaches the nodes over SSH with the real host keys
    assert connection(lab) == "ssh"
    second = stages(lab)
    assert second.rc == 0 and second.changed == 0, second
    for i in range(1, NODES + 1):
        for j in range(1, NODES + 1):
            out = node_exec(LAB, i, f"ssh node{j} hostname").stdout.strip()
            assert out == f"node{j}"
        pd = node_exec(LAB, i, "pdsh -w ^/etc/pdsh/hosts hostname | sort").stdout.split("\n")
        assert [ln for ln in pd if ln] == [f"node{j}: node{j}" for j in range(1, NODES + 1)]
        hosts = node_exec(LAB, i, "getent hosts node2").stdout.split()
        assert hosts[0].startswith("10.89.") and "node2" in hosts


def test_key_removed_in_one_direction_shows_exactly_that_cell(lab):
    node_exec(LAB, 2, "sed -i '/root@node1$/d' /root/.ssh/authorized_keys")
    check = stages(lab, "--check", "--tags", "ssh_mesh")
    assert "SSH matrix: 1 failed cell(s)" in check.output and "...ignoring" in check.output, check
    assert check.changed >= 1  # the fix it would make (authorized_keys on node2), not made
    cells = re.findall(r"(node\d) -> (node\d): (\w+)", check.output)
    assert set(cells) == {("node1", "node2", "permission_denied")}, check
    fixed = stages(lab, "--tags", "ssh_mesh")
    assert fixed.rc == 0 and fixed.changed >= 1, fixed


def test_sshd_killed_is_brought_back(lab):
    node_exec(LAB, 2, "pkill -x sshd; sleep 0.5; ! pgrep -x sshd")
    res = stages(lab, "--tags", "sshd")
    assert res.rc == 0 and res.recap["node2"]["changed"] == 1, res
    # started detached: still listening after the play (the podman exec) ended
    node_exec(LAB, 1, "ssh node2 true")
    again = stages(lab, "--tags", "sshd")
    assert again.rc == 0 and again.changed == 0, again


def listener_pid(node):
    return node_exec(LAB, node, "python3 -c 'import json; print(json.load(open(\"/run/provision-sshd.json\"))[\"pid\"])'"
                     ).stdout.strip()


def test_sshd_restarted_only_when_its_config_changes(lab):
    before = listener_pid(2)
    changed = stages(lab, "--tags", "sshd", "-e", json.dumps({"sshd_extra_settings": {"ClientAliveInterval": 30}}))
    assert changed.rc == 0 and changed.recap["node2"]["changed"] == 1, changed
    assert listener_pid(2) != before
    assert "clientaliveinterval 30" in node_exec(LAB, 2, "sshd -T").stdout
    node_exec(LAB, 1, "ssh node2 true")
    back = stages(lab, "--tags", "sshd")  # over SSH through the sshd it restarts
    assert back.rc == 0 and back.recap["node2"]["changed"] == 1, back
    pid = listener_pid(2)
    same = stages(lab, "--tags", "sshd")
    assert same.rc == 0 and same.changed == 0 and listener_pid(2) == pid, same


def test_rebuilt_node_host_keys_are_replaced(lab):
    node_exec(LAB, 2, "rm -f /etc/ssh/ssh_host_*; ssh-keygen -A >/dev/null; pkill -HUP -x sshd; sleep 1")
    err = node_exec(LAB, 1, "ssh node2 true", check=False)
    assert err.returncode == 255 and "REMOTE HOST IDENTIFICATION HAS CHANGED" in err.stderr
    # the controller's known_hosts is stale too: this run goes over podman (as after a rebuild)
    env = {"PROVISION_LAB_CONNECTION": "podman"}
    check = stages(lab, "--check", "--tags", "ssh_mesh", env=env)
    cells = set(re.findall(r"(node\d) -> (node\d): (\w+)", check.output))
    assert cells == {("node1", "node2", "host_key_changed"), ("node2", "node2", "host_key_changed")}, check
    fixed = stages(lab, "--tags", "ssh_mesh", env=env)
    assert fixed.rc == 0, fixed
    node_exec(LAB, 1, "ssh node2 true")
    assert connection(lab) == "ssh"
    again = stages(lab)
    assert again.rc == 0 and again.changed == 0, again


def test_non_root_cluster_user(lab):
    res = stages(lab, "-e", "cluster_user=train", "-e", "cluster_user_create=true", "--tags", "ssh_mesh,pdsh")
    assert res.rc == 0, res
    for i in range(1, NODES + 1):
        node_exec(LAB, i, "ssh node1 true && ssh node2 true", user="train")
        perms = node_exec(LAB, i, "stat -c '%U %a' /home/train/.ssh /home/train/.ssh/id_ed25519").stdout.split("\n")
        assert perms[:2] == ["train 700", "train 600"]
        out = node_exec(LAB, i, "PDSH_RCMD_TYPE=ssh pdsh -w ^/etc/pdsh/hosts whoami | sort", user="train").stdout
        assert out.split("\n")[:2] == ["node1: train", "node2: train"]
    again = stages(lab, "-e", "cluster_user=train", "-e", "cluster_user_create=true", "--tags", "ssh_mesh,pdsh")
    assert again.rc == 0 and again.changed == 0, again
