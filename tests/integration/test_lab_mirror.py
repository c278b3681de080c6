"""The lab's package mirror (issue 19): built once per release, served inside the lab, named in
the inventory; every package the roles may install installs from it on each release's bare
node, and nothing in the lab reaches outside.

One 3-node lab (bullseye, bookworm, trixie; systemd; bare): conftest's release_lab, which
test_lab_flavours used before (one bring-up for both).
"""

from __future__ import annotations

import json
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import bounds
from helpers import RELEASE_LAB_OPTIONS as OPTIONS, RELEASES, ansible_env, lab_cmd, node_exec, tool, REPO

from provision.lab import mirror

pytestmark = pytest.mark.lab



@pytest.fixture(scope="module")
def lab(release_lab):
    yield release_lab
    release_lab.down()


def _unsafe(value):
    return value.get("__ansible_unsafe", value) if isinstance(value, dict) else value


def test_the_mirror_is_served_and_named_in_the_inventory(lab):
    server = lab.status["mirror"]
    k = lab.status["nodes"][0]["address"].split(".")[2]
    assert server["url"] == f"http://10.89.{k}.2:8080" and server["state"] == "running"
    assert server["layout"] == "flat"
    for release in RELEASES:
        info = server["releases"][release]
        assert info["debs"] > 50 and info["bytes"] > 10e6
        print(f"mirror {release}: {info['debs']} debs, {info['bytes'] / 1e6:.0f} MB, built in {info['seconds']} s")
    inv = subprocess.run([tool("ansible-inventory"), "-i", str(REPO / "inventory/lab"), "--list"],
                         env=ansible_env(lab.name), capture_output=True, text=True, check=True, cwd=REPO)
    data = json.loads(inv.stdout)
    assert data["cluster"]["hosts"] == ["node1", "node2", "node3"]  # the mirror is no node
    for host, hv in data["_meta"]["hostvars"].items():
        assert _unsafe(hv["cluster_package_mirror"]) == server["url"]
        assert _unsafe(hv["cluster_package_mirror_layout"]) == "flat"
    # the lab wrote no apt source into the nodes: they keep a fresh VM's
    out = node_exec(lab.name, 2, "grep -rhs '^deb \\|^URIs:' /etc/apt/sources.list /etc/apt/sources.list.d/").stdout
    assert "10.89." not in out and "deb.debian.org" in out


def test_every_package_the_roles_may_install_installs_from_the_mirror(lab):
    """On each release's bare node, with the lab mirror as the only apt source: all of
    MIRROR_PACKAGES at once (bookworm with Recommends, the others without)."""
    url = lab.status["mirror"]["url"]
    packages = " ".join(mirror.MIRROR_PACKAGES)

    def install(i: int) -> subprocess.CompletedProcess:
        release = RELEASES[i - 1]
        recommends = "" if release == "bookworm" else "--no-install-recommends"
        return node_exec(lab.name, i, f"""
            set -e
            echo 'deb [trusted=yes] {url}/{release} ./' > /tmp/lab-mirror.list
            o="-q -o Dir::Etc::SourceList=/tmp/lab-mirror.list -o Dir::Etc::SourceParts=/dev/null"
            o="$o -o DPkg::Options::=--force-unsafe-io"  # the test's time, not the mirror's
            export DEBIAN_FRONTEND=noninteractive
            apt-get $o update >/tmp/apt.log 2>&1
            apt-get $o install -y {recommends} {packages} >>/tmp/apt.log 2>&1 || {{ tail -20 /tmp/apt.log; exit 1; }}
            for t in gcc g++ make pdsh iperf3 ip rsync sudo mpirun munged slurmd slurmctld sinfo; do
                command -v $t >/dev/null || echo "missing $t"
            done
            python3 -m venv /tmp/venv-check && echo venv-ok
        """, check=False, timeout=bounds.INSTALL)

    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(install, [1, 2, 3]))
    print(f"all mirror packages installed on 3 releases in {time.monotonic() - t0:.0f} s")
    for release, proc in zip(RELEASES, results):
        assert proc.returncode == 0, f"{release}: {proc.stdout}{proc.stderr}"
        assert "missing" not in proc.stdout and "venv-ok" in proc.stdout, f"{release}: {proc.stdout}"


def test_nothing_in_the_lab_reaches_outside(lab):
    """No route and no name server leads out of the lab: a connect to an address outside it (TEST-NET-1,
    RFC 5737, which nothing routes) fails at once with no route, and no name resolves (the lab's networks
    have no DNS: nothing forwards a query to this machine's resolver); the nodes' own (VM) apt sources
    fail without waiting."""
    probe = ("python3 - <<'EOF'\nimport socket\ntry:\n"
             "    socket.create_connection(('192.0.2.1', 80), timeout=5)\n    print('REACHED')\n"
             "except OSError as exc:\n    print('blocked', exc.errno)\n"
             "try:\n    socket.getaddrinfo('deb.debian.org', 80)\n    print('RESOLVED')\n"
             "except OSError:\n    print('no-dns')\nEOF")
    for i in (1, 2, 3):
        out = node_exec(lab.name, i, probe).stdout.split()
        assert out == ["blocked", "101", "no-dns"], out   # 101: ENETUNREACH
        routes = node_exec(lab.name, i, "cat /proc/net/route").stdout.splitlines()[1:]
        assert not [r for r in routes if r.split()[1] == "00000000"], routes   # no default route
    server = subprocess.run(["podman", "exec", f"{lab.name}-mirror", "sh", "-c", probe],
                            capture_output=True, text=True, timeout=bounds.COMMAND)
    assert server.stdout.split() == ["blocked", "101", "no-dns"], server.stdout + server.stderr
    # the nodes' own sources: apt gives up at once (no name, no route), it does not wait out its timeouts
    update = node_exec(lab.name, 3, "apt-get -q -o Acquire::Retries=0 update", check=False, timeout=bounds.COMMAND)
    assert "deb.debian.org" in update.stdout + update.stderr


def test_up_again_reuses_the_cache_and_down_removes_the_mirror(lab):
    before = {r: mirror.read_stamp(r)["built"] for r in RELEASES}
    lab_cmd("up", "--nodes", "3", *OPTIONS, lab_name=lab.name)
    # reused: no release indexed again (the stamps); its seconds are not asserted, they follow the
    # machine's load (20.8 s once, beside a 32-node lab's all-reduce)
    assert {r: mirror.read_stamp(r)["built"] for r in RELEASES} == before
    lab_cmd("down", lab_name=lab.name)
    names = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True,
                           check=True).stdout.split()
    assert f"{lab.name}-mirror" not in names
    assert all((mirror.mirror_root() / r / "Packages").is_file() for r in RELEASES)  # the cache stays
