"""verify's node checks, each as soon as what it reads is in (plugin_utils/verify.run_entries), and the
entries a reading at hand decides without a second module run (catalog: derive, derive_from)."""
from __future__ import annotations

import threading
import time

import helpers  # (puts collections/ on sys.path)
from ansible_collections.provision.cluster.plugins.module_utils.net.ports import check_port, port_result
from ansible_collections.provision.cluster.plugins.module_utils.verify import catalog as K
from ansible_collections.provision.cluster.plugins.plugin_utils import verify as V

PASS = [{"check": "x", "status": "pass", "detail": "ok", "fix": ""}]


def report(port, holder=None, pid=4242):
    """One entry of port_facts' `ports` (its RETURN): held and listening by holder, or free."""
    if holder is None:
        return {"port": port, "listening": False, "held": False, "addresses": [], "states": [], "pids": [],
                "processes": [], "summary": "%d is free" % port}
    return {"port": port, "listening": True, "held": True, "addresses": ["0.0.0.0:%d" % port], "states": ["LISTEN"],
            "pids": [pid], "processes": [{"pid": pid, "name": holder, "cmdline": holder}],
            "summary": "%d is held by pid %d (%s)" % (port, pid, holder)}


def ports_result(ssh_holder="sshd"):
    """What port_facts returns for the ports check (its arguments: both ports free or held by sshd)."""
    return port_result([report(2222, ssh_holder), report(29500)], "free", ["sshd"], [2222] if ssh_holder else [],
                       "catatonit")


GPU_NONE = {"checks": PASS, "ansible_facts": {"gpu_facts": {"gpu_count": 0, "pci_gpus": [],
                                                            "reason": "nvidia-smi not found: no NVIDIA driver on this node"}}}
GPU_EIGHT = {"checks": PASS, "ansible_facts": {"gpu_facts": {"gpu_count": 8, "pci_gpus": ["a"] * 8}}}


class Action:
    """What run_entries needs of an action plugin: _execute_module, answered from RESULTS after a short
    round trip, with the start and end of every call."""

    def __init__(self, results, latency=0.05):
        self._connection = type("Conn", (), {})()
        self.results = results
        self.latency = latency
        self.calls = {}
        self.lock = threading.Lock()

    def _execute_module(self, module_name=None, module_args=None, task_vars=None, wrap_async=False):
        start = time.monotonic()
        time.sleep(self.latency)
        with self.lock:
            self.calls.setdefault(module_name, []).append((start, time.monotonic(), module_args))
        return dict(self.results[module_name])


def context(results=None):
    ctx = K.Context("n1", helpers.CHECK_PLAN, ["n1", "n2"], helpers.CheckVars({}))
    ctx.results = results if results is not None else {}
    return ctx


def run(names, results):
    ctx = context()
    action = Action(results)
    derived = V.run_entries(action, [K.BY_NAME[n] for n in names], ctx, {}, parallel=8)
    return ctx, action, derived


def test_a_reading_at_hand_decides_sshd_gpu_health_and_fabric_without_their_modules():
    ctx, action, derived = run(["sshd", "ports", "gpu", "gpu_health", "nccl", "fabric"], {
        "provision.cluster.port_facts": ports_result(),
        "provision.cluster.gpu_facts": GPU_NONE,
        "provision.cluster.nccl_net_facts": {"checks": PASS, "rdma": {}}})
    assert sorted(derived) == ["fabric", "gpu_health", "sshd"]
    assert sorted(action.calls) == ["provision.cluster.gpu_facts", "provision.cluster.nccl_net_facts",
                                    "provision.cluster.port_facts"]
    assert len(action.calls["provision.cluster.port_facts"]) == 1  # the sockets are read once
    # the sshd record is what port_facts gives with the sshd check's own arguments
    sshd = ctx.results["sshd"]
    assert sshd["checks"] == [check_port(report(2222, "sshd"), "listening", ["sshd"])]
    assert sshd["checks"][0]["status"] == "pass" and sshd["init"] == "catatonit"
    assert K.BY_NAME["sshd"].records("n1", sshd, ctx)[0]["check"] == "sshd listening (port 2222)"
    assert [c["status"] for c in ctx.results["gpu_health"]["checks"]] == ["skip"] * len(ctx.results["gpu_health"]["checks"])


def test_sshd_held_by_another_process_fails_as_the_module_says():
    ctx, action, derived = run(["sshd", "ports"], {"provision.cluster.port_facts": ports_result("nc")})
    assert derived == ["sshd"]
    check = ctx.results["sshd"]["checks"][0]
    assert check["status"] == "fail" and check["fix"] == "2222 must be held by sshd; stop pid 4242"
    assert ctx.results["sshd"]["failed_checks"] == [check]


def test_where_the_reading_does_not_decide_the_module_runs_after_it():
    ctx, action, derived = run(["sshd", "ports", "gpu", "gpu_health"], {
        "provision.cluster.port_facts": ports_result(None),  # nothing on 2222: the module says where sshd went
        "provision.cluster.gpu_facts": GPU_EIGHT,
        "provision.cluster.gpu_health_info": {"checks": PASS}})
    assert derived == []
    port_calls = action.calls["provision.cluster.port_facts"]
    assert [c[2]["expect"] for c in port_calls] == ["free", "listening"]  # ports, then sshd's own
    assert port_calls[1][0] >= port_calls[0][1]
    (gpu_start, gpu_end, _), = action.calls["provision.cluster.gpu_facts"]
    (health_start, _, _), = action.calls["provision.cluster.gpu_health_info"]
    assert health_start >= gpu_end  # it waited for the reading that might have decided it


def test_without_the_entry_it_derives_from_it_runs_at_once():
    ctx, action, derived = run(["gpu_health", "sshd"], {
        "provision.cluster.gpu_health_info": {"checks": PASS},
        "provision.cluster.port_facts": ports_result()})
    assert derived == [] and len(action.calls) == 2
    # at the same time: neither waited for anything
    starts = [c[0] for calls in action.calls.values() for c in calls]
    assert max(starts) - min(starts) < action.latency


def test_needs_still_order_the_entries_and_a_stage_record_decides_nothing():
    # a stage's record carries no socket reading: sshd is not derived from it
    ctx = context({"ports": {"checks": PASS}})
    assert K.BY_NAME["sshd"].derive(ctx) is None
    # nccl_in_effect needs env and nccl (its arguments and its `when` read both): it starts when both are in
    assert set(K.BY_NAME["nccl_in_effect"].needs) == {"env", "nccl"}
    ctx, action, derived = run(["nccl_in_effect", "env", "nccl"], {
        "provision.cluster.shell_env_check": {"checks": PASS, "seen": {"NCCL_SOCKET_IFNAME": "ib0"}},
        "provision.cluster.nccl_net_facts": {"checks": PASS, "socket_ifname": "eth0"}})
    (_, env_end, _), = action.calls["provision.cluster.shell_env_check"]
    first, second = sorted(action.calls["provision.cluster.nccl_net_facts"])
    assert second[0] >= max(env_end, first[1]) and second[2]["socket_ifname"] == "ib0"
    assert sorted(ctx.results) == ["env", "nccl", "nccl_in_effect"] and derived == []


def test_entries_that_wait_on_each_other_still_run():
    """The catalog has no cycle (test_catalog); were one made, the entries run instead of waiting forever."""
    a = K.Spec("a", "a", "", module="m.a", args=lambda ctx: {}, needs=("b",))
    b = K.Spec("b", "b", "", module="m.b", args=lambda ctx: {}, derive=lambda ctx: None, derive_from=("a",))
    ctx = context()
    action = Action({"m.a": {"checks": PASS}, "m.b": {"checks": PASS}})
    assert V.run_entries(action, [a, b], ctx, {}) == []
    assert sorted(ctx.results) == ["a", "b"]
