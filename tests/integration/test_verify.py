"""provision verify on a real converged lab: green when healthy; each fault of the seeds breaks one
node, verify exits 1 naming that node, that check and the fix, within 60 s, and changes nothing.

All tests share the session's converged lab (tests/conftest.py `scratch_lab`); each fault is
restored before its test ends. PROVISION_VERIFY_LAB=<name> runs them on a lab you converged yourself
(PROVISION_VERIFY_INVENTORY=<path> with it when that lab needs another inventory than inventory/lab/).
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
import bounds
from helpers import LAB_INVENTORY, REPO, ansible_env, node_exec, run_playbook, tool

pytestmark = pytest.mark.lab

USER_HOME = "/root"  # the lab's cluster_user is root
# what verify must not touch: dotfiles and configs the roles manage, on every node
WATCHED = [f"{USER_HOME}/.bashrc", f"{USER_HOME}/.ssh/authorized_keys", f"{USER_HOME}/.ssh/known_hosts",
           f"{USER_HOME}/.ssh/config", f"{USER_HOME}/.deepspeed_env", "/etc/ssh/sshd_config",
           "/etc/ssh/sshd_config.d", "/etc/pdsh", "/etc/hosts", "/etc/provision", "/etc/security/limits.d",
           f"{USER_HOME}/.provision/launch"]
SNAPSHOT = (
    "for p in " + " ".join(WATCHED) + "; do "
    "  if [ -e \"$p\" ]; then find \"$p\" -type f -exec sha256sum {} + ; "
    "  find \"$p\" -printf '%p %m %u %s\\n'; else echo \"absent $p\"; fi; done | sort; "
    # long-lived processes (ssh sessions of the controller and this probe itself excluded, and a
    # session's shell that is exiting at that instant: a zombie, or `[bash]` once its cmdline is gone)
    "ps -eo pid=,stat=,args= | awk '$2 !~ /^Z/ && $3 !~ /^\\[/ {$2 = \"\"; print}' "
    "| grep -v -e 'sshd: ' -e 'ps -eo' -e 'sort' -e 'bash -c' -e 'grep -v' -e 'awk ' | sort"
)


@pytest.fixture(scope="module")
def lab(request):
    name = os.environ.get("PROVISION_VERIFY_LAB")
    if name:
        class Existing:
            pass
        existing = Existing()
        existing.name, existing.nodes = name, 2
        return existing
    return request.getfixturevalue("scratch_lab")   # the faults are undone, but not to the byte: the next module resets


INVENTORY = os.environ.get("PROVISION_VERIFY_INVENTORY") or str(LAB_INVENTORY)


def verify(lab, *args: str) -> tuple[int, dict, float, str]:
    t0 = time.monotonic()
    proc = subprocess.run([tool("provision"), "verify", "-i", INVENTORY, "--json", *args],
                          cwd=REPO, env=ansible_env(lab.name), capture_output=True, text=True,
                          timeout=bounds.VERIFY, check=False)
    elapsed = time.monotonic() - t0
    assert proc.returncode in (0, 1), f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.returncode, json.loads(proc.stdout), elapsed, proc.stderr


def snapshot(lab) -> dict[int, str]:
    return {i: node_exec(lab.name, i, SNAPSHOT).stdout for i in range(1, lab.nodes + 1)}


def failed(doc: dict) -> list[dict]:
    return [c for c in doc["checks"] if c["status"] == "fail"]


def explain(doc: dict) -> str:
    return "\n".join(f"{c['node']}: {c['check']}: {c['detail']} | fix: {c['fix']}" for c in failed(doc))


@pytest.mark.quick
def test_healthy_lab_passes_read_only(lab):
    before = snapshot(lab)
    rc, doc, elapsed, _ = verify(lab)
    assert rc == 0, explain(doc)
    assert doc["ok"] is True
    assert [n["name"] for n in doc["nodes"]] == [f"node{i}" for i in range(1, lab.nodes + 1)]
    names = {c["check"] for c in doc["checks"]}
    for expected in ("node reachable", "sshd listening (port 2222)", "port 29500 free", "gcc", "pdsh",
                     "versions equal", "shm", "landing"):
        assert any(n.startswith(expected) for n in names), f"{expected} missing from {sorted(names)}"
    mesh = doc["mesh"]
    assert mesh["ran"] and all(cell["ok"] for row in mesh["matrix"].values() for cell in row.values())
    assert len(mesh["matrix"]) == lab.nodes and all(len(r) == lab.nodes for r in mesh["matrix"].values())
    assert doc["versions"]["ran"] and doc["versions"]["nodes"]["node1"]["torch"].startswith("2.13.0")
    assert bounds.well_before(elapsed, bounds.VERIFY), elapsed   # no fault makes it wait out a bound
    assert snapshot(lab) == before, "verify changed something on a node"


def test_human_output_and_check_selection(lab):
    proc = subprocess.run([tool("provision"), "verify", "-i", INVENTORY, "--only", "mesh",
                           "--limit", "node1,node2"], cwd=REPO, env=ansible_env(lab.name),
                          capture_output=True, text=True, timeout=bounds.VERIFY, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ssh mesh (row: from, column: to)" in proc.stdout
    assert "verify: OK" in proc.stdout
    assert "gcc" not in proc.stdout  # only the selected checks ran


def test_a_run_limited_to_one_node_keeps_the_cluster_in_the_pdsh_hosts_file(lab):
    """--limit node2 (a node reinstalled, or the only one verify is asked about) still means the cluster of
    the inventory: the pdsh stage leaves /etc/pdsh/hosts listing every node, verify checks node2 against it."""
    before = node_exec(lab.name, 2, "cat /etc/pdsh/hosts").stdout
    assert before.split() == [f"node{i}" for i in range(1, lab.nodes + 1)], before
    stage = run_playbook("playbooks/pdsh.yml", lab_name=lab.name, extra_args=["--limit", "node2"])
    assert stage.rc == 0 and stage.changed == 0, stage
    assert node_exec(lab.name, 2, "cat /etc/pdsh/hosts").stdout == before
    rc, doc, _, _ = verify(lab, "--limit", "node2")
    assert rc == 0, explain(doc)
    pdsh = [c for c in doc["checks"] if c["check"].startswith("pdsh")]
    assert pdsh and {c["node"] for c in pdsh} == {"node2"} and all(c["status"] == "pass" for c in pdsh), pdsh
    # node2's way to the others, which the limited play does not hold (its ring: node2, node1)
    assert any("node1" in c["detail"] for c in pdsh), pdsh


# Each fault: (id, node to break, break script, restore script, node named, check prefix, fix words).
# Scripts run as root inside the node (podman exec), as a user breaking their cluster would.
FAULTS = [
    pytest.param(
        2, "cp /root/.ssh/authorized_keys /root/.ssh/ak.vf && "
           "grep -v \"$(podman_key)\" /root/.ssh/ak.vf > /root/.ssh/authorized_keys",
        "mv /root/.ssh/ak.vf /root/.ssh/authorized_keys",
        "node1", "ssh node1->node2", ["authorized", "ssh_mesh"], id="key-missing-one-direction"),
    pytest.param(
        # node2 forgotten in node1's known_hosts: on a big cluster no login of the default ring goes
        # from node1 to every node, the file comparison names it (here the ring's login fails too)
        1, "cp /root/.ssh/known_hosts /root/kh.vf && grep -v -e node2 -e \"$(awk '$2 == \"node2\" {print $1; exit}' "
           "/etc/hosts)\" /root/kh.vf > /root/.ssh/known_hosts",
        "mv /root/kh.vf /root/.ssh/known_hosts",
        "node1", "known_hosts on node1", ["ssh_mesh"], id="node-missing-from-known-hosts"),
    pytest.param(
        # the listener only (open sessions stay); without it the lab inventory falls back to the
        # podman connection, another inventory may find the node unreachable: either way node2 is
        # named with the sshd fix
        2, "kill $(pgrep -f 'sshd: .*\\[listener\\]')", "mkdir -p /run/sshd && /usr/sbin/sshd -f /etc/ssh/sshd_config",
        "node2", ("sshd listening", "node reachable"), ["sshd"], id="sshd-down"),
    pytest.param(
        # the seed's "sshd is running" while it listens on 22, not on the cluster port
        2, "cp /etc/ssh/sshd_config.d/10-provision.conf /root/sshd-port.vf && "
           "sed -i 's/^Port .*/Port 22/' /etc/ssh/sshd_config.d/10-provision.conf && "
           "kill $(pgrep -f 'sshd: .*\\[listener\\]') && sleep 0.3 && /usr/sbin/sshd -f /etc/ssh/sshd_config",
        "kill $(pgrep -f 'sshd: .*\\[listener\\]'); mv /root/sshd-port.vf /etc/ssh/sshd_config.d/10-provision.conf; "
        "sleep 0.3; mkdir -p /run/sshd && /usr/sbin/sshd -f /etc/ssh/sshd_config",
        "node2", ("sshd listening", "node reachable"), ["Port 2222", "sshd"], id="sshd-on-another-port"),
    pytest.param(
        # keys in place, but sshd (StrictModes) ignores them: the cells only say "Permission denied"
        2, "chmod 777 /root/.ssh", "chmod 700 /root/.ssh",
        "node2", "ssh files of root on node2", ["chmod 700 /root/.ssh"], id="ssh-dir-world-writable"),
    pytest.param(
        1, "python3 -c 'import socket,os,time\n"
           "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((\"0.0.0.0\", 29500)); s.listen()\n"
           "open(\"/root/holder.vf\",\"w\").write(str(os.getpid())); time.sleep(600)' >/dev/null 2>&1 & "
           "for i in $(seq 50); do [ -s /root/holder.vf ] && break; sleep 0.1; done",
        "kill $(cat /root/holder.vf); rm /root/holder.vf",
        "node1", "port 29500", ["kill"], id="rendezvous-port-held"),
    pytest.param(
        1, "mv /usr/bin/pdsh /usr/bin/pdsh.vf", "mv /usr/bin/pdsh.vf /usr/bin/pdsh",
        "node1", "pdsh", ["pdsh"], id="pdsh-missing"),
    pytest.param(
        2, "f=$(/opt/provision/venv/bin/python -c 'import importlib.util as u; print(u.find_spec(\"torch\").submodule_search_locations[0])')/version.py; "
           "cp $f /root/torch-version.vf && echo $f > /root/torch-path.vf && "
           "sed -i \"s/^__version__ = .*/__version__ = '2.12.0+cpu'/\" $f",
        "cp /root/torch-version.vf $(cat /root/torch-path.vf) && rm /root/torch-version.vf /root/torch-path.vf",
        "node2", "versions equal", ["python_env_torch_spec"], id="torch-version-differs"),
    pytest.param(
        # the seed's mistake: the environment sits at the end of Debian's .bashrc, below its
        # "not running interactively, return" guard
        1, "cp /root/.bashrc /root/bashrc.vf && cat /etc/skel/.bashrc /root/bashrc.vf > /root/.bashrc",
        "mv /root/bashrc.vf /root/.bashrc",
        "node1", "env", ["shell_env"], id="env-after-guard"),
    pytest.param(
        # node1's /etc/hosts sends node2's name to node1's own address (ssh still lands right
        # through ~/.ssh/config; hostfiles and Slurm use the name)
        1, "cp /etc/hosts /root/hosts.vf && a=$(awk '$2 == \"node1\" {print $1; exit}' /root/hosts.vf) && "
           "awk -v a=\"$a\" '$2 == \"node2\" {$1 = a} {print}' /root/hosts.vf > /etc/hosts",
        "cat /root/hosts.vf > /etc/hosts && rm /root/hosts.vf",
        "node1", "nccl_net.names", ["/etc/hosts"], id="name-resolves-to-another-node"),
    pytest.param(
        1, "cp /root/.bashrc /root/bashrc.vf && "
           "sed -i 's/^export NCCL_SOCKET_IFNAME=.*/export NCCL_SOCKET_IFNAME=eth0/' /root/.bashrc && "
           "grep -q '^export NCCL_SOCKET_IFNAME=eth0' /root/.bashrc",
        "mv /root/bashrc.vf /root/.bashrc",
        "node1", "nccl_net", ["eth0"], id="nccl-interface-unreachable"),
    pytest.param(
        # launch files changed by hand: node2 dropped from DeepSpeed's hostfile, mpirun.sh removed (a job
        # started with them runs on one node, or not at all)
        2, "cp -a /root/.provision/launch /root/launch.vf && sed -i '/^node2 /d' /root/.provision/launch/hostfile.deepspeed && "
           "rm /root/.provision/launch/mpirun.sh",
        "rm -rf /root/.provision/launch && mv /root/launch.vf /root/.provision/launch",
        "node2", "launch files", ["missing: mpirun.sh", "--tags launchers"], id="launch-files-edited"),
]


@pytest.mark.parametrize("node, break_script, restore_script, named, check, fix_words", FAULTS)
def test_fault_is_named_with_its_fix(lab, node, break_script, restore_script, named, check, fix_words):
    key = node_exec(lab.name, 1, "cat /root/.ssh/id_ed25519.pub", check=False).stdout.split()
    script = break_script.replace("$(podman_key)", key[1] if len(key) > 1 else "no-key")
    node_exec(lab.name, node, script)
    try:
        before = snapshot(lab)
        rc, doc, elapsed, _ = verify(lab)
        after = snapshot(lab)
    finally:
        node_exec(lab.name, node, restore_script)
    assert rc == 1, f"verify passed a broken lab:\n{json.dumps(doc['checks'], indent=1)}"
    assert doc["ok"] is False
    hits = [c for c in failed(doc) if c["node"] == named and c["check"].startswith(check)]  # str or tuple
    assert hits, f"no failed {check!r} on {named}:\n{explain(doc)}"
    assert all(any(w in c["fix"] + c["detail"] for w in fix_words) for c in hits), explain(doc)
    assert all(c["fix"] for c in hits), explain(doc)
    assert bounds.well_before(elapsed, bounds.VERIFY), f"verify took {elapsed:.1f} s"
    assert after == before, "verify changed something on a node"


def test_rendezvous_port_blocked_between_nodes_is_named(lab):
    # a firewall that lets ssh through but not the rendezvous port: node2's connections to port
    # 29500 are refused by a policy rule (EACCES, as an iptables REJECT/prohibit gives)
    rule = "ip rule add ipproto 6 dport 29500 prohibit"
    node_exec(lab.name, 2, rule, privileged=True)
    try:
        before = snapshot(lab)
        rc, doc, elapsed, _ = verify(lab, "--only", "nccl")
        after = snapshot(lab)
    finally:
        node_exec(lab.name, 2, rule.replace(" add ", " del "), privileged=True)
    assert rc == 1, explain(doc)
    hits = [c for c in failed(doc) if c["node"] == "node2" and c["check"] == "nccl_net.rendezvous"]
    assert hits and "29500" in hits[0]["detail"] and "node1" in hits[0]["detail"], explain(doc)
    assert "open TCP 29500" in hits[0]["fix"]
    assert [c for c in failed(doc) if c["check"] == "nccl_net.rendezvous"] == hits  # node1 is the master
    assert bounds.well_before(elapsed, bounds.VERIFY) and after == before
