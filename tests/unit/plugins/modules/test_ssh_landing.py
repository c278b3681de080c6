"""ssh_landing's login, in-process with ssh faked: a connection that timed out is tried again (32 lab
nodes on two cores lost SYNs during a fresh site.yml: 4 nodes failed the landing check on
"Connection to ... port 2222 timed out" while their peers were up), an answer is not."""

from __future__ import annotations

import subprocess

import pytest

from helpers import REPO
from ansible_collections.provision.cluster.plugins.module_utils.ssh import landing as LD
from ansible_collections.provision.cluster.plugins.modules import ssh_landing as L

RT = REPO / "tests" / "fixtures" / "runtime"
REPORT = (RT / "landing-node1-to-node2-ok.txt").read_text()  # real reports of the lab
WRONG = (RT / "landing-node1-to-node2-wrong-node1.txt").read_text()
PEER = {"name": "node2", "hostname": "node2", "address": "10.89.231.12", "token": LD.parse_landing_report(REPORT)["token"]}


def fake_ssh(monkeypatch, answers):
    calls = []

    def run(argv, **kwargs):
        calls.append(argv)
        answer = answers.pop(0)
        if answer == "hang":
            raise subprocess.TimeoutExpired(argv, kwargs["timeout"])
        rc, out, err = answer
        return subprocess.CompletedProcess(argv, rc, out, err)

    monkeypatch.setattr(L.subprocess, "run", run)
    return calls


@pytest.mark.parametrize("first", [(255, "", "ssh: connect to host 10.89.216.37 port 2222: Connection timed out\n"),
                                   (255, "", "Connection to 10.89.216.37 port 2222 timed out\n"), "hang"])
def test_a_connection_that_timed_out_is_tried_again(monkeypatch, first):
    calls = fake_ssh(monkeypatch, [first, (0, REPORT, "")])
    got = L.probe("ssh", {}, "node2", PEER, 10)
    assert len(calls) == 2 and got["ok"] is True, got
    assert "timed_out" not in got


def test_a_timeout_twice_is_reported_with_the_attempts(monkeypatch):
    calls = fake_ssh(monkeypatch, ["hang", (255, "", "Connection to 10.89.216.37 port 2222 timed out\n")])
    got = L.probe("ssh", {}, "node2", PEER, 10)
    assert len(calls) == 2 and got["ok"] is False and got["attempts"] == 2
    assert got["reason"] == "`ssh node2` failed: Connection to 10.89.216.37 port 2222 timed out"
    assert "timed_out" not in got


@pytest.mark.parametrize("answer", [(255, "", "root@node27: Permission denied (publickey).\n"),
                                    (255, "", "Host key verification failed.\n"),
                                    (0, WRONG, "")])
def test_an_answer_is_not_tried_again(monkeypatch, answer):
    calls = fake_ssh(monkeypatch, [answer])
    got = L.probe("ssh", {}, "node2", PEER, 10)
    assert len(calls) == 1 and got["ok"] is False, got


def test_no_retry_when_told(monkeypatch):
    calls = fake_ssh(monkeypatch, ["hang"])
    assert L.probe("ssh", {}, "node2", PEER, 10, retries=0)["ok"] is False and len(calls) == 1
