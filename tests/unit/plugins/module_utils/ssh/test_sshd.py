"""sshd decisions (plugins/module_utils/ssh/sshd.py): start/restart/reload plans, the sshd -T checks and the
PAM file, on real captures under tests/fixtures/ssh (see its README)."""

from __future__ import annotations

import helpers
from ansible_collections.provision.cluster.plugins.module_utils.ssh import sshd

OURS = helpers.REPO / "tests" / "fixtures" / "ssh"


# ------------------------------------------------------------------ sshd decisions

def _rep(port, listening, procs):
    return {"port": port, "listening": listening, "held": listening or bool(procs),
            "processes": [{"pid": p, "name": n} for p, n in procs], "summary": f"{port} summary"}


def test_sshd_T_parse_and_problems():
    eff = sshd.parse_sshd_T("port 2222\nport 22\npasswordauthentication no\npubkeyauthentication yes\n")
    assert eff["port"] == ["2222", "22"]
    assert sshd.effective_problems(eff, [2222], {"passwordauthentication": "no"}) == []
    probs = sshd.effective_problems(eff, [2223], {"passwordauthentication": "yes"})
    assert probs[0].startswith("effective config does not listen on 2223 (ports: 22, 2222)")
    assert "passwordauthentication is no, not yes" in probs[1]


def test_plan_direct():
    digest = "d1"
    assert sshd.plan_direct([_rep(2222, False, [])], {}, digest)["action"] == "start"
    run = [_rep(2222, True, [(69, "sshd")])]
    assert sshd.plan_direct(run, {"pid": 69, "digest": "d1"}, digest)["action"] == "none"
    changed = sshd.plan_direct(run, {"pid": 69, "digest": "d0"}, digest)
    assert changed == {"action": "restart", "kill": [69], "reason": "configuration changed"}
    other = sshd.plan_direct(run, {}, digest)  # started by someone else (e.g. an image's entrypoint)
    assert other["action"] == "restart" and other["kill"] == [69]
    blocked = sshd.plan_direct([_rep(2222, True, [(4242, "python")])], {}, digest)
    assert blocked["action"] == "blocked" and blocked["reason"] == "2222 summary"
    partial = sshd.plan_direct([_rep(2222, True, [(69, "sshd")]), _rep(22, False, [])], {"pid": 69}, digest)
    assert partial["action"] == "restart"


def test_plan_systemd():
    assert sshd.plan_systemd("ssh", True, True, False, False) == []
    assert sshd.plan_systemd("ssh", True, True, False, True) == [["systemctl", "reload", "ssh"]]
    assert sshd.plan_systemd("sshd", False, False, False, True) == [["systemctl", "enable", "sshd"],
                                                                    ["systemctl", "start", "sshd"]]
    assert sshd.plan_systemd("ssh", False, False, True, True) == [["systemctl", "daemon-reload"],
                                                                  ["systemctl", "restart", "ssh.socket"]]
    assert sshd.plan_systemd("ssh", False, False, True, False) == []


def test_pam_loginuid_made_optional_on_real_debian_file():
    text = (OURS / "debian12-pam.d-sshd.txt").read_text()
    new = sshd.pam_loginuid_optional(text)
    assert "session    optional     pam_loginuid.so" in new
    assert new.replace("optional     pam_loginuid", "required     pam_loginuid") == text
    assert sshd.pam_loginuid_optional(new) is None
