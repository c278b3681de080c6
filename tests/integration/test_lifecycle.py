"""The cluster over time (issue 24) on the shared 4-node lab: a frozen node during site.yml, a
stopped node during verify, a node removed from the inventory and added back, a reimaged node
(new host keys, no keys authorized, password login only) accepted on purpose and brought back.

Every test leaves the lab as it found it: four nodes, site.yml green. The inventory of three nodes is
a plain YAML file written from the lab inventory's own host variables, as a user would edit theirs.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import time
from pathlib import Path

import pytest
import yaml
import bounds
from helpers import LAB_INVENTORY, REPO, ansible_env, lab_cmd, node_exec, run_playbook, tool

from provision.ansible import plain
from provision.lab import lab_state_dir

pytestmark = pytest.mark.lab

NODE_FILES = ["/etc/hosts", "/etc/pdsh/hosts", "/root/.ssh/config", "/root/.ssh/known_hosts",
              "/root/.ssh/authorized_keys"]


@pytest.fixture(scope="module")
def lab(four_node_lab):
    yield four_node_lab
    for node in ("node2", "node3", "node4"):
        lab_cmd("fault", node, "--clear", lab_name=four_node_lab.name, check=False)
        subprocess.run(["podman", "start", f"{four_node_lab.name}-{node}"], capture_output=True, timeout=bounds.COMMAND)


def verify(lab, *args: str, inventory: Path | str = LAB_INVENTORY, timeout: float = bounds.VERIFY) -> tuple[int, dict, float]:
    t0 = time.monotonic()
    proc = subprocess.run([tool("provision"), "verify", "-i", str(inventory), "--json", *args],
                          cwd=REPO, env=ansible_env(lab.name), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout), time.monotonic() - t0


def failed(doc, check: str | None = None) -> list[dict]:
    return [c for c in doc["checks"] if c["status"] == "fail" and (check is None or c["check"] == check)]


CONNECTION = {"ansible_host", "ansible_port", "ansible_user", "ansible_connection", "ansible_ssh_common_args",
              "ansible_podman_executable", "ansible_python_interpreter"}



def three_node_inventory(lab, tmp_path: Path) -> Path:
    """The lab inventory without node4, as a static YAML inventory (its hosts' own variables)."""
    proc = subprocess.run([tool("ansible-inventory"), "-i", str(LAB_INVENTORY), "--list"], cwd=REPO,
                          env=ansible_env(lab.name), capture_output=True, text=True, timeout=bounds.COMMAND, check=True)
    hostvars = json.loads(proc.stdout)["_meta"]["hostvars"]
    hosts = {h: {k: plain(v) for k, v in hostvars[h].items() if k in CONNECTION or k.startswith(("lab_", "cluster_"))}
             for h in ("node1", "node2", "node3")}
    inv = tmp_path / "three"
    inv.mkdir()
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"cluster": {"hosts": hosts}}}}))
    return inv


def node_key(lab, node: int) -> str:
    """The base64 blob of node N's own ssh key (what the others authorize)."""
    return node_exec(lab.name, node, "cat /root/.ssh/id_ed25519.pub").stdout.split()[1]


def host_key(lab, node: int) -> str:
    return node_exec(lab.name, node, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[1]


def wait_ssh(lab, src: int, dst: str, seconds: float = bounds.POLL) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if node_exec(lab.name, src, f"ssh -o BatchMode=yes -o ConnectTimeout=3 {dst} true",
                     check=False, timeout=bounds.COMMAND).returncode == 0:
            return
        time.sleep(2)
    raise AssertionError(f"node{src} cannot ssh to {dst} after {seconds} s")


def test_site_with_a_frozen_node_ends_and_names_it(lab):
    lab_cmd("fault", "node3", "--freeze", lab_name=lab.name)
    try:
        t0 = time.monotonic()
        res = run_playbook("site.yml", lab_name=lab.name, timeout=bounds.STAGES)
        took = time.monotonic() - t0
    finally:
        lab_cmd("fault", "node3", "--clear", lab_name=lab.name)
    assert res.rc != 0, res
    assert re.search(r"node3 .*did not answer \(frozen", res.output), res
    assert bounds.well_before(took, bounds.STAGES), took   # ended, not waited out
    print(f"\nsite.yml with node3 frozen ended in {took:.1f} s")


def test_a_stopped_node_is_named_as_down(lab):
    subprocess.run(["podman", "stop", "-t", "2", f"{lab.name}-node4"], capture_output=True, check=True, timeout=bounds.COMMAND)
    try:
        rc, doc, took = verify(lab)
        # the way on that site.yml names: --limit '!node4'. The stages that reach other nodes (pdsh, the
        # NCCL probe) leave node4 out, the files that list the cluster keep it, and verify is green
        hosts_file = node_exec(lab.name, 1, "cat /etc/pdsh/hosts").stdout
        on = run_playbook("site.yml", lab_name=lab.name, extra_args=["--tags", "pdsh,nccl_net", "--limit", "!node4"],
                          timeout=bounds.STAGES)
        left_rc, left_doc, _ = verify(lab, "--limit", "!node4")
    finally:
        subprocess.run(["podman", "start", f"{lab.name}-node4"], capture_output=True, check=True, timeout=bounds.COMMAND)
        # no init system in this lab flavour: sshd did not come back with the container; the sshd stage does
        back = run_playbook("site.yml", lab_name=lab.name, extra_args=["--tags", "sshd", "--limit", "node4"],
                            timeout=bounds.STAGES)
    assert back.rc == 0, back
    assert rc == 1
    reach = failed(doc, "node reachable")
    assert [c["node"] for c in reach] == ["node4"], failed(doc)
    assert "does not answer" in reach[0]["detail"] and "bring node4 up" in reach[0]["fix"], reach
    # the nodes that answer are not blamed for the one that does not
    address = [n["address"] for n in doc["nodes"] if n["name"] == "node4"][0]
    assert not [c for c in failed(doc) if c["node"] != "node4" and "node4" not in c["check"] + c["detail"]
                and address not in c["detail"]], failed(doc)
    print(f"\nverify with node4 stopped: {took:.1f} s")
    assert on.rc == 0 and on.changed == 0, on
    assert node_exec(lab.name, 1, "cat /etc/pdsh/hosts").stdout == hosts_file and "node4" in hosts_file
    assert left_rc == 0, failed(left_doc)
    assert not [c for c in left_doc["checks"] if c["node"] == "node4"], left_doc["checks"]


def test_a_removed_node_loses_access_and_an_added_one_joins(lab, tmp_path):
    three = three_node_inventory(lab, tmp_path)
    gone_key, gone_host_key = node_key(lab, 4), host_key(lab, 4)
    before = {f: node_exec(lab.name, 1, f"stat -c %Y {f}").stdout.strip()
              for f in ("/etc/ssh/sshd_config.d/10-provision.conf", "/root/.bashrc")}

    t0 = time.monotonic()
    removed = run_playbook("site.yml", inventory=three, lab_name=lab.name, timeout=bounds.STAGES,
                           extra_args=["--skip-tags", "allreduce_smoke"])
    print(f"\nsite.yml without node4: {time.monotonic() - t0:.1f} s")
    assert removed.rc == 0, removed
    for node in (1, 2, 3):
        files = node_exec(lab.name, node, "cat " + " ".join(NODE_FILES) + " /root/.provision/launch/*",
                          check=False).stdout
        assert gone_key not in files and gone_host_key not in files, f"node{node} still lists node4"
        assert not re.search(r"\bnode4\b", files), f"node{node} still names node4"
    # node4 still runs and still has its key and its ~/.ssh/config: the others refuse it
    out = node_exec(lab.name, 4, "ssh -o BatchMode=yes -o ConnectTimeout=5 node1 true", check=False)
    assert out.returncode == 255 and "Permission denied" in out.stderr, out
    rc, doc, _ = verify(lab, inventory=three)
    assert rc == 0, failed(doc)

    t0 = time.monotonic()
    # the smoke test's skip key is the node set of its last green run, which had node4 (before the
    # removal, whose run left the smoke out): make it run, as a new node would
    added = run_playbook("site.yml", lab_name=lab.name, timeout=bounds.STAGES, extra_vars={"allreduce_smoke_rerun": "always"})
    print(f"site.yml with node4 back (smoke included): {time.monotonic() - t0:.1f} s")
    assert added.rc == 0, added
    for src, dst in ((1, "node4"), (4, "node1"), (4, "node3")):
        node_exec(lab.name, src, f"ssh -o BatchMode=yes -o ConnectTimeout=5 {dst} true")
    assert "node4" in node_exec(lab.name, 1, "cat /etc/pdsh/hosts /root/.provision/launch/hostfile*").stdout
    result = json.loads(node_exec(lab.name, 1, "cat /root/.cache/provision/allreduce/result.json").stdout)
    assert result["world_size"] == 4, result
    # what does not list nodes was not rewritten on the old nodes
    after = {f: node_exec(lab.name, 1, f"stat -c %Y {f}").stdout.strip() for f in before}
    assert after == before


def test_a_reimaged_node_is_named_accepted_on_purpose_and_rejoins(lab, tmp_path):
    password = "pw-" + secrets.token_hex(8)
    pw_file = tmp_path / "root-password"
    pw_file.write_text(password + "\n")
    pw_file.chmod(0o600)
    old_fp = node_exec(lab.name, 2, "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[1]
    # the reimage: a fresh OS keeps the name and the address, makes new host keys, has no keys
    # authorized and no cluster configuration, and takes the root password
    node_exec(lab.name, 2, "pkill -x sshd; rm -rf /etc/ssh/ssh_host_* /etc/ssh/sshd_config.d/10-provision.conf "
                           "/root/.ssh && ssh-keygen -A >/dev/null && mkdir -p /run/sshd && "
                           f"echo 'root:{password}' | chpasswd && /usr/sbin/sshd -p 2222 "
                           "-o PasswordAuthentication=yes -o PermitRootLogin=yes")
    new_fp = node_exec(lab.name, 2, "ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[1]

    rc, doc, _ = verify(lab)
    assert rc == 1
    (reach,) = failed(doc, "node reachable")
    assert reach["node"] == "node2", reach
    assert new_fp in reach["detail"] and old_fp in reach["detail"], reach
    assert f"--replace-host-key {new_fp}" in reach["fix"], reach

    known_hosts = lab_state_dir(lab.name) / "known_hosts"
    boot = subprocess.run([tool("provision"), "bootstrap", "-i", str(LAB_INVENTORY), "--limit", "node2",
                           "--replace-host-key", new_fp, "--password-file", str(pw_file),
                           "--known-hosts", str(known_hosts)],
                          cwd=REPO, env=ansible_env(lab.name), capture_output=True, text=True, timeout=bounds.COMMAND,
                          stdin=subprocess.DEVNULL)
    assert boot.returncode == 0, boot.stdout + boot.stderr
    assert password not in boot.stdout + boot.stderr

    t0 = time.monotonic()
    back = run_playbook("site.yml", lab_name=lab.name, timeout=bounds.STAGES, extra_args=["--skip-tags", "allreduce_smoke"])
    print(f"\nsite.yml bringing the reimaged node2 back: {time.monotonic() - t0:.1f} s")
    assert back.rc == 0, back
    new_blob = host_key(lab, 2)
    for node in (1, 3, 4):
        assert new_blob in node_exec(lab.name, node, "cat /root/.ssh/known_hosts").stdout, f"node{node}"
        node_exec(lab.name, node, "ssh -o BatchMode=yes -o ConnectTimeout=5 node2 true")
    node_exec(lab.name, 2, "ssh -o BatchMode=yes -o ConnectTimeout=5 node1 true")
    rc, doc, _ = verify(lab)
    assert rc == 0, failed(doc)
