"""What a node is (plugins/module_utils/common/node_facts.py): parsers and detection on snapshots captured
from real nodes (tests/fixtures/runtime/README.md)."""

from __future__ import annotations

import pytest

from unit.runtime_snapshots import HEALTHY, IPC_HOST, IPC_PID_HOST, LOWLIM, SHM64, VM, snap
from ansible_collections.provision.cluster.plugins.module_utils.ssh import landing as LD
from ansible_collections.provision.cluster.plugins.module_utils.common import limits as LIM
from ansible_collections.provision.cluster.plugins.module_utils.common import node_facts as NF
from ansible_collections.provision.cluster.plugins.module_utils.common import sizes


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


def test_identity_from_snapshot():
    ident = NF.node_identity(snap(HEALTHY), "node1 abc\n")
    assert ident["hostname"] == "node1" and ident["token"] == "node1 abc"
    assert ident["machine_id"] == ""  # the lab image has no /etc/machine-id: not an identity
    assert LD.token_name(ident["token"]) == "node1"


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
