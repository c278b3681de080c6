"""`provision verify --local --slurm-drain` (src/provision/slurm_health.py): the reason it writes, the
decision drain/resume/nothing, reading `scontrol show node -o`, and the CLI around it (scontrol and the
checks faked). The lab test (tests/integration/test_lab_slurm_jobs.py) runs it under a real slurmd."""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

import helpers  # noqa: F401
from provision import slurm_health as H
from provision import verify as core
from provision.cli import cli

SHM = {"node": "node2", "check": "shm", "status": "fail",
       "detail": "/dev/shm is 64 MiB, needs >= 1 GiB (1 GiB floor, 0 GPUs x 2 GiB)",
       "fix": "run the container with --shm-size=1g"}
NOFILE = {"node": "node2", "check": "nofile", "status": "fail", "detail": "soft RLIMIT_NOFILE 1024 < 16384", "fix": "x"}

# `scontrol show node -o node2` on the lab's SLURM 22.05.8 (Debian bookworm) after
# `scontrol update nodename=node2 state=drain reason="bad DIMM, ticket 42"`
ADMIN_LINE = ('NodeName=node2 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=6.50 AvailableFe'
              'atures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=10.89.151.12 NodeHostName=node2 Version=22.'
              '05.8 OS=Linux 6.18.44-fc-v595 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=1000 AllocMem=0 FreeMem=15364 So'
              'ckets=2 Boards=1 State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partit'
              'ions=lab  BootTime=2026-11-25T11:42:32 SlurmdStartTime=2026-11-25T11:49:58 LastBusyTime=2026-11-25T1'
              '1:49:58 CfgTRES=cpu=2,mem=1000M,billing=2 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSenso'
              'rsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=bad DIMM, ticket 42 [root@2026-11-25T11:53:'
              '09]')


def state(s="IDLE", reason="", name="node2"):
    return H.NodeState(name, s, reason, "root" if reason else "")


# ---------------------------------------------------------------- the reason

def test_reason_names_the_check_and_its_cause_with_our_prefix():
    assert H.format_reason([SHM]) == ("provision: shm: /dev/shm is 64 MiB, needs >= 1 GiB (1 GiB floor, 0 GPUs x 2 GiB)")


def test_reason_counts_the_other_failures_and_stays_one_short_line():
    reason = H.format_reason([SHM, NOFILE])
    assert reason.startswith("provision: shm: /dev/shm is 64 MiB") and reason.endswith(" (+1 more)")
    long = dict(SHM, detail="word " * 200 + '"quoted"\nsecond line')
    cut = H.format_reason([long, NOFILE])
    assert len(cut) <= H.REASON_MAX and cut.endswith("... (+1 more)") and "\n" not in cut
    assert '"' not in H.format_reason([dict(SHM, detail='iface "eth9"\nmissing')])
    assert H.format_reason([dict(SHM, detail='iface "eth9"\nmissing')]).endswith("iface 'eth9' missing")
    assert H.format_reason([]) == ""


# ---------------------------------------------------------------- the decision

def test_a_failure_drains_a_healthy_node():
    act = H.decide([SHM], state("IDLE"))
    assert (act.kind, act.reason) == ("drain", H.format_reason([SHM]))
    assert H.scontrol_argv(act, "node2") == ["scontrol", "update", "nodename=node2", "state=drain",
                                             "reason=" + H.format_reason([SHM])]
    assert H.exit_code(act) == 1
    # also a node running a job (MIXED/ALLOCATED): drain lets the job finish
    assert H.decide([SHM], state("MIXED")).kind == "drain"


def test_our_own_drain_is_kept_or_relabelled_never_duplicated():
    ours = state("IDLE+DRAIN", H.format_reason([SHM]))
    assert H.decide([SHM], ours).kind == "nothing"
    relabel = H.decide([NOFILE], ours)
    assert relabel.kind == "drain" and relabel.reason.startswith("provision: nofile:")


def test_an_admins_drain_is_never_touched():
    admin = state("IDLE+DRAIN", "bad DIMM, ticket 42")
    assert H.decide([SHM], admin).kind == "nothing"          # not relabelled with our reason
    act = H.decide([], admin)
    assert act.kind == "nothing" and "not ours" in act.why   # not resumed
    assert H.exit_code(act) == 0
    assert H.decide([], state("DRAINING", "maintenance")).kind == "nothing"


def test_passing_checks_resume_only_our_drain():
    act = H.decide([], state("IDLE+DRAIN", "provision: shm: /dev/shm is 64 MiB"))
    assert act.kind == "resume" and H.scontrol_argv(act, "node2") == ["scontrol", "update", "nodename=node2",
                                                                      "state=resume"]
    assert H.decide([], state("MIXED+DRAIN", "provision: nccl_net: eth9 is down")).kind == "resume"
    assert H.decide([], state("IDLE")).kind == "nothing"
    assert H.scontrol_argv(H.decide([], state("IDLE")), "node2") is None


def test_node_state_flags():
    assert state("IDLE+DRAIN").drained and state("DRAINED").drained and state("MIXED+DRAIN").drained
    assert state("DOWN*+DRAIN").drained and not state("DOWN*").drained and not state("IDLE").drained
    assert state("IDLE+DRAIN", "provision: x: y").ours and not state("IDLE+DRAIN", "provisional").ours


# ---------------------------------------------------------------- scontrol's view

def test_parse_scontrol_show_node():
    node = H.parse_node(ADMIN_LINE + "\n", "node2")
    assert (node.state, node.reason, node.reason_user, node.address) == ("IDLE+DRAIN", "bad DIMM, ticket 42", "root",
                                                                         "10.89.151.12")
    idle = H.parse_node(ADMIN_LINE.replace("State=IDLE+DRAIN", "State=IDLE").split(" Reason=")[0], "node2")
    assert (idle.state, idle.reason, idle.drained) == ("IDLE", "", False)


def test_node_name_from_slurmd(monkeypatch):
    monkeypatch.setenv("SLURMD_NODENAME", "gpu07")
    assert H.node_name() == "gpu07" and H.node_name("node3") == "node3"
    monkeypatch.delenv("SLURMD_NODENAME")
    monkeypatch.setattr(H.socket, "gethostname", lambda: "node9.cluster.example")
    assert H.node_name() == "node9"


def test_health_environment_fills_what_slurmd_leaves_out(monkeypatch):
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("HOME", raising=False)
    H.health_environment()
    import os

    assert "/usr/bin" in os.environ["PATH"].split(":") and os.environ["HOME"]


# ---------------------------------------------------------------- run() and the CLI, scontrol faked

class FakeSlurm:
    def __init__(self, line):
        self.line = line
        self.calls = []

    def __call__(self, argv):
        self.calls.append(argv)
        return self.line if argv[1] == "show" else ""


def _doc(*fails):
    return {"ok": not fails, "checks": [dict(f) for f in fails], "nodes": [{"name": "node2"}]}


def test_run_drains_and_resumes_with_scontrol(monkeypatch):
    fake = FakeSlurm(ADMIN_LINE.replace("State=IDLE+DRAIN", "State=IDLE").split(" Reason=")[0])
    monkeypatch.setattr(H, "_scontrol", fake)
    seen = []
    out = H.run(lambda node, addr: seen.append((node, addr)) or _doc(SHM), "node2")
    assert seen == [("node2", "10.89.151.12")]
    assert out["action"] == "drain" and out["applied"] and out["exit_code"] == 1
    assert fake.calls[-1] == ["scontrol", "update", "nodename=node2", "state=drain", "reason=" + H.format_reason([SHM])]
    fake.line = ADMIN_LINE.replace("bad DIMM, ticket 42", H.format_reason([SHM]))
    out = H.run(lambda node, addr: _doc(), "node2")
    assert out["action"] == "resume" and fake.calls[-1][-1] == "state=resume" and out["exit_code"] == 0


def test_checks_that_do_not_finish_change_nothing(monkeypatch):
    """slow is not broken (a node busy with jobs): no drain without a cause, exit 2"""
    fake = FakeSlurm("NodeName=node2 State=IDLE NodeAddr=10.0.0.2")
    monkeypatch.setattr(H, "_scontrol", fake)

    def hang(node, addr):
        raise TimeoutError("the checks did not finish within 45 s")

    with pytest.raises(H.SlurmError, match="did not finish within 45 s; node2 left as it is"):
        H.run(hang, "node2")
    assert [c[1] for c in fake.calls] == ["show"]


def test_unknown_node_is_an_error(monkeypatch):
    monkeypatch.setattr(H, "_scontrol", FakeSlurm("Node nodeX not found\n"))
    with pytest.raises(H.SlurmError, match="knows no node 'nodeX'"):
        H.run(lambda node, addr: _doc(), "nodeX")


def test_cli_slurm_drain_prints_one_line_and_exits_with_the_verdict(monkeypatch):
    fake = FakeSlurm("NodeName=node2 NodeAddr=10.0.0.2 State=IDLE")
    monkeypatch.setattr(H, "_scontrol", fake)
    monkeypatch.setattr(core, "verify_local", lambda node, **kw: _doc(SHM))
    res = CliRunner().invoke(cli, ["verify", "--local", "--slurm-drain", "--node-name", "node2"])
    assert res.exit_code == 1, res.output
    assert "node2: drained" in res.output and "reason: provision: shm: /dev/shm is 64 MiB" in res.output
    res = CliRunner().invoke(cli, ["verify", "--slurm-drain", "--node-name", "node2", "--json"])
    assert json.loads(res.stdout)["action"] == "drain"


def test_cli_slurm_drain_without_scontrol_exits_2(monkeypatch):
    monkeypatch.setattr(H.shutil, "which", lambda name: None)
    res = CliRunner().invoke(cli, ["verify", "--slurm-drain", "--node-name", "node2"])
    assert res.exit_code == 2 and "scontrol is not on PATH" in res.output


def test_local_refuses_checks_that_need_other_nodes():
    assert core.select_local([]) == ["reach", "gpu", "nccl", "runtime", "gpu_health", "fabric"]
    assert core.select_local(["sshd"]) == ["reach", "sshd"]
    with pytest.raises(core.VerifyError, match="mesh need"):
        core.select_local(["mesh"])
    res = CliRunner().invoke(cli, ["verify", "--local", "-i", "inventory/lab"])
    assert res.exit_code == 2


def test_local_inventory_is_this_node_over_the_local_connection():
    inv = json.loads(core.local_inventory("node2", "10.0.0.2", python="/opt/p/bin/python"))
    # ansible_become false: the checks run as whoever runs them (slurmd's root), never through sudo
    assert inv == {"cluster": {"hosts": {"node2": {"ansible_connection": "local", "ansible_python_interpreter":
                                                   "/opt/p/bin/python", "cluster_address": "10.0.0.2",
                                                   "ansible_become": False}}}}


@pytest.mark.parametrize(("euid", "source"), [(0, "login"), (1000, "module")])
def test_local_limits_are_a_login_of_the_cluster_user_for_root_else_the_callers_own(monkeypatch, euid, source):
    """runuser -l works for root alone: a training user running `verify --local` (the GPU proof as
    trainee on the H200 said 'nofile could not be measured (none)') measures its own session instead."""
    seen = {}

    def build_command(inventory, checks, extra_vars, args):
        seen["vars"] = json.loads(extra_vars[0])
        raise RuntimeError("stop here")

    monkeypatch.setattr(core.os, "geteuid", lambda: euid)
    monkeypatch.setattr(core, "build_command", build_command)
    with pytest.raises(RuntimeError, match="stop here"):
        core.verify_local("node2")
    assert seen["vars"] == {"verify_local": True, "node_runtime_limits_source": source}


def test_catalog_local_expansion_leaves_out_ssh_checks():
    cat = core.catalog()
    assert "landing" in cat.expand(["runtime"]) and "landing" not in cat.expand(["runtime"], local=True)
    assert all(cat.BY_NAME[n].local for n in cat.LOCAL_DEFAULT)


@pytest.mark.skipif(os.geteuid() != 0, reason="a tree of another uid needs root")
def test_the_health_check_refuses_an_installation_another_user_can_write(tmp_path, monkeypatch):
    """issue 31 item 2: slurmd runs the health check as root every interval; an install of provision in
    the training user's venv (what docs/slurm.md used to show) would run that user's code as root."""
    venv = tmp_path / "venv"
    (venv / "lib" / "python3.11" / "site-packages" / "provision").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    init = venv / "lib" / "python3.11" / "site-packages" / "provision" / "__init__.py"
    init.write_text("")
    assert H.install_problems(str(venv)) == []
    os.lchown(init, 65534, 65534)
    assert H.install_problems(str(venv)) == [f"{init} is owned by uid 65534"]
    monkeypatch.setattr(H, "install_problems", lambda: [f"{init} is owned by uid 65534"])
    monkeypatch.setattr(core, "verify_local", lambda node, **kw: pytest.fail("the checks ran"))
    res = CliRunner().invoke(cli, ["verify", "--local", "--slurm-drain", "--node-name", "node2"])
    assert res.exit_code == 2, res.output
    assert f"installation another user can write ({init} is owned by uid 65534); fix: install provision in a root-owned venv" \
        in " ".join(res.output.split())
