"""The verify document (plugins/module_utils/verify/verify_report.py) built from every node's Check records,
and the verify action plugins run for real by ansible-playbook on local-connection hosts."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO
from ansible_collections.provision.cluster.plugins.module_utils.verify import checks as C
from ansible_collections.provision.cluster.plugins.module_utils.verify.verify_report import build_document, fail_lines

NODES = {
    "n1": {"address": "10.0.0.1", "reachable": True, "checks": [
        C.passed("gcc", "GCC 12.2.0 >= 9"), C.skipped("gpu", "no GPU")]},
    "n2": {"address": "10.0.0.2", "reachable": False, "reach_detail": "Failed to connect to the host via ssh: refused\nx",
           "connection": {"connection": "ssh", "host": "10.0.0.2", "port": 2222, "user": "root"}},
}


def test_document_schema_records_and_an_unreachable_node():
    doc = build_document(["n1", "n2"], NODES, selected=["reach", "gcc"])
    assert list(doc) == ["schema", "ok", "selected", "summary", "nodes", "checks", "mesh", "versions", "allreduce"]
    assert doc["ok"] is False and doc["schema"] == 1
    assert doc["nodes"] == [{"name": "n1", "address": "10.0.0.1", "reachable": True},
                            {"name": "n2", "address": "10.0.0.2", "reachable": False}]
    assert doc["summary"] == {"pass": 2, "fail": 1, "warn": 0, "skip": 1}
    for c in doc["checks"]:
        assert set(c) == {"node", "check", "status", "detail", "fix"} and "\n" not in c["detail"] + c["fix"]
    bad = [c for c in doc["checks"] if c["status"] == "fail"]
    assert bad == [{"node": "n2", "check": "node reachable", "status": "fail",
                    "detail": "Failed to connect to the host via ssh: refused",
                    "fix": "bring n2 up and make `ssh -p 2222 root@10.0.0.2 true` work from here (sshd down? "
                           "ansible-playbook site.yml --tags sshd --limit n2)"}]
    assert fail_lines(doc) == ["n2: node reachable: Failed to connect to the host via ssh: refused | fix: " + bad[0]["fix"]]
    assert doc["mesh"] == {"ran": False, "nodes": [], "matrix": {}} and doc["allreduce"] == {"ran": False}


def test_a_container_node_is_started_with_its_runtime():
    nodes = {"c1": {"reachable": False, "connection": {"connection": "containers.podman.podman", "host": "lab-node1"}}}
    doc = build_document(["c1"], nodes, selected=["reach"])
    assert doc["checks"][0]["fix"] == "start the container: podman start lab-node1"


def test_mesh_versions_and_allreduce_sections():
    row = [{"target": "n1", "ok": True, "error": "", "detail": "n1"},
           {"target": "n2", "ok": False, "error": "permission_denied", "detail": "root@n2: Permission denied\nmore"}]
    nodes = {"n1": dict(NODES["n1"]), "n2": dict(NODES["n1"], address="10.0.0.2")}
    doc = build_document(["n1", "n2"], nodes, selected=["reach"], mesh_rows={"n1": row},
                         versions={"n1": {"torch": "2.13.0", "backends": {"gloo": True}}, "n2": {"torch": "2.3.0"}},
                         gpus={"n1": {"gpu_count": 0}}, differing_nodes=["n2"],
                         allreduce={"status": "pass", "backend": "gloo", "world_size": 2, "correct": True,
                                    "busbw_gbps": 0.6, "failures": [], "warnings": []})
    assert doc["mesh"]["matrix"]["n1"]["n2"] == {"ok": False, "error": "permission_denied",
                                                 "detail": "root@n2: Permission denied"}
    v = doc["versions"]
    assert v["nodes"]["n1"]["backends.gloo"] == "yes" and v["nodes"]["n1"]["gpu.count"] == "0"
    assert v["differing"] == ["torch", "backends.gloo", "gpu.count"]  # an absent value reads as "-"
    assert v["differing_nodes"] == ["n2"]
    assert doc["allreduce"]["ran"] is True and doc["checks"][-1] == {
        "node": "n1", "check": "allreduce", "status": "pass", "fix": "",
        "detail": "gloo over 2 ranks, sum correct, busbw 0.6 GB/s"}
    failed = build_document(["n1"], nodes, selected=["reach"], allreduce_error="the all-reduce failed\nx")
    assert failed["ok"] is False and failed["allreduce"] == {"ran": True, "status": "fail"}


# ---------------------------------------------------------------- the action plugins, for real

def run_verify(tmp_path: Path, *extra: str) -> tuple[int, dict]:
    """playbooks/verify.yml on two local-connection hosts; -> (rc, the report document)."""
    inv = tmp_path / "hosts.yml"
    py = sys.executable
    inv.write_text("cluster:\n  hosts:\n"
                   f"    n1: {{ansible_connection: local, ansible_python_interpreter: {py}, cluster_address: 192.0.2.1}}\n"
                   f"    n2: {{ansible_connection: local, ansible_python_interpreter: {py}, cluster_address: 192.0.2.2}}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_CACHE_PLUGIN_CONNECTION=str(tmp_path / "facts"),
               ANSIBLE_STDOUT_CALLBACK="provision.cluster.verify_events",
               ANSIBLE_CALLBACKS_ENABLED="provision.cluster.verify_events")
    proc = subprocess.run([str(Path(py).parent / "ansible-playbook"), str(REPO / "playbooks/verify.yml"), "-i", str(inv),
                           *extra], capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
    reports = [json.loads(line)["report"] for line in proc.stdout.splitlines()
               if line.startswith("{") and '"report"' in line]
    assert reports, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.returncode, reports[0]


def test_verify_playbook_runs_the_selected_checks_and_takes_the_documented_variables(tmp_path):
    rc, doc = run_verify(tmp_path, "-e", '{"verify_select": ["gcc", "ports"]}', "-e", "gcc_toolchain_min_version=99")
    assert rc == 2  # ansible-playbook's "a task failed": the last task lists every failed check
    gcc = [c for c in doc["checks"] if c["check"] == "gcc"]
    assert [c["node"] for c in gcc] == ["n1", "n2"]
    assert all(c["status"] == "fail" and c["detail"].endswith("need >= 99") for c in gcc)
    assert gcc[1]["fix"] == "ansible-playbook site.yml --tags gcc_toolchain --limit n2 (gcc_toolchain_min_version=99)"
    assert {c["check"] for c in doc["checks"]} == {"node reachable", "gcc", "port 29500 free", "port 2222 free or held by sshd"}
    rc, doc = run_verify(tmp_path, "-e", '{"verify_select": ["gcc"]}', "-e", "gcc_toolchain_min_version=1")
    assert rc == 0 and doc["ok"] is True


def test_an_inventory_problem_is_a_failed_check_not_a_stop(tmp_path):
    rc, doc = run_verify(tmp_path, "-e", '{"verify_select": [], "verify_fail_on_error": false}',
                         "-e", '{"cluster_master": "nope"}')
    assert rc == 0
    bad = [c for c in doc["checks"] if c["check"] == "inventory"]
    assert bad and bad[0]["node"] == "n1" and "cluster_master 'nope' is not a host" in bad[0]["detail"]
    assert bad[0]["fix"].startswith("set cluster_master to one of n1, n2")


@pytest.mark.parametrize("name", ["verify_node", "verify_report"])
def test_action_plugins_refuse_an_unknown_check(tmp_path, name):
    rc, doc = None, None
    inv = tmp_path / "h.ini"
    inv.write_text(f"[cluster]\nn1 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    play = tmp_path / "p.yml"
    play.write_text(f"- hosts: cluster\n  gather_facts: false\n  tasks:\n    - provision.cluster.{name}:\n"
                    "        select: [bogus]\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_CACHE_PLUGIN_CONNECTION=str(tmp_path / "facts"))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), str(play), "-i", str(inv)],
                          capture_output=True, text=True, env=env, timeout=120, cwd=REPO)
    assert proc.returncode == 2 and "unknown check bogus" in proc.stdout, (rc, doc, proc.stdout[-2000:])


SSH_ERRORS = REPO / "tests" / "fixtures" / "ssh"


@pytest.mark.parametrize("capture, says, fix", [
    ("ssh-err-permission-denied.txt", "answers on 10.0.0.2 port 2222 but refused our key",
     "provision bootstrap -i INV --limit n2 --ask-pass"),
    ("ssh-err-connection-refused.txt", "answers but nothing listens on 10.0.0.2 port 2222",
     "ansible-playbook site.yml --tags sshd --limit n2"),
    ("ssh-err-timeout.txt", "does not answer at 10.0.0.2 port 2222", "bring n2 up and make `ssh -p 2222 root@10.0.0.2 true`"),
    ("ssh-err-host-key-changed.txt", "", "--replace-host-key SHA256:"),
])
def test_an_unreachable_node_is_told_apart_by_the_connection_error(capture, says, fix):
    """The controller's own connection error (Ansible prefixes ssh's stderr): real ssh captures."""
    message = "Failed to connect to the host via ssh: " + (SSH_ERRORS / capture).read_text()
    conn = {"connection": "ssh", "host": "10.0.0.2", "port": 2222, "user": "root"}
    doc = build_document(["n2"], {"n2": {"reachable": False, "reach_detail": message, "connection": conn}},
                         selected=["reach"])
    (c,) = doc["checks"]
    assert says in c["detail"] and fix in c["fix"], c
    assert "\n" not in c["detail"] + c["fix"]


@pytest.mark.parametrize("tcp, says, fix", [
    ("refused", "n2 answers but nothing listens on 127.0.0.1 port 40001", "ansible-playbook site.yml --tags sshd"),
    ("timeout", "n2 does not answer at 127.0.0.1 port 40001 (down, or no route/firewall)", "bring n2 up"),
    ("error: No route to host", "n2 does not answer at 127.0.0.1 port 40001", "bring n2 up"),
    ("open", "Data could not be sent", "sshd down?"),
    (None, "Data could not be sent", "sshd down?"),
])
def test_an_error_without_sshs_words_is_told_apart_by_a_tcp_connect(tcp, says, fix):
    """ansible-core 2.16 lost ssh's "Connection refused" (a real capture): the controller's TCP connect
    (conn["tcp"], netinfo.tcp_state) tells the cases apart and is named in the detail."""
    message = (SSH_ERRORS / "ansible-2.16-unreachable-broken-pipe.txt").read_text()
    conn = {"connection": "ssh", "host": "127.0.0.1", "port": 40001, "user": "root", "tcp": tcp}
    doc = build_document(["n2"], {"n2": {"reachable": False, "reach_detail": message, "connection": conn}},
                         selected=["reach"])
    (c,) = doc["checks"]
    assert c["detail"].startswith(says) and fix in c["fix"], c
    assert (f"(a TCP connect from the controller to 127.0.0.1 port 40001: {tcp})" in c["detail"]) is bool(tcp), c


def test_the_action_probes_only_nodes_whose_error_lost_sshs_words():
    from ansible_collections.provision.cluster.plugins.action import verify_report as action

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    lost = (SSH_ERRORS / "ansible-2.16-unreachable-broken-pipe.txt").read_text()

    def node(message, reachable=False, **conn):
        return {"reachable": reachable, "reach_detail": message,
                "connection": dict({"connection": "ssh", "host": "127.0.0.1", "port": closed}, **conn)}

    nodes = {"lost": node(lost), "smart": node(lost, connection="smart"),
             "said": node("Failed to connect to the host via ssh: " + (SSH_ERRORS / "ssh-err-connection-refused.txt").read_text()),
             "bastion": node(lost, proxy="ops@bastion"), "podman": node(lost, connection="containers.podman.podman"),
             "up": node("", reachable=True)}
    action._tcp_states(nodes)
    assert {n: e["connection"].get("tcp") for n, e in nodes.items()} == {
        "lost": "refused", "smart": "refused", "said": None, "bastion": None, "podman": None, "up": None}


def test_a_node_that_did_not_answer_in_time_is_named_frozen():
    conn = {"connection": "ssh", "host": "10.0.0.2", "port": 2222}
    doc = build_document(["n2"], {"n2": {"reachable": False, "connection": conn,
                                         "reach_detail": "n2 did not answer within 30 s"}}, selected=["reach"])
    assert "did not answer (frozen" in doc["checks"][0]["detail"] and "podman unpause" in doc["checks"][0]["fix"]


def test_a_node_whose_check_hit_the_task_timeout_is_named_frozen():
    """What Ansible records when `timeout:` ends a task on a paused node (ssh connected, then nothing)."""
    conn = {"connection": "ssh", "host": "10.0.0.2", "port": 2222}
    doc = build_document(["n2"], {"n2": {"reachable": False, "connection": conn,
                                         "reach_detail": "Timed out after 20 second(s)."}}, selected=["reach"])
    assert doc["checks"][0]["detail"].startswith("n2 did not answer (frozen, overloaded or its sshd hung)")
    assert "podman unpause" in doc["checks"][0]["fix"]


def test_one_line_for_a_node_a_stage_could_not_reach():
    from ansible_collections.provision.cluster.plugins.filter.results import unreachable_line

    msg = ('Data could not be sent to remote host "10.0.0.2". Make sure this host can be reached over ssh: '
           'Connection timed out during banner exchange')
    line = unreachable_line({"unreachable": True, "msg": msg}, "n2", {"ansible_host": "10.0.0.2", "ansible_port": 2222})
    assert line.startswith("n2 accepted the connection but did not answer (frozen")
    assert line.endswith("(a paused container: podman unpause) (or leave it out for now: --limit '!n2')")
    assert "\n" not in line


def test_a_changed_host_key_is_named_with_both_fingerprints():
    """A reimaged node: what it presents (from ssh's own warning, a real capture) and what the
    controller's known_hosts records; the fix accepts exactly the presented key, on purpose."""
    message = "Failed to connect to the host via ssh: " + (SSH_ERRORS / "ssh-err-host-key-changed.txt").read_text()
    conn = {"connection": "ssh", "host": "10.89.133.12", "port": 2222, "user": "root",
            "known_hosts": "/root/.ssh/known_hosts", "recorded_keys": ["SHA256:oldoldold (ED25519)"]}
    doc = build_document(["n2"], {"n2": {"reachable": False, "reach_detail": message, "connection": conn}},
                         selected=["reach"])
    (c,) = doc["checks"]
    assert "sends SHA256:NfYujp2+3xB/OO3SP4acE0cTBF6OPbi4LEaOx2FbXuQ (ED25519)" in c["detail"], c
    assert "/root/.ssh/known_hosts records SHA256:oldoldold (ED25519)" in c["detail"], c
    assert "--limit n2 --replace-host-key SHA256:NfYujp2+3xB/OO3SP4acE0cTBF6OPbi4LEaOx2FbXuQ" in c["fix"], c
    assert "\n" not in c["detail"] + c["fix"]


def test_known_hosts_files_from_the_ssh_options():
    from ansible_collections.provision.cluster.plugins.module_utils.ssh.known_hosts import user_known_hosts_files

    assert user_known_hosts_files("-o UserKnownHostsFile=/x/kh -o StrictHostKeyChecking=yes", None) == ["/x/kh"]
    assert user_known_hosts_files(None, "-o UserKnownHostsFile=/y/kh") == ["/y/kh"]
    assert user_known_hosts_files("", None) == ["~/.ssh/known_hosts", "~/.ssh/known_hosts2"]
