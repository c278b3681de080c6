"""What is wrong with become (sudo), named with its fix, from ansible-core's and sudo's own words
(tests/fixtures/become/: captured on the lab's `--login sudo` and `--login sudo-password` nodes)."""

from __future__ import annotations

import json

import pytest

from ansible_collections.provision.cluster.plugins.filter.results import become_line, unreachable_line
from ansible_collections.provision.cluster.plugins.module_utils.verify import catalog as K
from ansible_collections.provision.cluster.plugins.module_utils.ssh.become import become_kind, become_problem
from ansible_collections.provision.cluster.plugins.module_utils.verify.verify_report import unreachable
from helpers import FIXTURES

BECOME = FIXTURES / "become"
BASTION = FIXTURES / "bastion"


def result(name):
    return json.loads((BECOME / name).read_text())


def text(res):
    return " ".join(str(res.get(k) or "") for k in ("msg", "module_stderr", "module_stdout"))


@pytest.mark.parametrize("name,kind,words", [
    ("ansible-ping-sudo-no-rule-no-password.json", "missing", ["asks ops for a password", "-K / --ask-become-pass"]),
    ("ansible-ping-sudo-password-not-given.json", "missing", ["asks ops for a password", "--become-password-file"]),
    ("ansible-ping-sudo-wrong-password.json", "incorrect", ["rejected the become password", "nothing was changed"]),
    ("ansible-ping-sudo-not-in-sudoers.json", "not_allowed", ["ops may not use sudo on node2", "sudoers"]),
    ("ansible-ping-sudo-requiretty.json", "tty", ["requiretty"]),
    ("ansible-ping-no-sudo-installed.json", "no_sudo", ["sudo is not installed on node2"]),
])
def test_each_captured_failure_is_named_with_its_fix(name, kind, words):
    res = result(name)
    assert become_kind(text(res)) == kind
    cause, fix = become_problem("node2", text(res), "ops")
    for word in words:
        assert word in cause + " " + fix
    line = become_line(res, "node2", {"ansible_user": "ops"})
    assert line.startswith("node2: ") and "; fix: " in line and "\n" not in line
    assert "reachable" not in line


def test_the_escalation_timeout_before_the_fix_is_about_sudo_not_reachability():
    """What verify printed before the fix ("make node1 reachable and re-run"), now about sudo."""
    recs = json.loads((BECOME / "verify-before-fix-privilege-timeout.json").read_text())["checks"]
    assert recs and all(r["fix"] == "make %s reachable and re-run" % r["node"] for r in recs)
    for rec in recs:
        out = K.BY_NAME["gcc"].records(rec["node"], {"unreachable": True, "msg": rec["detail"]})
        (check,) = out
        assert check["status"] == "fail" and "sudo on %s did not confirm within 22s" % rec["node"] in check["detail"]
        assert "sudo -n true" in check["fix"] and "--ask-become-pass" in check["fix"]
        # the node-reachable check of the report says the same
        cause, fix = unreachable(rec["node"], {"user": "ops"}, rec["detail"])
        assert "did not confirm" in cause and "reachable" not in fix


def test_a_failed_check_for_a_wrong_password_names_become():
    res = result("ansible-ping-sudo-wrong-password.json")
    (check,) = K.BY_NAME["gcc"].records("node2", dict(res, failed=True))
    assert "rejected the become password" in check["detail"] and "--become-password-file" in check["fix"]


def test_not_become_is_left_alone():
    assert become_problem("node1", "ssh: connect to host 10.0.0.1 port 22: Connection refused") is None
    assert become_line({"msg": "the check failed"}, "node1") == ""


@pytest.mark.parametrize("name,words", [
    ("ansible-ping-bastion-host-key-changed.json",
     ["the bastion 10.89.215.3 (ProxyJump lg-bast-bastion) in front of node1 presents a host key",
      "ssh-keygen -R 10.89.215.3 -f /root/.cache/provision/labs/lg-bast/known_hosts"]),
    ("ansible-ping-bastion-no-route.json",
     ["the bastion 10.89.215.3 (ProxyJump lg-bast-bastion) in front of node1 cannot be reached", "bring the bastion up"]),
    ("ansible-ping-bastion-down.json",
     ["through the bastion (ProxyJump lg-bast-bastion) failed", "ssh lg-bast-bastion true"]),
])
def test_a_failure_at_the_bastion_names_the_bastion(name, words):
    res = json.loads((BASTION / name).read_text())
    hv = {"ansible_host": "10.89.215.11", "ansible_port": 22, "ansible_user": "ops",
          "ansible_ssh_common_args": "-F /x/ssh_config -o ProxyJump=lg-bast-bastion -o UserKnownHostsFile=/x/kh"}
    line = unreachable_line(res, "node1", hv)
    for word in words:
        assert word in line, line
    # the node itself is not accused
    rest = line.replace("in front of node1 presents", "")
    assert "node1 presents a host key" not in rest and "node1 does not answer" not in rest


# ansible-core's ssh connection (plugins/connection/ssh.py) raises 'Timeout (%ds) waiting for privilege
# escalation prompt: %s' % (timeout, stdout); it waits 2 + its timeout, and 1 s once ssh's stdout ended
ENDED = "Timeout (1s) waiting for privilege escalation prompt: "


def test_a_login_that_ended_while_waiting_for_sudo_is_the_connection_not_sudo():
    """test_login_bastion's stopped bastion, under load: ssh's output ended before it exited, and ansible-core
    reported the 1 s wait that follows as a privilege escalation timeout (an unreachable result)."""
    assert become_kind(ENDED) is None and become_problem("node1", ENDED, "ops") is None
    assert become_kind(ENDED.replace("(1s)", "(22s)")) == "timeout"        # sudo that never confirmed: still sudo's
    assert become_kind(ENDED.replace("(1s)", "(12s)")) == "timeout"
    hv = {"ansible_host": "10.89.215.11", "ansible_port": 22, "ansible_user": "ops",
          "ansible_ssh_common_args": "-F /x/ssh_config -o ProxyJump=lg-bast-bastion -o UserKnownHostsFile=/x/kh"}
    line = unreachable_line({"unreachable": True, "msg": ENDED}, "node1", hv)
    assert line.startswith("node1: the connection to node1 through the bastion (ProxyJump lg-bast-bastion) failed: "
                           "the connection ended before sudo confirmed"), line
    assert "ssh lg-bast-bastion true" in line and "sudo -n true" not in line, line
    cause, fix = unreachable("node1", {"host": "10.89.215.11", "port": 22, "user": "ops"}, ENDED)
    assert cause.startswith("the connection ended before sudo confirmed") and "ssh -p 22 ops@10.89.215.11 true" in fix
