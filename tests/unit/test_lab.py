"""The lab's addressing and `up` plan, without podman."""

from __future__ import annotations

import contextlib
import ipaddress
import subprocess

import helpers  # noqa: F401
from helpers import REPO as REPO_ROOT
import pytest

from provision import lab as lab_core


@pytest.mark.parametrize("k", [2, 77, 254])
def test_every_node_up_to_the_limit_has_valid_distinct_addresses(k):
    """Issue 24: node 16 got 10.90.77.256/28. Every index up to MAX_NODES must get a valid
    cluster address and a /28 side network of its own that overlaps nothing."""
    assert lab_core.MAX_NODES >= 32
    cluster = ipaddress.ip_network(f"10.89.{k}.0/24")
    nets, addrs = [], set()
    for idx in range(1, lab_core.MAX_NODES + 1):
        addr, side = lab_core.node_addresses(k, idx)
        net = ipaddress.ip_network(lab_core.side_subnet(k, idx))
        assert net.prefixlen == 28
        assert ipaddress.ip_address(addr) in cluster
        assert ipaddress.ip_address(side) in net and ipaddress.ip_address(side) != net.network_address + 1
        assert not net.overlaps(cluster)
        nets.append(net)
        addrs.update((addr, side))
    assert len(addrs) == 2 * lab_core.MAX_NODES
    for i, a in enumerate(nets):
        for b in nets[i + 1:]:
            assert not a.overlaps(b), (a, b)


def test_first_fifteen_nodes_keep_their_addresses():
    """Labs that exist keep their addressing: nodes 1-15 are where they always were."""
    for idx in range(1, 16):
        assert lab_core.node_addresses(42, idx) == (f"10.89.42.{10 + idx}", f"10.90.42.{16 * idx + 2}")
    assert lab_core.node_addresses(42, 16)[1] == "10.91.42.2"
    assert lab_core.node_addresses(42, 32)[1] == "10.92.42.2"


def test_subnet_index_sees_the_side_networks_of_big_labs(monkeypatch):
    name = "big"
    k = lab_core._preferred_index(name)
    monkeypatch.setattr(lab_core, "_networks", lambda: [{"name": "x-side20", "subnets": [{"subnet": f"10.91.{k}.64/28"}]}])
    assert lab_core.subnet_index(name) != k


def test_beyond_the_limit_nothing_starts(monkeypatch):
    monkeypatch.setattr(lab_core, "setup_host", lambda **kw: pytest.fail("must not touch the host"))
    monkeypatch.setattr(lab_core, "podman", lambda *a, **kw: pytest.fail("must not run podman"))
    with pytest.raises(lab_core.LabError, match=f"between 1 and {lab_core.MAX_NODES}"):
        lab_core.up(lab_core.LabSpec(name="x", nodes=lab_core.MAX_NODES + 1), setup=False)


def test_a_node_that_fails_to_start_takes_back_what_this_run_created(monkeypatch):
    """Issue 24: `up --nodes 16` left 15 nodes running after failing on the 16th."""
    calls: list[tuple[str, ...]] = []

    def fake_podman(*args, check=True, timeout=600):
        calls.append(args)
        if args[0] == "run" and "x-node3" in args:
            raise lab_core.LabError("`podman run` failed: boom")
        rc = 1 if args[:2] == ("network", "exists") else 0
        return subprocess.CompletedProcess(args, rc, "", "")

    monkeypatch.setattr(lab_core, "podman", fake_podman)
    monkeypatch.setattr(lab_core, "build_image", lambda flavour, **kw: "localhost/img:x")
    monkeypatch.setattr(lab_core, "subnet_index", lambda name, want=None: 50)
    monkeypatch.setattr(lab_core, "check_reachable", lambda subnet: None)  # (never reached: node3 fails)
    monkeypatch.setattr(lab_core, "machine_lock", lambda *a, **kw: contextlib.nullcontext())
    monkeypatch.setattr(lab_core, "list_containers", lambda name: [])
    with pytest.raises(lab_core.LabError, match="removed the 3 node"):
        lab_core.up(lab_core.LabSpec(name="x", nodes=5), setup=False)
    removed = {a[-1] for a in calls if a[:2] == ("rm", "-f")}
    assert removed == {"x-node1", "x-node2", "x-node3"}
    assert not any(a[0] == "run" and "x-node4" in a for a in calls)


def test_todays_images_keep_their_tags():
    """`provision lab up` with no options uses the very images it used before --os/--init/--bare
    existed (a rebuild would re-create every running default lab's nodes)."""
    assert lab_core.image_tag("full") == "localhost/provision-node:full-5d76fc35f8d7"
    assert lab_core.image_tag("minimal") == "localhost/provision-node:minimal-cd7b99f02271"
    assert lab_core.image_tag("full", "bookworm", "none") == lab_core.image_tag("full")


def test_one_image_per_release_init_and_flavour():
    tags = {lab_core.image_tag(f, r, i) for f in lab_core.FLAVOURS for r in lab_core.RELEASES for i in lab_core.INITS}
    assert len(tags) == len(lab_core.FLAVOURS) * len(lab_core.RELEASES) * len(lab_core.INITS)
    assert lab_core.image_tag("bare", "trixie", "systemd").startswith("localhost/provision-node:trixie-bare-systemd-")


def test_bare_images_have_only_what_a_fresh_server_has():
    from provision.lab.images import packages

    assert packages("bare", "none") == ["python3"]
    assert packages("bare", "systemd") == sorted(["python3", "openssh-server", "systemd", "systemd-sysv", "dbus"])
    for pkg in ("gcc", "pdsh", "python3-venv", "iperf3", "iproute2"):
        assert pkg not in packages("bare", "systemd")


@pytest.mark.parametrize("kw,message", [
    ({"nodes": 3, "os": ("bullseye", "bookworm")}, "--os names 2 releases for 3 nodes"),
    ({"os": ("buster",)}, "unknown Debian release 'buster'"),
    ({"init": "openrc"}, "unknown init 'openrc'"),
])
def test_spec_errors_are_found_before_anything_starts(monkeypatch, kw, message):
    monkeypatch.setattr(lab_core, "setup_host", lambda **_: pytest.fail("must not touch the host"))
    monkeypatch.setattr(lab_core, "podman", lambda *a, **_: pytest.fail("must not run podman"))
    with pytest.raises(lab_core.LabError, match=message):
        lab_core.up(lab_core.LabSpec(name="x", **kw))


def test_node_kind_of_nodes_made_before_the_labels():
    assert lab_core.node_kind({lab_core.LABEL_RECIPE: "localhost/provision-node:minimal-cd7b99f02271"}) == \
        {"os": "bookworm", "init": "none", "flavour": "minimal", "bare": False}
    assert lab_core.node_kind({lab_core.LABEL_OS: "trixie", lab_core.LABEL_INIT: "systemd",
                               lab_core.LABEL_FLAVOUR: "bare"})["bare"] is True


def test_fixed_macs_are_unique_per_address():
    macs = {lab_core.node_mac(a) for k in (2, 200) for i in range(1, lab_core.MAX_NODES + 1)
            for a in lab_core.node_addresses(k, i)}
    assert len(macs) == 4 * lab_core.MAX_NODES
    assert all(int(m.split(":")[0], 16) & 0b11 == 0b10 for m in macs)  # locally administered unicast


def test_sysctls_for_many_systemd_nodes_are_raised_never_lowered(tmp_path, monkeypatch):
    proc = tmp_path / "proc"
    (proc / "fs/inotify").mkdir(parents=True)
    (proc / "fs/inotify/max_user_instances").write_text("128\n")
    (proc / "fs/inotify/max_user_watches").write_text("1048576\n")
    # this machine's kernel defaults (6.18): 32 lab nodes alone are 1,024 ARP entries
    (proc / "net/ipv4/neigh/default").mkdir(parents=True)
    (proc / "net/ipv4/neigh/default/gc_thresh2").write_text("512\n")
    (proc / "net/ipv4/neigh/default/gc_thresh3").write_text("1024\n")
    monkeypatch.setattr(lab_core.os, "geteuid", lambda: 0)
    conf = tmp_path / "sysctl.d/90-provision-lab.conf"
    done = lab_core._ensure_sysctls(proc, conf)
    assert done == ["raised fs.inotify.max_user_instances from 128 to 8192",
                    "raised net.ipv4.neigh.default.gc_thresh2 from 512 to 8192",
                    "raised net.ipv4.neigh.default.gc_thresh3 from 1024 to 16384"]  # no IPv6 here: left alone
    assert (proc / "fs/inotify/max_user_instances").read_text() == "8192\n"
    assert (proc / "fs/inotify/max_user_watches").read_text() == "1048576\n"
    assert (proc / "net/ipv4/neigh/default/gc_thresh3").read_text() == "16384\n"
    assert "fs.inotify.max_user_instances = 8192" in conf.read_text()
    # what is higher already is kept at boot too, never lowered by our file
    assert "fs.inotify.max_user_watches = 1048576" in conf.read_text() and "ipv6" not in conf.read_text()
    assert lab_core._ensure_sysctls(proc, conf) == []
    monkeypatch.setattr(lab_core.os, "geteuid", lambda: 1000)
    (proc / "fs/inotify/max_user_instances").write_text("128\n")
    with pytest.raises(lab_core.LabError, match="sudo provision lab setup"):
        lab_core._ensure_sysctls(proc, conf)
    # not root, only the neighbour table low: a small lab still comes up, with the warning
    (proc / "fs/inotify/max_user_instances").write_text("8192\n")
    (proc / "net/ipv4/neigh/default/gc_thresh3").write_text("1024\n")
    warned = lab_core._ensure_sysctls(proc, conf)
    assert len(warned) == 1 and "gc_thresh3 is 1024" in warned[0] and "sudo provision lab setup" in warned[0]


def test_a_read_only_proc_sys_is_said_not_fatal(tmp_path, monkeypatch):
    """This "machine" may itself be a container whose /proc/sys/net is read-only."""
    proc = tmp_path / "proc"
    (proc / "net/ipv4/neigh/default").mkdir(parents=True)
    (proc / "net/ipv4/neigh/default/gc_thresh3").write_text("1024\n")
    monkeypatch.setattr(lab_core.os, "geteuid", lambda: 0)
    real = lab_core.Path.write_text

    def read_only(self, *args, **kwargs):
        if "neigh" in str(self):
            raise PermissionError(30, "Read-only file system")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(lab_core.Path, "write_text", read_only)
    conf = tmp_path / "sysctl.d/90-provision-lab.conf"
    done = lab_core._ensure_sysctls(proc, conf)
    assert done == ["could not raise net.ipv4.neigh.default.gc_thresh3 from 1024 to 16384 (Read-only file system); "
                    "labs of many nodes may fail: sysctl -w net.ipv4.neigh.default.gc_thresh3=16384 on the host"]
    assert "gc_thresh3 = 1024" in conf.read_text()  # the file never claims what did not happen


def test_the_lab_inventory_raises_the_waits_of_a_lab_larger_than_its_machine():
    """One place scales the bounds a lab needs where its nodes share the machine's cores: nothing up to
    4 nodes per core, then the login waits with nodes per core and the all-reduce's with their square;
    each is the role's own default times that factor."""
    import yaml

    from ansible_collections.provision.cluster.plugins.inventory import lab as inv

    assert inv.lab_scales(2, 2) == {"login": 1, "ring": 1}
    assert inv.lab_scales(8, 2) == {"login": 1, "ring": 1}
    assert inv.lab_scales(32, 2) == {"login": 4, "ring": 8}
    assert inv.lab_scales(32, 16) == {"login": 1, "ring": 1}
    assert inv.lab_scales(3, None) == {"login": 1, "ring": 1}

    for var, _kind in inv._SCALED:
        assert isinstance(inv._role_default(var), int), var
    # the bad-node search runs every pair of a round at once: at 32 nodes on 2 cores its 30 s left every
    # pair of a healthy lab timed out ("no pair was healthy: the whole network", 2026-11-27)
    assert dict(inv._SCALED)["allreduce_smoke_isolate_timeout"] == "login"
    assert inv._role_default("pdsh_connect_timeout") == yaml.safe_load(
        (REPO_ROOT / "roles/pdsh/defaults/main.yml").read_text())["pdsh_connect_timeout"]


ROUTES = """\
Iface	Destination	Gateway 	Flags	RefCnt	Use	Metric	Mask		MTU	Window	IRTT
eth0	00000000	0101FF0A	0003	0	0	0	00000000	0	0	0
eth0	0000FF0A	00000000	0001	0	0	0	0000FFFF	0	0	0
podman14	00AA590A	00000000	0001	0	0	0	00FFFFFF	0	0	0
"""


def test_a_lab_network_this_machine_does_not_route_to_is_refused():
    """A lab bridge without an address (seen with --disable-dns on an --internal network) leaves the lab's
    addresses to the default route: traffic meant for the nodes would leave the machine."""
    assert ("podman14", ipaddress.ip_network("10.89.170.0/24")) in lab_core.host_routes(ROUTES)
    lab_core.check_reachable("10.89.170.0/24", ROUTES)
    with pytest.raises(lab_core.LabError, match="no route to the lab network 10.89.171.0/24"):
        lab_core.check_reachable("10.89.171.0/24", ROUTES)


@pytest.mark.parametrize("name", ["../../..", "/home/me", "..", ".hidden", "-x", "a/b", "a b", "x" * 64, ""])
def test_one_name_rule_for_every_lab_command_and_down_never_leaves_the_labs_directory(name, tmp_path, monkeypatch):
    """issue 31 item 4: `lab down --name ../../..` removed $HOME (the name is a directory under
    ~/.cache/provision/labs/), an absolute name that directory. Every command refuses it, exit 2."""
    from click.testing import CliRunner

    from provision.cli import cli

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("x")
    monkeypatch.setattr(lab_core, "podman", lambda *a, **k: pytest.fail("podman ran for a bad name"))
    monkeypatch.setattr(lab_core, "list_containers", lambda n: pytest.fail("podman ran for a bad name"))
    for argv in (["down"], ["status"], ["up"], ["fault", "node2", "--clear"]):
        res = CliRunner().invoke(cli, ["lab", *argv, "--name", name])
        assert res.exit_code == 2 and "is not a lab name" in res.output, (argv, res.output)
    res = CliRunner().invoke(cli, ["lab", "fault", "--clear", "--", name, "node2"])
    assert res.exit_code == 2 and "is not a lab name" in res.output, res.output
    for call in (lambda: lab_core.down(name), lambda: lab_core.status(name), lambda: lab_core.lab_state_dir(name),
                 lambda: lab_core.LabSpec(name=name).check(), lambda: lab_core.fault(name, "node2", clear=True)):
        with pytest.raises(lab_core.LabError, match="is not a lab name"):
            call()
    assert (victim / "keep").exists()


def test_lab_names_that_stay_fine_and_the_inventory_plugin_applies_the_same_rule():
    from ansible_collections.provision.cluster.plugins.inventory import lab as inv

    for name in ("provlab", "t-trust", "sshit1a2b", "lab_2.x", "A" * 63):
        assert lab_core.check_name(name) == name
    assert inv.NAME_RULE == lab_core.NAME_RULE


def test_every_image_is_one_mmdebstrap_run_with_usr_merged_as_its_release_has_it(monkeypatch, tmp_path):
    """CI builds eight node images on a fresh machine: each is one mmdebstrap run (minbase and the
    recipe's packages in one apt run; debootstrap took 55 s where mmdebstrap takes 30-35 s), /usr
    merged as a fresh install of the release has it (bookworm on: the hooks that install usr-is-merged;
    bullseye, which has no such package: the symlinks alone)."""
    from provision.lab import images

    (tmp_path / "provision").mkdir()
    monkeypatch.setattr(images, "cache_dir", lambda: tmp_path / "provision")
    monkeypatch.setattr(images, "machine_lock", lambda *a, **kw: contextlib.nullcontext())
    monkeypatch.setattr(images.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(images, "MERGED_USR_HOOKS", tmp_path)
    argvs = []

    def fake_run(argv, timeout=None, **kw):
        argvs.append(argv)
        raise images.LabError("stop after mmdebstrap")  # the rest of a build needs a real rootfs

    monkeypatch.setattr(images, "_run", fake_run)
    for flavour, release, init in (("full", "bookworm", "none"), ("bare", "bullseye", "systemd"),
                                   ("bare", "trixie", "systemd")):
        with pytest.raises(images.LabError, match="stop after"):
            images._build_image("t", flavour, release=release, init=init, extras=(), log=lambda _m: None)
    assert all(argv[:3] == ["mmdebstrap", "--variant=minbase", "--mode=root"] for argv in argvs)
    assert [argv[-3] for argv in argvs] == ["bookworm", "bullseye", "trixie"]
    assert "--include=" + ",".join(images.packages("full")) in argvs[0]
    assert f"--hook-dir={tmp_path}" in argvs[0] and f"--hook-dir={tmp_path}" in argvs[2]
    assert f"--setup-hook={tmp_path / 'setup00.sh'}" in argvs[1] and not any("--hook-dir" in a for a in argvs[1])
    assert not list((tmp_path / "provision").iterdir())  # the work directory is gone after a failed build
    # a host without the hooks (an older mmdebstrap) still builds, /usr as mmdebstrap leaves it
    monkeypatch.setattr(images, "MERGED_USR_HOOKS", tmp_path / "absent")
    assert not any("hook" in a for a in images.bootstrap_argv(images.recipe("full"), "bookworm", tmp_path / "r"))
    monkeypatch.setattr(images.shutil, "which", lambda name: None)
    with pytest.raises(images.LabError, match="mmdebstrap is missing; run `provision lab setup`"):
        images._build_image("t", "full", release="bookworm", init="none", extras=(), log=lambda _m: None)
