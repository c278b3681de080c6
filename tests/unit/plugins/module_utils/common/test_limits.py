"""The runtime rules (plugins/module_utils/common/limits.py): /dev/shm, memlock, nofile, pam_limits culprits, the
limits drop-in and fstab, on snapshots captured from real nodes (tests/fixtures/runtime/README.md)."""

from __future__ import annotations

import pytest

from unit.runtime_snapshots import HEALTHY, LOWLIM, SHM64, VM, snap
from ansible_collections.provision.cluster.plugins.module_utils.common import limits as LIM
from ansible_collections.provision.cluster.plugins.module_utils.common import node_facts as NF
from ansible_collections.provision.cluster.plugins.module_utils.common import sizes

DROPIN = "/etc/security/limits.d/90-provision.conf"


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
