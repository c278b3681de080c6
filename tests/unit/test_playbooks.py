"""The playbooks' structure, as ansible-playbook resolves it (--list-hosts, no node contacted):
site.yml runs no cluster-plan play (preflight computes the plan once, then the stages' plays from
playbooks/stages/), and a stage playbook run on its own computes the plan first, on every node of
the play, then runs the same plays as site.yml."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from helpers import REPO, ansible_env, tool

STAGES = sorted(p.stem for p in (REPO / "playbooks").glob("*.yml")
                if p.stem not in ("preflight", "plan", "verify", "identity"))
# playbooks/identity.yml's plays, first in site.yml, verify.yml and every stage playbook (cached facts
# belong to one machine)
IDENTITY = ["Machine identity", "Forget the facts cached for another machine"]
PLAY = re.compile(r"^\s+play #\d+ \(([^)]*)\): (.*?)\tTAGS", re.M)


def list_hosts(playbook: str) -> list[tuple[str, str, int]]:
    """[(pattern, play name, host count)] of PLAYBOOK on a two-node inline inventory."""
    proc = subprocess.run([tool("ansible-playbook"), playbook, "--list-hosts", "-i", "node1,node2,",
                           "-e", "cluster_group=all"], capture_output=True, text=True, cwd=REPO,
                          env=ansible_env(), timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = []
    for block in re.split(r"\n(?=\s+play #)", proc.stdout):
        m = PLAY.search(block)
        if m:
            count = re.search(r"hosts \((\d+)\)", block)
            out.append((m.group(1), m.group(2), int(count.group(1)) if count else 0))
    return out


def without_identity(plays):
    assert [name for _, name, _ in plays[:2]] == IDENTITY, plays
    # the forget play runs on the first node (its tasks skipped) when no node is another machine
    assert [count for _, _, count in plays[:2]] == [2, 1], plays
    return plays[2:]


def test_site_yml_computes_the_plan_once_and_runs_every_stage_on_every_node():
    plays = without_identity(list_hosts("site.yml"))
    # no play per stage that matches no host (each printed "skipping: no hosts matched")
    assert not [p for p in plays if p[1].startswith("Cluster plan") or p[2] == 0], plays
    assert plays[0][1] == "Stage preflight" and plays[0][2] == 2
    assert all(count == 2 for _, _, count in plays), plays
    staged = {name for _, name, _ in plays}
    assert {f"Stage {stage}" for stage in STAGES if stage != "launch"} <= staged


@pytest.mark.parametrize("stage", STAGES)
def test_a_stage_run_alone_computes_the_plan_first(stage):
    plays = without_identity(list_hosts(f"playbooks/{stage}.yml"))
    assert plays[0][1].startswith("Cluster plan") and plays[0][2] == 2, plays
    assert all(count == 2 for _, _, count in plays[1:]), plays
    if stage != "launch":
        # the same plays as site.yml's
        assert [name for _, name, _ in plays[1:]] == [name for _, name, _ in list_hosts(f"playbooks/stages/{stage}.yml")]


def test_preflight_logs_in_again_without_become_whatever_the_inventory_says():
    """After a become failure preflight logs in again without become, to tell a node that does not answer
    (a dead bastion) from a sudo that does not. The inventory's ansible_become outranks a task's
    `become: false`, so that login must set the variable: with the keyword it escalated again and, when
    ssh's exit lost the race with the become timeout, a dead bastion was named a sudo that did not confirm."""
    tasks = yaml.safe_load((REPO / "roles" / "preflight" / "tasks" / "become_failed.yml").read_text())
    (login,) = [t for t in tasks if t.get("register") == "__preflight_login"]
    assert login["vars"]["ansible_become"] is False and "become" not in login
