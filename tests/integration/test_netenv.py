"""nccl_net + shell_env in real labs (full and minimal images), proven the way launchers see it:
non-interactive `ssh <peer> printenv VAR` from every node, through the sshd + ssh_mesh stages."""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest
import bounds
from helpers import PlaybookResult, REPO, ansible_env, lab_name, node_exec, run_playbook, tool

from ansible_collections.provision.cluster.plugins.module_utils.common import bashrc as br

pytestmark = pytest.mark.lab

# fixed names: their subnets (hash of the name) do not collide with the other suites' labs
LAB_NAMES = {"full": lab_name("netenv-full"), "minimal": lab_name("netenv-min")}
STAGES = ["preflight", "sshd", "ssh_mesh", "pdsh", "nccl_net", "shell_env"]
EXTRA = {"shell_env_extra_vars": {"PROVISION_TEST": "it works", "QUOTED": "a'b $c"}}

# what each node's user had before we came (the two most common guard forms + their own lines)
USER_BASHRC = {
    1: None,  # Debian's /etc/skel/.bashrc + a user line, made on the node
    2: "# my own rc\nexport EARLY=1\n[[ $- != *i* ]] && return\nalias ll='ls -l'\nexport LATE=2\n",
}

# the address a name has on the node, read with an ioctl (independent of the parsers under test)
IFADDR = ("python3 -c \"import fcntl,socket,struct,sys; s=socket.socket(); "
          "print(socket.inet_ntoa(fcntl.ioctl(s.fileno(),0x8915,struct.pack('256s',sys.argv[1].encode()))[20:24]))\" ")


def _addresses(lab):
    out = {}
    for i in range(1, lab.nodes + 1):
        trie = node_exec(lab.name, i, "cat /proc/net/fib_trie").stdout
        out[i] = next(a for a in re.findall(r"\|-- (10\.89\.\d+\.\d+)", trie) if not a.endswith(".0") and
                      not a.endswith(".255"))
    return out


def _ssh_printenv(lab, src, dst, names):
    """Non-interactive ssh as launchers use it: `ssh <peer> cmd` (the ssh_mesh role's ~/.ssh/config
    gives port, user and key; sshd runs `bash -c`, which reads ~/.bashrc; no tty)."""
    script = "; ".join(f'printf "%s=%s\\n" {n} "${{{n}-<unset>}}"' for n in names)
    out = node_exec(lab.name, src, f"ssh -o ConnectTimeout=5 {dst} '{script}'", timeout=bounds.COMMAND).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _stages(lab, *extra):
    """site.yml through these stages (preflight always runs: it computes the plan)."""
    books = [str(REPO / "site.yml"), "--tags", ",".join(STAGES)]
    argv = [tool("ansible-playbook"), "-i", str(REPO / "inventory/lab"), *books, "-e", json.dumps(EXTRA), *extra]
    proc = subprocess.run(argv, cwd=REPO, env=ansible_env(lab.name), capture_output=True, text=True,
                          timeout=bounds.STAGES, check=False)
    return PlaybookResult(proc)


@pytest.fixture(scope="module", params=["full", "minimal"])
def lab(request, lab_factory):
    lab = lab_factory(LAB_NAMES[request.param], 2, ["--image", request.param])
    lab.flavour = request.param
    lab.addrs = _addresses(lab)
    node_exec(lab.name, 1, "cp /etc/skel/.bashrc ~/.bashrc && echo 'export MINE=kept  # user line' >> ~/.bashrc")
    node_exec(lab.name, 2, f"cat > ~/.bashrc <<'EOF'\n{USER_BASHRC[2]}EOF")
    lab.original = {i: node_exec(lab.name, i, "cat ~/.bashrc").stdout for i in lab.addrs}
    return lab


def test_fresh_run_chooses_the_cluster_network_and_launchers_see_the_block(lab):
    t0 = time.monotonic()
    fresh = _stages(lab)
    lab.fresh_s, lab.fresh_out = time.monotonic() - t0, fresh.stdout
    assert fresh.rc == 0, fresh
    chosen = {}
    for i in lab.addrs:
        ifname = node_exec(lab.name, i, "grep '^export NCCL_SOCKET_IFNAME=' ~/.bashrc | cut -d= -f2").stdout.strip()
        assert node_exec(lab.name, i, IFADDR + ifname).stdout.strip() == lab.addrs[i], (
            f"node{i}: NCCL_SOCKET_IFNAME={ifname} does not hold the cluster address")
        print(f"\n{lab.flavour} node{i}: NCCL_SOCKET_IFNAME={ifname} ({lab.addrs[i]})")
        if lab.flavour == "minimal":
            assert node_exec(lab.name, i, "command -v ip || echo none").stdout.strip() == "none"
        chosen[i] = {"NCCL_SOCKET_IFNAME": ifname, "GLOO_SOCKET_IFNAME": ifname, "NCCL_IB_DISABLE": "1"}
    for i in lab.addrs:
        for j in lab.addrs:   # every node -> every node, itself included; each node has its own choice
            # + what another stage exported (provision_env_pdsh) and the user's extra vars
            expected = dict(chosen[j], PDSH_RCMD_TYPE="ssh", PROVISION_TEST="it works", QUOTED="a'b $c")
            assert _ssh_printenv(lab, i, f"node{j}", list(expected)) == expected, f"node{i} -> node{j}"
        rc = node_exec(lab.name, i, "cat ~/.bashrc").stdout
        assert br.remove_block(rc) == lab.original[i]          # user's lines byte for byte
        assert rc.index(br.BEGIN) < rc.index("return")         # above the guard
        # ~/.deepspeed_env: what is the same on every node and exportable unquoted (the extra vars
        # need quoting; the interface name only when podman gave both nodes the same one)
        common = {k: v for k, v in chosen[i].items() if all(chosen[j][k] == v for j in lab.addrs)}
        ds = node_exec(lab.name, i, "cat ~/.deepspeed_env").stdout.splitlines()
        assert {f"{k}={v}" for k, v in common.items()} | {"PDSH_RCMD_TYPE=ssh"} <= set(ds)
        assert not [line for line in ds if line.split("=")[0] in set(chosen[i]) - set(common)]
        assert not [line for line in ds if line.startswith(("PROVISION_TEST=", "QUOTED="))]
    # the user's own lines below the guard are still hidden from non-interactive shells (as before)
    assert _ssh_printenv(lab, 1, "node2", ["EARLY", "LATE"]) == {"EARLY": "1", "LATE": "<unset>"}


def test_rerun_changes_nothing(lab):
    t0 = time.monotonic()
    again = _stages(lab)
    took = time.monotonic() - t0
    assert again.rc == 0 and again.changed == 0, again
    # distinct tasks that ran on some node (the default callback may print a banner twice when output
    # interleaves; the fabric health read and its stop are skipped on nodes without RDMA ports)
    tasks = set()
    for block in again.stdout.split("\nTASK [")[1:]:
        head = re.match(r"provision\.cluster\.(nccl_net|shell_env) : ([^\]]+)\]", block)
        if head and re.search(r"^(ok|changed): \[", block, re.M):
            tasks.add(head.groups())
    roles = [role for role, name in tasks if not name.startswith("Validating arguments")]
    # nccl_net: read (one module call per node), agree (once, on the controller), export, report;
    # shell_env: merge, the common variables (once), the block (one module call per node), report
    assert roles.count("nccl_net") <= 4 and roles.count("shell_env") <= 4, tasks
    print(f"\n{lab.flavour}: fresh {getattr(lab, 'fresh_s', 0):.1f}s, re-run {took:.1f}s (all stages)")
    for label, out in (("fresh", getattr(lab, "fresh_out", "")), ("re-run", again.stdout)):
        recap = out.split("TASKS RECAP")[-1]
        for line in re.findall(r"^provision\.cluster\.(?:nccl_net|shell_env) : .*$", recap, re.M):
            print(f"  {label}: {line}")


def test_check_diff_shows_the_move_and_changes_nothing(lab):
    # the user appends a guard-protected copy: simulate a block that ended up below the guard
    rc = node_exec(lab.name, 2, "cat ~/.bashrc").stdout
    _rest, block, _at = br.split_block(rc)
    moved = br.remove_block(rc) + block
    node_exec(lab.name, 2, f"cat > ~/.bashrc <<'EOF'\n{moved}EOF")
    check = run_playbook("playbooks/shell_env.yml", lab_name=lab.name, extra_vars=EXTRA,
                         extra_args=["--check", "--diff", "--limit", "node2"])
    assert check.rc == 0 and check.changed == 1, check
    # a real unified diff of the file (difflib may show the block or the user lines as the moved part)
    assert "--- before: /root/.bashrc" in check.stdout and "@@" in check.stdout, check
    assert re.search(r"^-(alias ll|# BEGIN provision)", check.stdout, re.M), check
    assert node_exec(lab.name, 2, "cat ~/.bashrc").stdout == moved
    fix = run_playbook("playbooks/shell_env.yml", lab_name=lab.name, extra_vars=EXTRA, extra_args=["--limit", "node2"])
    assert fix.rc == 0 and fix.changed == 1, fix
    after = node_exec(lab.name, 2, "cat ~/.bashrc").stdout
    # moved back above the guard, the user's lines untouched (the block's content may differ from the
    # full run's: a stage playbook run alone sees only the provision_env_* facts that are cached)
    assert br.remove_block(after) == br.remove_block(rc) == lab.original[2]
    assert after.index(br.BEGIN) < after.index("[[ $- != *i* ]] && return")


def test_interface_that_does_not_reach_the_peer_fails_naming_the_pair(lab):
    side = {}
    for i in lab.addrs:
        names = node_exec(lab.name, i, "ls /sys/class/net").stdout.split()
        side[i] = next(n for n in names if n != "lo" and
                       node_exec(lab.name, i, IFADDR + n).stdout.strip() != lab.addrs[i])
    bad = run_playbook("playbooks/nccl_net.yml", lab_name=lab.name,
                       extra_vars={"nccl_net_socket_ifname": side[1], "nccl_net_probe_timeout": 2},
                       extra_args=["--limit", "node1"])
    assert bad.rc != 0
    assert re.search(rf"node1 -> node2: node1 via {side[1]} \(10\.90\.[\d.]+\) cannot reach node2 at "
                     rf"{re.escape(lab.addrs[2])}", bad.stdout), bad
