"""Lab snapshots without podman: what a restore restarts, the subnet a restore needs, refusals."""

from __future__ import annotations

import json

import helpers  # noqa: F401
import pytest

from provision import lab as lab_core
from provision.lab import snapshot as snap

# `ps -eo args=` in a bookworm lab node after the sshd stage: the listener as OpenSSH 9.2 titles it,
# the controller's session, and a user's login
PS_BOOKWORM = """\
/catatonit -- sleep infinity
sleep infinity
sshd: /usr/sbin/sshd -f /etc/ssh/sshd_config [listener] 0 of 128-512 startups
sshd: root@notty
sshd: root [priv]
bash -c ps -eo args=
"""


def test_the_listener_is_restarted_with_the_command_that_started_it():
    assert snap.sshd_listeners(PS_BOOKWORM) == ["/usr/sbin/sshd -f /etc/ssh/sshd_config"]
    # an OpenSSH that keeps its argv as the title
    assert snap.sshd_listeners("/usr/sbin/sshd -f /etc/ssh/sshd_config\nsshd: ops@pts/0\n") == [
        "/usr/sbin/sshd -f /etc/ssh/sshd_config"]
    # nothing that could carry a shell word through: only sshd and a plain path
    assert snap.sshd_listeners("sshd: /usr/sbin/sshd -f /tmp/x;reboot [listener] 0 of 10\n") == []
    assert snap.sshd_listeners("sshd: root@notty\n") == []


@pytest.mark.parametrize("name", ["", "../x", "A", "a b", "a/b", "-x", "x" * 102])
def test_snapshot_names_are_one_safe_word(name):
    with pytest.raises(lab_core.LabError, match="snapshot name"):
        snap.check_name(name)


def test_a_restore_needs_the_subnet_its_nodes_were_made_for(monkeypatch):
    monkeypatch.setattr(lab_core, "_networks", lambda: [{"name": "other", "subnets": [{"subnet": "10.89.150.0/24"}]}])
    with pytest.raises(lab_core.LabError, match="10.89.150.0/24, which network other uses"):
        lab_core.subnet_index("mine", 150)
    assert lab_core.subnet_index("mine", 151) == 151
    # the lab's own network at that index is fine (a restore over a lab that is up)
    monkeypatch.setattr(lab_core, "_networks", lambda: [{"name": "mine", "subnets": [{"subnet": "10.89.150.0/24"}]}])
    assert lab_core.subnet_index("mine", 150) == 150


def _containers(state="running"):
    return [{"Names": [f"lab-node{i}"], "State": state,
             "Labels": {lab_core.LABEL: "lab", lab_core.LABEL_INDEX: str(i)}} for i in (1, 2)]


def test_saving_refuses_what_a_snapshot_cannot_hold(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(lab_core, "podman", lambda *a, **kw: pytest.fail("nothing may be committed"))
    monkeypatch.setattr(snap, "podman", lambda *a, **kw: pytest.fail("nothing may be committed"))
    monkeypatch.setattr(lab_core, "list_containers", lambda name: _containers("paused"))
    with pytest.raises(lab_core.LabError, match="lab-node1, lab-node2 not running"):
        snap.save("lab", "s1")
    monkeypatch.setattr(lab_core, "list_containers", lambda name: [])
    with pytest.raises(lab_core.LabError, match="has no node to save"):
        snap.save("lab", "s1")
    monkeypatch.setattr(lab_core, "list_containers", lambda name: _containers())
    monkeypatch.setattr(lab_core.faults_mod, "active", lambda lab, nodes: {"node2": {"rate": "100mbit"}})
    with pytest.raises(lab_core.LabError, match=r"faults \(node2\)"):
        snap.save("lab", "s1")


def test_a_missing_snapshot_is_named_and_nothing_is_removed(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(lab_core, "down", lambda *a, **kw: pytest.fail("the lab must stay as it is"))
    with pytest.raises(lab_core.LabError, match="no snapshot s9"):
        snap.restore("lab", "s9")


def test_a_snapshot_whose_image_is_gone_is_not_listed(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = snap.record_path("s1")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"snapshot": "s1", "lab": "lab", "subnet": 5, "created": "x",
                                "nodes": [{"index": 1, "image": snap.image("s1", 1)}]}))

    class Proc:
        returncode = 1
    monkeypatch.setattr(snap, "podman", lambda *a, **kw: Proc())
    assert snap.load("s1") is None and snap.listing() == []


def test_the_listing_shows_whole_names_on_a_narrow_terminal(monkeypatch):
    # what `lab up --from` takes must be copyable: rich cut it to "ld-four-4n-d49fc09…" at 80 columns
    from click.testing import CliRunner

    from provision.cli import cli

    name = "ld-four-4n-d49fc0950b90"
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.setattr(snap, "listing", lambda: [{"snapshot": name, "lab": "ld-four", "subnet": 186,
                                                   "created": "2026-11-27 11:01:35", "nodes": [1, 2, 3, 4]}])
    out = CliRunner().invoke(cli, ["lab", "snapshots"]).output
    assert name in out and "2026-11-27 11:01:35" in out, out
