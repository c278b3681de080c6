"""node_runtime parsers and rules on real captures (tests/fixtures/runtime/README.md)."""

from __future__ import annotations

import json

import pytest

from helpers import REPO
from ansible_collections.provision.cluster.plugins.module_utils import landing as LD
from ansible_collections.provision.cluster.plugins.module_utils import limits as LIM
from ansible_collections.provision.cluster.plugins.module_utils import node_facts as NF
from ansible_collections.provision.cluster.plugins.module_utils import sizes
from ansible_collections.provision.cluster.plugins.module_utils.diagnose import explain_resource_error

RT = REPO / "tests" / "fixtures" / "runtime"
DROPIN = "/etc/security/limits.d/90-provision.conf"


def snap(name):
    return json.loads((RT / f"{name}.json").read_text())


HEALTHY = "podman-node1-healthy"
LOWLIM = "podman-node2-memlock64k-nofile1024"
SHM64 = "podman-shm64m"
IPC_HOST = "podman-ipc-host"
IPC_PID_HOST = "podman-ipc-host-pid-host"
VM = "controller-firecracker-vm"


# ---------------------------------------------------------------- parsers


def test_parse_limits_low_node():
    lim = NF.parse_limits(snap(LOWLIM)["files"]["/proc/self/limits"])
    assert lim["memlock"] == (65536, 65536)
    assert lim["nofile"] == (1024, 4096)
    assert lim["stack"] == (8388608, None)  # "unlimited" hard


def test_parse_capeff_lacks_ipc_lock_in_podman_default():
    cap = NF.parse_capeff(snap(HEALTHY)["files"]["/proc/self/status"])
    assert cap is not None and not cap & (1 << LIM.CAP_IPC_LOCK)


def test_parse_environ_nul_and_lines(fixtures_dir):
    env1 = NF.parse_environ(snap(HEALTHY)["files"]["/proc/1/environ"])
    assert env1["container"] == "podman" and env1["HOSTNAME"] == "node1"
    env = NF.parse_environ((fixtures_dir / "h100-node" / "cuda-env.txt").read_text())
    assert env["NVIDIA_VISIBLE_DEVICES"] == "0"
    assert env["LD_LIBRARY_PATH"].split(":")[0] in NF.DRIVER_LIB_DIRS


def test_mountinfo_shm_sizes():
    assert NF.parse_mountinfo(snap(SHM64)["files"]["/proc/self/mountinfo"], "/dev/shm")["options"] == "rw,size=65536k"
    # the controller mounts /dev/shm twice: the last mount wins
    vm = NF.parse_mountinfo(snap(VM)["files"]["/proc/self/mountinfo"], "/dev/shm")
    assert vm["fstype"] == "tmpfs" and vm["options"] == "rw,size=24682416k"
    assert NF.parse_mountinfo("", "/dev/shm") is None


def test_fib_trie_local_addresses(fixtures_dir):
    assert NF.parse_fib_trie_local(snap(HEALTHY)["files"]["/proc/net/fib_trie"]) == \
        ["10.89.231.11", "10.90.231.18", "127.0.0.1"]
    h100 = NF.parse_fib_trie_local((fixtures_dir / "h100-node" / "net" / "proc-net-fib_trie.txt").read_text())
    assert "127.0.0.1" in h100 and len(h100) >= 2


def test_ldconfig_has_no_driver_in_lab():
    s = snap(HEALTHY)
    assert "libc.so.6" in s["ldconfig"]
    assert NF.parse_ldconfig(s["ldconfig"]) == {}
    line = "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"
    assert NF.parse_ldconfig(line) == {"libcuda.so.1": "/usr/lib/x86_64-linux-gnu/libcuda.so.1"}


def test_sizes():
    assert sizes.parse_size("64m") == 64 * sizes.MIB
    assert sizes.parse_size("2GiB") == 2 * sizes.GIB
    assert sizes.parse_size("1073741824") == sizes.GIB
    with pytest.raises(ValueError):
        sizes.parse_size("lots")
    assert sizes.human(64 * sizes.MIB) == "64 MiB" and sizes.human(None) == "unlimited"
    assert sizes.docker_size(16 * sizes.GIB) == "16g" and sizes.docker_size(512 * sizes.MIB) == "512m"


def test_one_size_parser_for_shm_sizes_and_message_sizes():
    # node_runtime's spellings (docker/podman --shm-size) and the smoke test's (nccl-tests -b/-e)
    for spelling in ("64m", "64M", "64MiB", "64MB", "64mb", "65536k", "65536KiB"):
        assert sizes.parse_size(spelling) == 64 * sizes.MIB, spelling
    assert sizes.parse_size("1t") == sizes.TIB and sizes.parse_size(4096) == 4096
    with pytest.raises(ValueError, match="not a size"):
        sizes.parse_size("64 parsecs")
    # shown rounded for limits, exact for the all-reduce table's message sizes
    assert sizes.human(1536 * sizes.MIB) == "1.5 GiB" and sizes.human(1536 * sizes.MIB, exact=True) == "1536 MiB"
    assert sizes.human(1000, exact=True) == "1000 B" and sizes.human(64 * sizes.MIB, exact=True) == "64 MiB"


# ---------------------------------------------------------------- detection


@pytest.mark.parametrize("name,container,runtime,host_pid,host_ipc", [
    (HEALTHY, True, "podman", False, False),
    (LOWLIM, True, "podman", False, False),
    (IPC_HOST, True, "podman", False, True),
    (IPC_PID_HOST, True, "podman", True, True),
    (VM, False, None, True, True),
])
def test_container_and_namespaces(name, container, runtime, host_pid, host_ipc):
    facts = NF.runtime_facts(snap(name))
    assert facts["container"]["container"] is container
    assert facts["container"]["runtime"] == runtime
    assert facts["namespaces"]["host_pid"] is host_pid
    assert facts["namespaces"]["host_ipc"] is host_ipc


def test_vm_with_stale_dockerenv_is_not_a_container():
    facts = NF.runtime_facts(snap(VM))
    assert snap(VM)["exists"]["/.dockerenv"] is True
    assert "treated as a VM/bare metal" in facts["container"]["evidence"][0]
    assert facts["pid1"] == "process_api" and facts["systemd"] is False


def test_pid_host_container_on_cgroup_v2_still_a_container():
    """--pid=host with a private cgroup namespace ("0::/"): the overlay root names the image store."""
    s = snap(IPC_PID_HOST)
    s["files"]["/proc/self/cgroup"] = "0::/\n"
    s["files"]["/proc/1/cgroup"] = None
    s["exists"]["/run/.containerenv"] = False
    got = NF.detect_container(s)
    assert got["container"] is True and got["runtime"] == "podman"
    assert "root filesystem is an overlay in podman/cri-o's storage" in got["evidence"]


def test_kubernetes_env_and_cgroup_win():
    s = snap(HEALTHY)
    s["files"]["/proc/1/environ"] = "PATH=/bin\0KUBERNETES_SERVICE_HOST=10.96.0.1\0"
    assert NF.detect_container(s)["runtime"] == "kubernetes"


def test_namespace_comparison_needs_host_pid():
    s = snap(IPC_PID_HOST)
    # the host's PID 1 links are unreadable there: with a non-initial inode it cannot tell
    s["links"]["/proc/self/ns/ipc"] = "ipc:[4026532000]"
    assert NF.detect_namespaces(s)["host_ipc"] is None
    s["links"]["/proc/1/ns/ipc"] = "ipc:[4026532000]"
    assert NF.detect_namespaces(s)["host_ipc"] is True


def test_shm_gpus_rdma_of_lab():
    facts = NF.runtime_facts(snap(SHM64))
    assert facts["shm"]["size"] == 64 * sizes.MIB and facts["shm"]["free"] == 64 * sizes.MIB
    assert facts["gpus"]["count"] == 0 and facts["gpus"]["notes"] == []
    assert facts["rdma"] == {"devices": [], "uverbs": [], "present": False}
    assert facts["nr_open"] == 1048576


def test_gpus_in_nvidia_container_env_without_devices(fixtures_dir):
    env = NF.parse_environ((fixtures_dir / "h100-node" / "cuda-env.txt").read_text())
    gpus = NF.detect_gpus(snap(HEALTHY), env)
    assert gpus["nvidia_visible_devices"] == "0"
    assert "without the NVIDIA runtime" in gpus["notes"][0]


def test_gpus_with_device_nodes():
    s = snap(HEALTHY)
    s["dirs"]["/dev"] = ["nvidia-uvm", "nvidia0", "nvidia1", "nvidia10", "nvidiactl"]
    gpus = NF.detect_gpus(s)
    assert gpus["count"] == 3 and gpus["devices"][-1] == "/dev/nvidia10"
    assert "libcuda.so is not" in gpus["notes"][0]
    s["lib_dirs"] = {"/usr/local/nvidia/lib64": ["libcuda.so.1", "libnvidia-ml.so.1"]}
    assert NF.detect_gpus(s)["notes"] == []


# ---------------------------------------------------------------- rules


def test_required_shm_rule():
    assert LIM.required_shm(0) == sizes.GIB
    assert LIM.required_shm(1) == 2 * sizes.GIB
    assert LIM.required_shm(8) == 16 * sizes.GIB
    assert LIM.required_shm(8, minimum=sizes.GIB, per_gpu=sizes.GIB // 2) == 4 * sizes.GIB


def test_check_shm_64m_container_names_fix():
    f = NF.runtime_facts(snap(SHM64))
    c = LIM.check_shm(f["shm"], 0, True, "podman")
    assert c["status"] == "fail" and c["measured"] == 64 * sizes.MIB and c["required"] == sizes.GIB
    assert "/dev/shm is 64 MiB, need >= 1 GiB" in c["detail"]
    assert "podman run --shm-size=1g" in c["fix"] and "--ipc=host" in c["fix"]
    k8s = LIM.check_shm(f["shm"], 8, True, "kubernetes")
    assert "medium: Memory, sizeLimit: 16Gi" in k8s["fix"] and "/dev/shm" in k8s["fix"]


def test_check_shm_healthy_and_bare_metal():
    f = NF.runtime_facts(snap(HEALTHY))
    assert LIM.check_shm(f["shm"], 0, True, "podman")["status"] == "pass"
    bad = LIM.check_shm(f["shm"], 4, False, None)
    assert bad["status"] == "fail" and "node_runtime_manage_shm: true" in bad["fix"]
    full = dict(f["shm"], free=10 * sizes.MIB)
    assert LIM.check_shm(full, 0, True, "podman")["status"] == "warn"


def test_check_memlock_rules():
    lim = NF.parse_limits(snap(LOWLIM)["files"]["/proc/self/limits"])
    cap = NF.parse_capeff(snap(LOWLIM)["files"]["/proc/self/status"])
    no_rdma = {"devices": [], "present": False}
    assert LIM.check_memlock(lim, no_rdma, True, "podman", cap)["status"] == "pass"
    forced = LIM.check_memlock(lim, no_rdma, True, "podman", cap, require="true", source="ssh")
    assert forced["status"] == "fail" and forced["measured"] == 65536
    assert "memlock is 64 KiB soft / 64 KiB hard (ssh), need unlimited" in forced["detail"]
    assert "--ulimit memlock=-1:-1 --cap-add IPC_LOCK" in forced["fix"]
    rdma = {"devices": ["mlx5_0"], "present": True}
    bare = LIM.check_memlock(lim, rdma, False, None, cap)
    assert bare["status"] == "fail" and "mlx5_0" in bare["detail"] and DROPIN in bare["fix"]
    lock = snap("podman-ipc-lock-only")  # --cap-add IPC_LOCK, memlock still 8 MiB
    lock_lim = NF.parse_limits(lock["files"]["/proc/self/limits"])
    lock_cap = NF.parse_capeff(lock["files"]["/proc/self/status"])
    passed = LIM.check_memlock(lock_lim, rdma, True, "podman", lock_cap)
    assert passed["status"] == "pass" and "CAP_IPC_LOCK" in passed["detail"] and lock_lim["memlock"][0] == 8 * sizes.MIB
    assert LIM.check_memlock({"memlock": (None, None)}, rdma, True, "podman")["status"] == "pass"
    assert "IPC_LOCK" in LIM.check_memlock(lim, rdma, True, "kubernetes")["fix"]


def test_check_nofile_rules():
    lim = NF.parse_limits(snap(LOWLIM)["files"]["/proc/self/limits"])
    c = LIM.check_nofile(lim, 16384, True, "podman", source="ssh")
    assert c["status"] == "fail" and c["measured"] == 1024 and c["required"] == 16384
    assert "podman run --ulimit nofile=16384:16384" in c["fix"]
    soft_only = LIM.check_nofile(lim, 2048, True, "podman")
    assert soft_only["status"] == "fail" and "node_runtime_manage_limits" in soft_only["fix"]
    healthy = NF.parse_limits(snap(HEALTHY)["files"]["/proc/self/limits"])
    assert LIM.check_nofile(healthy, 16384, True, "podman")["status"] == "pass"


def test_container_policy_warns_only_for_runtime_fixes():
    lim = NF.parse_limits(snap(LOWLIM)["files"]["/proc/self/limits"])
    shm = NF.runtime_facts(snap(SHM64))["shm"]
    checks = [LIM.check_shm(shm, 0, True, "kubernetes"), LIM.check_nofile(lim, 2048, True, "podman", manage=True),
              LIM.check_nofile(lim, 16384, True, "podman")]
    assert [c["status"] for c in LIM.apply_container_policy(checks, True, "warn")] == ["warn", "fail", "warn"]
    assert checks[1]["fix"].startswith("run the node_runtime stage (node_runtime_manage_limits writes the soft limit")
    again = [LIM.check_nofile(lim, 16384, True, "podman")]
    assert LIM.apply_container_policy(again, True, "fail")[0]["status"] == "fail"
    assert LIM.apply_container_policy(again, False, "warn")[0]["status"] == "fail"


def test_dropin_container_only_raises_soft_to_hard():
    lim = NF.parse_limits(snap(LOWLIM)["files"]["/proc/self/limits"])
    assert LIM.limits_dropin_lines("root", lim, True, 2048, False, 1048576) == [("root", "soft", "nofile", "4096")]
    # hard 4096 < 16384: only the container runtime can fix it; memlock hard is not unlimited
    assert LIM.limits_dropin_lines("root", lim, True, 16384, True, 1048576) == []
    # after the drop-in took effect (soft = hard) the same file is computed: idempotent
    after = dict(lim, nofile=(4096, 4096))
    assert LIM.limits_dropin_lines("root", after, True, 2048, False, 1048576) == \
        LIM.limits_dropin_lines("root", lim, True, 2048, False, 1048576)


def test_dropin_bare_metal_and_validation():
    lim = NF.parse_limits(snap(VM)["files"]["/proc/self/limits"])
    lines = LIM.limits_dropin_lines("train", lim, False, 65536, True, 1048576)
    assert lines == [("train", "soft", "memlock", "unlimited"), ("train", "hard", "memlock", "unlimited"),
                     ("train", "soft", "nofile", "65536"), ("train", "hard", "nofile", "1048576")]
    text = LIM.render_dropin(lines, "# header\n")
    assert LIM.validate_dropin(text)
    with pytest.raises(ValueError, match="fs.nr_open"):
        LIM.limits_dropin_lines("train", lim, False, 2000000, False, 1048576)
    with pytest.raises(ValueError, match="line 2"):
        LIM.validate_dropin("# c\ntrain soft nofiles 10\n")


def test_fstab_with_shm():
    fstab = "# /etc/fstab\nUUID=1 / ext4 defaults 0 1\n"
    out = LIM.fstab_with_shm(fstab, "16g")
    assert out.endswith("tmpfs\t/dev/shm\ttmpfs\tdefaults,nosuid,nodev,size=16g\t0\t0\n")
    again = LIM.fstab_with_shm(out, "32g")
    assert again.count("/dev/shm") == 1 and "size=32g" in again and "size=16g" not in again
    assert LIM.fstab_with_shm(again, "32g") == again


def test_container_fix_per_runtime():
    assert LIM.container_fix("docker", "nofile", nofile=65536) == \
        "re-create the container with `docker run --ulimit nofile=65536:65536`"
    assert "replaces containers.conf" in LIM.container_fix("podman", "memlock")
    assert "equivalent" in LIM.container_fix("lxc", "shm", size=sizes.GIB)


# ---------------------------------------------------------------- landing


def _expected(name, address, token):
    return {"name": name, "address": address, "hostname": name, "token": token}


def test_landing_ok_and_wrong_node():
    ok = LD.parse_landing_report((RT / "landing-node1-to-node2-ok.txt").read_text())
    assert ok["hostname"] == "node2" and "10.89.231.12" in ok["addresses"]
    node2 = _expected("node2", "10.89.231.12", ok["token"])
    assert LD.landing_verdict("node2", node2, ok) == (True, "")
    wrong = LD.parse_landing_report((RT / "landing-node1-to-node2-wrong-node1.txt").read_text())
    good, reason = LD.landing_verdict("node2", node2, wrong)
    assert not good
    assert reason.startswith("`ssh node2` landed on node1, not node2: node-id is node1")
    assert "10.89.231.12 is not on its interfaces" in reason
    # both are containers of one host: boot_id alone cannot tell them apart
    assert ok["boot_id"] == wrong["boot_id"]


def test_landing_pair_from_a_captured_report():
    """The one parse-and-judge step shared by ssh_landing (its own ssh) and ssh_mesh_check (its reports)."""
    text = (RT / "landing-node1-to-node2-ok.txt").read_text()
    node2 = _expected("node2", "10.89.231.12", LD.parse_landing_report(text)["token"])
    pair = LD.landing_pair("node2", node2, text)
    assert pair["ok"] and pair["peer"] == "node2" and pair["reason"] == "" and pair["reported"]["hostname"] == "node2"
    wrong = LD.landing_pair("node2", node2, (RT / "landing-node1-to-node2-wrong-node1.txt").read_text())
    assert not wrong["ok"] and wrong["reason"].startswith("`ssh node2` landed on node1")
    with pytest.raises(ValueError):
        LD.landing_pair("node2", node2, "node2\n")


def test_landing_with_inventory_only_peers():
    ok = LD.parse_landing_report((RT / "landing-node1-to-node2-ok.txt").read_text())
    wrong = LD.parse_landing_report((RT / "landing-node1-to-node2-wrong-node1.txt").read_text())
    peer = {"name": "node2", "address": "10.89.231.12"}
    assert LD.landing_verdict("node2", peer, ok) == (True, "")
    good, reason = LD.landing_verdict("node2", peer, wrong)
    assert not good and "node-id is node1" in reason and "10.89.231.12 is not on its interfaces" in reason
    copied = dict(ok, token="node2 0000")  # same name, other nonce: a sibling made from node2's image
    good, reason = LD.landing_verdict("node2", dict(peer, token=ok["token"]), copied)
    assert not good and "nonce differs" in reason


def test_landing_on_host_without_token():
    wrong = LD.parse_landing_report((RT / "landing-node1-to-node2-wrong-node1.txt").read_text())
    wrong = dict(wrong, token="", hostname="node2")
    ok, reason = LD.landing_verdict("node2", _expected("node2", "10.89.231.11", "node2 abc"), wrong)
    assert not ok and "without /etc/provision/node-id" in reason


def test_check_landing_names_pair():
    results = [{"alias": "node1", "peer": "node1", "ok": True, "reason": ""},
               {"alias": "node2", "peer": "node2", "ok": False, "reason": "`ssh node2` landed on node1, not node2"}]
    c = LD.check_landing("node1", results)
    assert c["status"] == "fail" and c["pairs"] == ["node1->node2"]
    assert c["detail"].startswith("node1: `ssh node2` landed on node1") and "~/.ssh/config" in c["fix"]
    down = LD.check_landing("node1", [{"alias": "node2", "peer": "node2", "ok": False,
                                       "reason": "`ssh node2` failed: Permission denied (publickey)."}])
    assert "ssh_mesh" in down["fix"]
    assert LD.check_landing("node1", results[:1])["status"] == "pass"
    assert LD.check_landing("node1", [])["status"] == "skip"


def test_identity_from_snapshot():
    ident = NF.node_identity(snap(HEALTHY), "node1 abc\n")
    assert ident["hostname"] == "node1" and ident["token"] == "node1 abc"
    assert ident["machine_id"] == ""  # the lab image has no /etc/machine-id: not an identity
    assert LD.token_name(ident["token"]) == "node1"


# ---------------------------------------------------------------- NCCL diagnosis


@pytest.mark.parametrize("name,cause", [
    ("nccl-shm-extend-failed.log", "shm"),
    ("nccl-shm-fallocate.log", "shm"),
    ("torch-dataloader-bus-error.txt", "shm"),
    ("nccl-shm-attach-missing.log", "ipc"),
    ("nccl-ibv-reg-mr.log", "memlock"),
    ("python-emfile-sockets.txt", "nofile"),
])
def test_explain_nccl_resource_error(name, cause):
    got = explain_resource_error((RT / "errors" / name).read_text())
    assert got is not None and got[0] == cause and got[2]


def test_explain_ignores_other_failures(fixtures_dir):
    failures = sorted((fixtures_dir / "h100-node" / "failures").glob("*.log"))
    assert failures
    for log in failures + [fixtures_dir / "h100-node" / "nccl-debug-info-1rank-socket.log"]:
        assert explain_resource_error(log.read_text()) is None, log.name


def test_collect_snapshot_on_this_machine_and_a_tree(tmp_path):
    live = NF.collect_snapshot()
    assert "nofile" in NF.parse_limits(live["files"]["/proc/self/limits"])
    assert live["statvfs"]["/dev/shm"]["f_blocks"] > 0
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").touch()
    (tmp_path / "dev" / "null").touch()
    (tmp_path / ".dockerenv").touch()
    tree = NF.collect_snapshot(root=str(tmp_path))
    assert tree["dirs"]["/dev"] == ["nvidia0"] and tree["exists"]["/.dockerenv"] is True
    assert tree["files"]["/proc/self/limits"] is None and tree["errors"]["/proc/self/limits"]


def test_pam_limit_lines_that_cap_a_login_are_named():
    files = [("/etc/security/limits.conf", "# <domain> <type> <item> <value>\n*  soft  core  0\n"),
             ("/etc/security/limits.d/20-site.conf", "@train  hard  nofile  4096  # old policy\n"
                                                     "*  -  memlock  65536\nroot - nofile 1024\n"),
             ("/etc/security/limits.d/90-provision.conf", "ml  -  nofile  1024\n")]
    ours = "/etc/security/limits.d/90-provision.conf"
    # a group line for a member, a wildcard line; our own drop-in is not a culprit
    assert LIM.pam_limit_culprits(files, "ml", {"ml", "train"}, "nofile", 16384, ours) == [
        "/etc/security/limits.d/20-site.conf:1: @train hard nofile 4096 # old policy"]
    assert LIM.pam_limit_culprits(files, "ml", {"ml"}, "nofile", 16384, ours) == []
    assert LIM.pam_limit_culprits(files, "ml", {"ml"}, "memlock", None, ours) == [
        "/etc/security/limits.d/20-site.conf:2: * - memlock 65536"]
    # root: only lines naming root apply (limits.conf(5))
    assert LIM.pam_limit_culprits(files, "root", {"root", "train"}, "nofile", 16384, ours) == [
        "/etc/security/limits.d/20-site.conf:3: root - nofile 1024"]
    assert LIM.pam_limit_culprits(files, "root", {"root"}, "memlock", None, ours) == []
    # high enough, or unlimited: not a culprit
    assert LIM.pam_limit_culprits([("f", "ml hard nofile 1048576\nml - memlock unlimited\n")], "ml", set(),
                                 "nofile", 16384) == []
    assert LIM.pam_limit_culprits([("f", "ml - memlock unlimited\n")], "ml", set(), "memlock", None) == []


def test_nofile_fix_names_the_pam_line_before_the_container():
    limits = {"nofile": (1024, 1024)}
    culprit = ["/etc/security/limits.d/99-x.conf:1: root - nofile 1024"]
    check = LIM.check_nofile(limits, 16384, True, "podman", "ssh", culprits=culprit)
    assert check["status"] == "fail" and "99-x.conf:1: root - nofile 1024" in check["fix"]
    assert "re-create the container" in LIM.check_nofile(limits, 16384, True, "podman", "ssh")["fix"]
    # ours to fix: the container policy does not turn it into a warning
    assert LIM.apply_container_policy([dict(check)], True, "warn")[0]["status"] == "fail"


def test_shared_host_identity_is_what_nccl_hashes():
    fx = REPO / "tests" / "fixtures" / "runtime"
    node1 = LD.parse_landing_report((fx / "landing-node1-to-node2-wrong-node1.txt").read_text())  # node1's report
    node2 = LD.parse_landing_report((fx / "landing-node1-to-node2-ok.txt").read_text())
    assert node1["hostname"] == "node1" and node2["hostname"] == "node2"
    assert node1["boot_id"] == node2["boot_id"]  # containers of one machine: one kernel, one boot id
    pairs = [{"alias": "node1", "peer": "node1", "ok": True, "reason": "", "reported": node1},
             {"alias": "node2", "peer": "node2", "ok": True, "reason": "", "reported": node2}]
    assert LD.shared_host_check("node1", pairs) is None  # hostnames differ: two hosts to NCCL
    # the same two containers when both carry the host's hostname (--network host)
    twin = [dict(pairs[0]), dict(pairs[1], reported=dict(node2, hostname="node1"))]
    check = LD.shared_host_check("node2", twin)
    assert check["status"] == "warn" and check["check"] == "host identity"
    assert check["detail"].startswith("node1 and node2 report the same hostname (node1) and boot id")
    assert "NCCL_HOSTID" in check["fix"] and "--hostname" in check["fix"]
    # a node not in the group, or a failed landing, is not reported
    assert LD.shared_host_check("node3", twin) is None
    assert LD.shared_host_check("node2", [twin[0], dict(twin[1], ok=False)]) is None
