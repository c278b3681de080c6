"""The check catalog (plugins/module_utils/verify/catalog.py): selection, the records of a module result,
and which stage result of this run stands in for a check inside site.yml."""

from __future__ import annotations

import helpers  # (puts collections/ on sys.path)
import pytest
from ansible_collections.provision.cluster.plugins.module_utils.verify import catalog as K

PLAN = helpers.CHECK_PLAN


Var = helpers.CheckVars


def ctx(mine=None, others=None, host="n1"):
    return K.Context(host, PLAN, ["n1", "n2"], Var(mine or {}, others))


def test_selection_reach_always_smoke_only_when_asked_and_unknown_names():
    assert K.select() == [n for n in K.PUBLIC if n != "smoke"]
    assert K.select(["mesh", "gcc"]) == ["reach", "mesh", "gcc"]
    assert K.select([]) == ["reach"]
    assert K.select(None, smoke=True)[-1] == "smoke"
    with pytest.raises(K.UnknownCheck, match="unknown check nope; known: reach, sshd"):
        K.select(["nope"])


def test_a_name_runs_what_its_checks_need_but_reports_only_its_own():
    assert K.expand(["reach", "nccl"]) == ["reach", "env", "nccl", "nccl_in_effect"]
    assert K.reported(["reach", "nccl"]) == ["reach", "nccl", "nccl_in_effect"]
    assert "landing" in K.expand(["runtime"]) and "compare" in K.expand(["versions"])


def test_every_entry_with_a_module_builds_its_arguments_from_the_plan_and_role_defaults():
    defaults = {"node_runtime_min_nofile": 16384, "node_runtime_shm_min": "1g", "pdsh_hosts_file": "/etc/pdsh/hosts",
                "gcc_toolchain_min_version": "9", "python_env_path": "/opt/provision/venv",
                "python_env_backend": "venv"}
    c = ctx(defaults)
    for spec in K.CATALOG:
        if spec.module and spec.phase == K.NODE:
            args = spec.args(c)
            assert isinstance(args, dict) and args, spec.name
    assert K.BY_NAME["sshd"].args(c)["ports"] == [2222]
    # the rendezvous port free, the SSH port free or held by sshd (preflight_port_allowed_holders)
    assert K.BY_NAME["ports"].args(c) == {"ports": [2222, 29500], "expect": "free", "allowed_holders": ["sshd"]}
    assert K.BY_NAME["runtime"].args(c)["cluster_address"] == "10.0.0.1"
    assert K.BY_NAME["runtime"].args(c)["cluster_user"] == "train"
    assert K.BY_NAME["versions"].args(c)["python"] == "/opt/provision/venv/bin/python"
    assert K.BY_NAME["versions"].args(c)["cache"] == "/opt/provision/venv/.provision-versions.json"
    # the packages python_env pins are always compared (issue 32: verify alone missed a node's other numpy),
    # then verify_packages, each once
    assert K.BY_NAME["versions"].args(c)["packages"] == ["numpy"]          # the role's default pins numpy
    pinned = dict(defaults, python_env_extra_packages=["numpy==2.3.5", "deepspeed[all]==0.16.4"])
    assert K.BY_NAME["versions"].args(ctx(pinned))["packages"] == ["numpy", "deepspeed"]
    assert K.BY_NAME["versions"].args(ctx(dict(pinned, verify_packages=["numpy", "flash-attn"])))["packages"] == [
        "numpy", "deepspeed", "flash-attn"]
    assert K.BY_NAME["nccl"].args(c)["rendezvous"] == {"name": "n1", "address": "10.0.0.1", "port": 29500}
    conda = ctx(dict(defaults, python_env_backend="conda", python_env_conda_prefix="/opt/conda",
                     python_env_conda_env_name="ml"))
    assert K.BY_NAME["versions"].args(conda)["python"] == "/opt/conda/envs/ml/bin/python"
    assert K.BY_NAME["versions"].args(ctx(dict(defaults, verify_python="/x/bin/python")))["python"] == "/x/bin/python"


def test_the_launch_files_are_checked_against_every_node_of_the_plan_in_launch_order():
    c = ctx({"launchers_dir": "~train/.provision/launch"}, host="n2")
    assert K.BY_NAME["launchers"].args(c) == {
        "path": "~train/.provision/launch", "user": "train", "node": "n2", "nodes": ["n1", "n2"], "master": "n1",
        "master_addr": "10.0.0.1", "master_port": 29500, "ssh_port": 2222}
    # verify --limit n2 checks one node, whose files list them all (the module puts the master first)
    plan = dict(PLAN, hosts=["n1", "n2", "n3"], master="n3", master_addr="10.0.0.3")
    limited = K.Context("n2", plan, ["n2"], Var({"launchers_dir": "/srv/launch"}))
    args = K.BY_NAME["launchers"].args(limited)
    assert args["nodes"] == ["n1", "n2", "n3"] and args["master"] == "n3" and args["master_addr"] == "10.0.0.3"
    assert args["path"] == "/srv/launch"
    # where the directory's setting cannot be known (its default names cluster_plan, which verify --local lacks)
    assert K.BY_NAME["launchers"].when(ctx({"launchers_dir": None})) is False
    assert not K.BY_NAME["launchers"].local and K.BY_NAME["launchers"].stage == "launchers"


def test_records_name_the_node_and_one_shape_for_every_outcome():
    spec = K.BY_NAME["ports"]
    listed = {"checks": [{"check": "port 29500", "status": "fail", "detail": "29500 is held by pid 42 (python)\nmore",
                          "fix": "stop it: kill 42"}]}
    assert spec.records("n1", listed) == [{"check": "port 29500 free", "status": "fail", "node": "n1",
                                          "detail": "29500 is held by pid 42 (python)", "fix": "stop it: kill 42"}]
    crashed = spec.records("n1", {"failed": True, "msg": "MODULE FAILURE\nSee stdout/stderr"})
    assert crashed[0]["status"] == "fail" and crashed[0]["detail"] == "MODULE FAILURE"
    assert "provision verify --only ports -v" in crashed[0]["fix"]
    assert spec.records("n1", {"skipped": True}) == []
    down = spec.records("n1", {"unreachable": True, "msg": "timed out"})
    assert down[0]["status"] == "fail" and "make n1 reachable" in down[0]["fix"]


def test_sshd_failure_names_the_stage_that_fixes_it_once():
    spec = K.BY_NAME["sshd"]
    out = spec.records("n2", {"checks": [{"check": "port 2222", "status": "fail", "detail": "nothing listens on 2222",
                                         "fix": "set Port 2222"}]})
    assert out[0]["check"] == "sshd listening (port 2222)"
    assert out[0]["fix"] == ("set Port 2222; the sshd role does it: ansible-playbook site.yml --tags sshd --limit n2")
    named = spec.records("n2", {"checks": [{"check": "sshd listening on 2222", "status": "pass", "detail": "ok"}]})
    assert named[0]["check"] == "sshd listening on 2222"


def test_the_nccl_interface_from_the_env_block_is_named_so():
    c = ctx()
    c.results = {"env": {"seen": {"NCCL_SOCKET_IFNAME": "ib0"}}, "nccl": {"socket_ifname": "eth1"}}
    spec = K.BY_NAME["nccl_in_effect"]
    assert spec.when(c) and spec.args(c)["socket_ifname"] == "ib0"
    bad, skipped = spec.records("n2", {"checks": [
        {"check": "nccl_net.socket_ifname", "status": "fail",
         "detail": "n2: nccl_net_socket_ifname=ib0: no such interface (have: eth0, eth1, lo)",
         "fix": "set nccl_net_socket_ifname, or fix cluster_address"},
        {"check": "nccl_net.ib", "status": "skip", "detail": "n2: NCCL_IB_DISABLE=1", "fix": ""}]}, c)
    assert bad["detail"] == ("NCCL_SOCKET_IFNAME=ib0 from ~/.bashrc (what non-interactive ssh gets): "
                             "n2: no such interface (have: eth0, eth1, lo)")
    assert bad["fix"].startswith("the env block exports another interface than nccl_net chose: "
                                 "ansible-playbook site.yml --tags shell_env --limit n2")
    assert skipped["detail"] == "n2: NCCL_IB_DISABLE=1"
    c.results["env"]["seen"]["NCCL_SOCKET_IFNAME"] = "eth1"
    assert not spec.when(c)


CHECKS = [{"check": "x", "status": "pass", "detail": "ok", "fix": ""}]


RUN = "1764673200.000001-42"


def stage_ctx(name, result, run=RUN, mine=None, host="n1"):
    """A node where a stage ran entry NAME through the check action in run RUN (its record), seen by the
    verify pass of run PLAN.run."""
    spec = K.BY_NAME[name]
    c = K.Context(host, dict(PLAN, run=RUN), ["n1", "n2"], Var(mine or {}))
    rec = K.record(spec, run, spec.args(c), result)
    return K.Context(host, dict(PLAN, run=RUN), ["n1", "n2"], Var(dict(mine or {}, provision_checks={name: rec})))


@pytest.mark.parametrize("result, stands_in", [
    ({"changed": False, "checks": CHECKS}, True),
    ({"checks": CHECKS}, True),
    ({"changed": True, "checks": CHECKS}, False),        # the call changed what it read
    ({"failed": True, "msg": "boom", "checks": CHECKS}, False),
    ({"unreachable": True, "msg": "timed out"}, False),
    ({"skipped": True}, False),
    ({"changed": False, "checks": []}, False),           # ran no check (pdsh's check: false)
])
def test_a_stage_record_stands_in_when_its_call_failed_nowhere_and_changed_nothing(result, stands_in):
    for name in ("ports", "gcc", "runtime"):
        assert (K.stand_in(K.BY_NAME[name], stage_ctx(name, result)) is not None) is stands_in, name


def test_a_record_stands_in_only_in_its_own_run_and_with_the_arguments_verify_passes_now():
    spec = K.BY_NAME["gcc"]
    ok = {"checks": CHECKS, "plan": {"missing": []}}
    assert K.stand_in(spec, stage_ctx("gcc", ok))["checks"] == CHECKS
    # a record left in the fact cache by an earlier run
    assert K.stand_in(spec, stage_ctx("gcc", ok, run="1764000000.000000-7")) is None
    # verify run alone has no run of its stages (and a plan without a run id takes no record)
    c = stage_ctx("gcc", ok)
    assert K.stand_in(spec, K.Context("n1", PLAN, c.hosts, c.var)) is None
    # -e gcc_toolchain_min_version=13 for the verify pass: not the check the stage ran
    c.var["gcc_toolchain_min_version"] = "13"
    assert K.stand_in(spec, c) is None
    # another entry's record never stands in
    assert K.stand_in(K.BY_NAME["ports"], stage_ctx("gcc", ok)) is None


def test_the_versions_record_stands_in_only_for_the_packages_it_read():
    """Issue 32: python_env recorded numpy; verify asking for more (verify_packages) reads again."""
    pinned = {"python_env_extra_packages": ["numpy==2.3.5"]}
    result = {"checks": CHECKS, "ansible_facts": {"python_env_versions": {"torch": "2.13.0", "packages": {"numpy": "2.3.5"}}}}
    c = stage_ctx("versions", result, mine=pinned)
    taken = K.stand_in(K.BY_NAME["versions"], c)
    assert taken["versions"]["packages"] == {"numpy": "2.3.5"}
    c.var["verify_packages"] = ["NumPy"]      # the same package, another spelling: the same arguments
    assert K.stand_in(K.BY_NAME["versions"], c) is not None
    c.var["verify_packages"] = ["deepspeed"]
    assert K.stand_in(K.BY_NAME["versions"], c) is None


def test_a_record_keeps_what_the_later_phases_read_and_the_hardware_facts():
    result = {"checks": CHECKS, "gpu_health": {"gpu_count": 8, "driver_version": "570.1", "gpus": ["..."]},
              "ansible_facts": {"gpu_health": {"gpu_count": 8}, "other": 1}}
    rec = K.record(K.BY_NAME["gpu_health"], RUN, {}, result)
    assert rec["keep"] == {"gpu_health": {"gpu_count": 8, "driver_version": "570.1"}}
    assert rec["facts"] == {"gpu_health": {"gpu_count": 8}}
    taken = K.stand_in(K.BY_NAME["gpu_health"], stage_ctx("gpu_health", result))
    assert K.BY_NAME["gpu_health"].keep(taken) == rec["keep"] and taken["ansible_facts"] == rec["facts"]
    # a record that does not stand in keeps nothing more than why
    assert K.record(K.BY_NAME["gpu_health"], RUN, {}, {"changed": True, "checks": CHECKS}) == {
        "run": RUN, "args": K.fingerprint({}), "ok": False}


def test_fingerprints_are_blind_to_key_order_only():
    assert K.fingerprint({"a": 1, "b": [1, 2]}) == K.fingerprint({"b": [1, 2], "a": 1})
    assert K.fingerprint({"a": 1, "b": [1, 2]}) != K.fingerprint({"a": 1, "b": [2, 1]})
    assert K.fingerprint({"a": 1}) != K.fingerprint({"a": "1"})


def test_only_the_arguments_an_entry_names_may_come_from_its_stage():
    """What a stage adds plans or configures (the packages to install, limits to write); never what the
    check reads or judges, which would make its record another check than verify's."""
    assert K.BY_NAME["runtime"].stage_keys == {"manage_limits", "manage_shm", "fail_on_check", "warn_on_check"}
    assert K.BY_NAME["pdsh"].stage_keys == {"check", "check_if_changed", "expect_hostnames", "fail_on_check",
                                            "fail_if_absent", "export_env"}
    assert K.BY_NAME["gcc"].stage_keys == {"fail_below"}
    for spec in K.CATALOG:
        if spec.args is not None and spec.stage_keys:
            c = K.Context("n1", PLAN, ["n1", "n2"], Var({"python_env_path": "/opt/provision/venv",
                                                         "python_env_backend": "venv", "launchers_dir": "/x"}))
            own = spec.args(c)
            # a key that is the check's own may only say how the call runs (its bound, its writes, stopping)
            assert spec.stage_keys & set(own) <= K.HOW, spec.name


@pytest.mark.parametrize("reading, derived", [
    ({"gpu_count": 0, "reason": "nvidia-smi not found: no NVIDIA driver on this node", "pci_gpus": []}, True),
    ({"gpu_count": 0, "reason": "nvidia-smi not found", "pci_gpus": ["00000000:18:00.0"]}, False),  # a GPU the driver lost
    ({"gpu_count": 0}, False),
    ({"gpu_count": 8, "pci_gpus": ["a"] * 8}, False),
])
def test_gpu_health_is_the_skips_where_the_gpu_check_read_no_gpu(reading, derived):
    c = ctx()
    c.results = {"gpu": {"checks": CHECKS, "ansible_facts": {"gpu_facts": reading}}}
    assert (K.BY_NAME["gpu_health"].derive(c) is not None) is derived
    c.results = {"gpu": K.BY_NAME["gpu"].keep({"checks": CHECKS, "ansible_facts": {"gpu_facts": reading}})}
    assert (K.BY_NAME["gpu_health"].derive(c) is not None) is derived   # from a record's kept reading too


def test_describe_lists_every_public_check_once():
    names = [n for n, _ in K.describe()]
    assert names == K.PUBLIC and len(set(names)) == len(names)
    records = K.describe_checks()
    assert [r["name"] for r in records] == K.PUBLIC
    assert [r["summary"] for r in records] == [s for _, s in K.describe()]
    # every entry a --check NAME runs shows up under it: its module, or the controller's comparison
    for r in records:
        entries = [K.BY_NAME[e] for e in K.reported([r["name"]])]
        assert set(r["modules"]) == {e.module for e in entries if e.module}
        assert r["controller"] == any(e.phase == K.CLUSTER for e in entries)
        assert r["local_default"] == (r["name"] in K.LOCAL_DEFAULT) and (r["local"] or not r["local_default"])


def test_sshd_down_on_a_node_without_init_says_why_a_restart_lost_it():
    c = ctx()
    spec = K.BY_NAME["sshd"]
    result = {"init": "catatonit", "checks": [{"check": "port 2222", "status": "fail", "detail": "2222 is free",
                                               "fix": "start the service that should listen on 2222"}]}
    c.results = {"sshd": result}
    (rec,) = spec.records("n1", result, c)
    assert rec["detail"] == "2222 is free; PID 1 is catatonit, no init system: nothing starts sshd again after the node restarts"
    assert rec["fix"].startswith("ansible-playbook site.yml --tags sshd --limit n1 after every restart, or start sshd")
    c.results = {"sshd": dict(result, init="systemd")}
    (rec,) = spec.records("n1", dict(result, init="systemd"), c)
    assert "no init system" not in rec["detail"] and "the sshd role does it" in rec["fix"]


def test_site_yml_verify_pass_leaves_out_the_checks_of_skipped_stages():
    from ansible_collections.provision.cluster.plugins.plugin_utils.verify import selection

    everything, _ = selection(None, False, True, {"ansible_run_tags": ["all"], "ansible_skip_tags": []})
    assert everything == K.select()
    skipped, entries = selection(None, False, True, {"ansible_run_tags": ["all"], "ansible_skip_tags": ["python_env"]})
    assert "versions" not in skipped and "sshd" in skipped
    # provision verify itself (not in site.yml) never leaves a check out for tags
    assert selection(None, False, False, {"ansible_skip_tags": ["python_env"]})[0] == K.select()
    assert "versions" not in entries and "compare" not in entries  # nor as what consistency needs


def test_consistency_names_the_node_whose_mtu_differs_from_verify_data():
    data = {h: {"nccl": {"link": {"mtu": 1500, "speed": 10000, "driver": "veth"}, "kernel": "6.1.0"},
                "gpu": {"gpu": {"driver_version": "", "driver_cuda_version": ""}}} for h in ("n1", "n2", "n3")}
    data["n2"]["nccl"]["link"]["mtu"] = 9000
    cc = K.ClusterContext(["n1", "n2", "n3"], data, Var({}))
    records, extra = K.BY_NAME["consistency"].cluster(cc)
    by = {c["node"]: c for c in records}
    assert by["n2"]["status"] == "fail" and "MTU of the NCCL interface 9000 while 2 other node(s) have 1500" in by["n2"]["detail"]
    assert by["n1"]["status"] == "pass" and extra == {}


def test_nccl_probes_the_login_ring_by_default_and_every_node_with_full():
    """Each probe makes the peer's sshd fork a pre-auth child: the ring's nodes by default (a constant
    number per node), every node with verify_matrix: full (provision verify --full)."""
    hosts = ["n1", "n2", "n3", "n4", "n5", "n6"]
    plan = dict(PLAN, hosts=hosts, address_of={h: "10.0.0.%d" % i for i, h in enumerate(hosts, 1)},
                nodes=[{"name": h, "address": "10.0.0.%d" % i, "rank": i - 1} for i, h in enumerate(hosts, 1)])
    ring = K.BY_NAME["nccl"].args(K.Context("n2", plan, hosts, Var({})))
    assert ring["probe_peers"] == ["n3", "n5"] and len(ring["peers"]) == 6
    # --limit n2 (site.yml or verify): n2's way to its ring's peers, which the play does not hold
    limited = K.BY_NAME["nccl"].args(K.Context("n2", plan, ["n2"], Var({})))
    assert limited["probe_peers"] == ["n3", "n5"] and limited["peers"] == ring["peers"]
    full = K.BY_NAME["nccl"].args(K.Context("n2", plan, hosts, Var({"verify_matrix": "full"})))
    assert "probe_peers" not in full
    # --limit '!n3': n3 is down and left out; nothing probes it, the decision still counts it as a peer
    left = [h for h in hosts if h != "n3"]
    down = K.BY_NAME["nccl"].args(K.Context("n2", plan, left, Var({"ansible_limit": "!n3"})))
    assert down["probe_peers"] == ["n4", "n5"] and len(down["peers"]) == 6
    down_full = K.BY_NAME["nccl"].args(K.Context("n2", plan, left, Var({"ansible_limit": "!n3",
                                                                        "verify_matrix": "full"})))
    assert down_full["probe_peers"] == ["n1", "n4", "n5", "n6"]
    assert K.BY_NAME["nccl_in_effect"].args(K.Context("n1", plan, hosts, Var({})))["probe_peers"] == ["n2", "n4"]



def test_pdsh_lists_the_whole_cluster_and_reaches_the_nodes_ring_among_it_whatever_the_limit():
    """verify --limit n2 (or site.yml --limit n2): the hosts file is the cluster's, not the play's (a limited
    run would otherwise find, or write, a file of one node), and n2's pdsh reaches its ring's nodes."""
    hosts = ["n1", "n2", "n3", "n4", "n5", "n6"]
    plan = dict(PLAN, hosts=hosts)
    var = {"pdsh_hosts_file": "/etc/pdsh/hosts", "pdsh_connect_timeout": 10, "pdsh_command_timeout": 30}
    whole = K.BY_NAME["pdsh"].args(K.Context("n2", plan, hosts, Var(var)))
    limited = K.BY_NAME["pdsh"].args(K.Context("n2", plan, ["n2"], Var(var)))
    assert whole == limited
    assert limited["hosts"] == hosts and limited["targets"] == ["n2", "n3", "n5"]
    full = K.BY_NAME["pdsh"].args(K.Context("n2", plan, ["n2"], Var(dict(var, verify_matrix="full"))))
    assert "targets" not in full and full["hosts"] == hosts
    # --limit '!n3' (site.yml's advice for a node that is down): no check reaches n3, the file keeps it
    left = [h for h in hosts if h != "n3"]
    down = K.BY_NAME["pdsh"].args(K.Context("n2", plan, left, Var(dict(var, ansible_limit="!n3"))))
    assert down["hosts"] == hosts and down["targets"] == ["n2", "n4", "n5"]
    down_full = K.BY_NAME["pdsh"].args(K.Context("n2", plan, left, Var(dict(var, ansible_limit="all:!n3",
                                                                            verify_matrix="full"))))
    assert down_full["targets"] == left
    # an inventory that sets pdsh_hosts (another name per node, say) is what the file must list
    own = K.BY_NAME["pdsh"].args(K.Context("n1", plan, hosts, Var(dict(var, pdsh_hosts=["a", "b"]))))
    assert own["hosts"] == ["a", "b"]

def test_derived_skips_are_the_health_modules_own_records():
    """Where the gpu check read no GPU and the nccl check no RDMA device, gpu_health and fabric are the
    records gpu_health_info and fabric_health_info give on such a node (the same functions build them);
    dcgmi diag (verify_dcgm) is run whatever the reading."""
    from ansible_collections.provision.cluster.plugins.module_utils.gpu import fabric_health, gpu_health
    reason = "nvidia-smi not found: no NVIDIA driver on this node"
    c = ctx()
    c.results = {"gpu": {"checks": CHECKS, "ansible_facts": {"gpu_facts": {"gpu_count": 0, "reason": reason,
                                                                            "pci_gpus": []}}},
                 "nccl": K.BY_NAME["nccl"].keep({"checks": CHECKS, "rdma": {}})}
    gpu = K.BY_NAME["gpu_health"].derive(c)
    assert gpu["checks"] == gpu_health.no_gpu_checks(reason, "n1")
    assert {x["status"] for x in gpu["checks"]} == {"skip"} and "none on the PCI bus" in gpu["checks"][0]["detail"]
    assert K.BY_NAME["gpu_health"].keep(gpu) == {"gpu_health": {"gpu_count": 0, "driver_version": ""}}
    fabric = K.BY_NAME["fabric"].derive(c)
    assert fabric["checks"] == fabric_health.fabric_checks([], node="n1")
    c.results["nccl"] = K.BY_NAME["nccl"].keep({"checks": CHECKS, "rdma": {"mlx5_0": {}}})
    assert K.BY_NAME["fabric"].derive(c) is None
    c.results["nccl"] = {"checks": CHECKS}     # a reading that says nothing of RDMA
    assert K.BY_NAME["fabric"].derive(c) is None
    c.var["verify_dcgm"] = True
    assert K.BY_NAME["gpu_health"].derive(c) is None
