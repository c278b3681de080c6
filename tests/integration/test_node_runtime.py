"""node_runtime on real lab containers: faults built with `provision lab up` options, a healthy lab,
idempotence, and the ssh landing check (over the real sshd + ssh_mesh stages) with a name that
points at the wrong node."""

from __future__ import annotations

import json
import subprocess

import pytest

import bounds
from helpers import LAB_INVENTORY, REPO, ansible_env, lab_name, node_exec, run_playbook, tool

pytestmark = pytest.mark.lab

PLAYBOOK = "playbooks/node_runtime.yml"
FAULTY = lab_name("rtf")
HEALTHY = lab_name("rth")
# node 2 of the faulty lab: Docker's 64 MiB /dev/shm, memlock 64 KiB, nofile 1024 soft / 4096 hard
# (a --ulimit replaces podman's default list, so nproc is passed too)
FAULT_OPTIONS = ["--node-option", "2:--shm-size=64m", "--node-option", "2:--ulimit=memlock=65536:65536",
                 "--node-option", "2:--ulimit=nofile=1024:4096", "--node-option", "2:--ulimit=nproc=16384:16384"]


def _addresses(lab):
    out = subprocess.run([tool("provision"), "lab", "status", "--name", lab, "--json"], cwd=REPO,
                         env=ansible_env(), capture_output=True, text=True, timeout=bounds.COMMAND, check=True).stdout
    return {n["name"]: n["address"] for n in json.loads(out)["nodes"]}


@pytest.fixture(scope="module")
def faulty(lab_factory):
    return lab_factory(FAULTY, nodes=2, options=FAULT_OPTIONS)


@pytest.fixture(scope="module")
def healthy(lab_factory):
    """A lab with the real sshd and ssh_mesh stages (site.yml's order: they run before node_runtime)."""
    lab = lab_factory(HEALTHY, nodes=2)
    for stage in ("playbooks/sshd.yml", "playbooks/ssh_mesh.yml"):
        res = run_playbook(stage, lab_name=lab.name, timeout=bounds.STAGES)
        assert res.rc == 0, res
    return lab


def test_faulty_node_fails_naming_node_limit_value_and_fix(faulty):
    lab = faulty
    res = run_playbook(PLAYBOOK, lab_name=lab.name, timeout=bounds.STAGES,
                       extra_vars={"node_runtime_check_landing": False})
    assert res.rc != 0, res
    assert res.recap["node1"]["failed"] == 0 and res.recap["node2"]["failed"] == 1, res
    line = next(ln for ln in res.stdout.splitlines() if "fatal: [node2]" in ln)
    msg = json.loads(line.split("=> ", 1)[1])["msg"]
    assert msg.startswith("node2: /dev/shm is 64 MiB, need >= 1 GiB"), msg
    assert "podman run --shm-size=1g" in msg, msg
    assert "nofile is 1024 soft / 4096 hard" in msg and "podman run --ulimit nofile=16384:16384" in msg, msg
    assert "fatal: [node1]" not in res.stdout


def test_verify_style_check_mode_reports_memlock_and_writes_nothing(faulty):
    lab = faulty
    node_exec(lab.name, 2, "rm -f /etc/security/limits.d/90-provision.conf")
    proc = subprocess.run(
        [tool("ansible"), "cluster", "-i", str(LAB_INVENTORY), "--check", "-m", "provision.cluster.node_runtime",
         "-a", "node_id={{ inventory_hostname }} require_memlock_unlimited=true manage_limits=true "
               "node_id_file=/etc/provision/verify-node-id"],
        cwd=REPO, env=ansible_env(lab.name, ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="json"),
        capture_output=True, text=True, timeout=bounds.STAGES, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = proc.stdout[proc.stdout.index("{\n"):]  # profile_tasks prints a line before the document
    results = json.JSONDecoder().raw_decode(doc)[0]["plays"][0]["tasks"][0]["hosts"]
    checks2 = {c["check"]: c for c in results["node2"]["checks"]}
    assert checks2["memlock"]["status"] == "fail" and checks2["memlock"]["measured"] == 65536
    assert "memlock is 64 KiB soft / 64 KiB hard" in checks2["memlock"]["detail"]
    assert "--ulimit memlock=-1:-1 --cap-add IPC_LOCK" in checks2["memlock"]["fix"]
    assert checks2["shm"]["status"] == "fail" and checks2["nofile"]["status"] == "fail"
    assert {c["status"] for c in results["node1"]["checks"] if c["check"] != "memlock"} == {"pass"}
    # read-only: neither the token nor the drop-in was written
    node_exec(lab.name, 2, "test ! -e /etc/provision/verify-node-id && test ! -e /etc/security/limits.d/90-provision.conf")


def test_fixes_what_a_container_allows_and_warns_for_the_rest(faulty):
    lab = faulty
    extra = {"node_runtime_check_landing": False, "node_runtime_shm_min": "64m", "node_runtime_min_nofile": 2048,
             "node_runtime_require_memlock_unlimited": "true", "node_runtime_on_container_limit": "warn"}
    res = run_playbook(PLAYBOOK, lab_name=lab.name, timeout=bounds.STAGES, extra_vars=extra)
    assert res.rc == 0, res
    # an Ansible warning (on stderr) names the node, the check, its value and the fix
    warning = next((ln for ln in res.stderr.splitlines() if "memlock is 64 KiB soft / 64 KiB hard" in ln), "")
    assert "[WARNING]: node2: memlock | " in warning and "| fix: " in warning, res.stderr[-3000:]
    # nofile soft raised to the container's hard limit by the drop-in (pam_limits: soft <= hard)
    dropin = node_exec(lab.name, 2, "cat /etc/security/limits.d/90-provision.conf").stdout
    assert "root         soft  nofile   4096" in dropin
    limits = node_exec(lab.name, 2, "runuser -l root -c 'ulimit -Sn'").stdout.strip()
    assert limits == "4096"


def test_healthy_lab_passes_idempotently(healthy):
    lab = healthy
    # what pdsh/DeepSpeed ranks get before the role: pam_limits' own default (1024 soft on this image)
    before = node_exec(lab.name, 1, "ssh -o BatchMode=yes node2 'ulimit -Sn'").stdout.strip()
    first = run_playbook(PLAYBOOK, lab_name=lab.name, timeout=bounds.STAGES, extra_args=["-v"])
    assert first.rc == 0, first
    # once per node in the landing task's own output (the published result repeats it with -v)
    landing = first.stdout.split("TASK [provision.cluster.node_runtime : Ssh to every node lands in that node]")[1]
    landing = landing.split("\nTASK [")[0]
    assert landing.count("2 ssh names land on the nodes the inventory means") == 2, first
    assert first.stdout.count('"source": "ssh"') >= 2, first  # limits measured through the mesh
    after = node_exec(lab.name, 1, "ssh -o BatchMode=yes node2 'ulimit -Sn'").stdout.strip()
    assert after == "16384", "ssh session soft nofile %s before the role, %s after" % (before, after)
    second = run_playbook(PLAYBOOK, lab_name=lab.name, timeout=bounds.STAGES)
    assert second.rc == 0 and second.changed == 0, second
    token = node_exec(lab.name, 1, "cat /etc/provision/node-id").stdout.split()
    assert token[0] == "node1" and len(token[1]) == 32


def test_landing_fails_when_a_name_points_at_the_wrong_node(healthy):
    lab = healthy
    addr1 = _addresses(lab.name)["node1"]
    node_exec(lab.name, 1, "cp /root/.ssh/config /root/.ssh/config.rt-good && "
                           "{ printf 'Host node2\\n  HostName %s\\n  Port 2222\\n'; cat /root/.ssh/config.rt-good; } "
                           "> /root/.ssh/config" % addr1)
    try:
        res = run_playbook(PLAYBOOK, lab_name=lab.name, timeout=bounds.STAGES)
    finally:
        node_exec(lab.name, 1, "mv /root/.ssh/config.rt-good /root/.ssh/config")
    assert res.rc != 0, res
    assert res.recap["node1"]["failed"] == 1 and res.recap["node2"]["failed"] == 0, res
    line = next(ln for ln in res.stdout.splitlines() if "fatal: [node1]" in ln)
    msg = json.loads(line.split("=> ", 1)[1])["msg"]
    assert msg.startswith("node1: `ssh node2` landed on node1, not node2: node-id is node1"), msg
    assert "fix: on node1 make each name resolve to its node" in msg
