"""site.yml on a fresh 2-node lab: green, then a re-run that changes nothing, and a safe --check."""

from __future__ import annotations

import re

import pytest
import bounds
from helpers import lab_name, run_playbook

pytestmark = [pytest.mark.lab, pytest.mark.quick]


def test_first_run_is_green(converged_lab, lab_factory):
    first = converged_lab.first_run
    if first is None:
        # the converged lab came from a snapshot (an earlier session made it): this test is about the
        # fresh run, so it makes one, on new nodes
        fresh = lab_factory(lab_name("fresh"), nodes=2)
        first = run_playbook("site.yml", lab_name=fresh.name, timeout=bounds.SITE_FRESH)
        fresh.down()
    assert first.rc == 0, first
    assert set(first.recap) == {"node1", "node2"}
    assert all(h["failed"] == 0 and h["unreachable"] == 0 for h in first.recap.values()), first


def test_second_run_changes_nothing_and_uses_ssh(converged):
    import json
    import subprocess

    from helpers import REPO, ansible_env, tool

    # after first contact the controller talks SSH to the nodes, with host-key checking on
    inv = subprocess.run([tool("ansible-inventory"), "-i", str(REPO / "inventory/lab"), "--host", "node2"],
                         env=ansible_env(converged.name), capture_output=True, text=True, check=True, cwd=REPO)
    hostvars = {k: (v.get("__ansible_unsafe", v) if isinstance(v, dict) else v)
                for k, v in json.loads(inv.stdout).items()}
    assert hostvars["ansible_connection"] == "ssh", hostvars
    assert "StrictHostKeyChecking=yes" in hostvars["ansible_ssh_common_args"], hostvars
    second = run_playbook("site.yml", lab_name=converged.name, timeout=bounds.STAGES)
    assert second.rc == 0, second
    assert second.changed == 0, second


def test_check_diff_is_safe(converged):
    check = run_playbook("site.yml", lab_name=converged.name, extra_args=["--check", "--diff"], timeout=bounds.STAGES)
    assert check.rc == 0, check
    assert check.changed == 0, check


def test_launchers_see_the_environment_over_non_interactive_ssh(converged):
    """What a launcher gets: `ssh <peer> cmd` from every node runs the pinned interpreter with
    the NCCL/GLOO/pdsh settings of the env block (Debian's .bashrc guard notwithstanding)."""
    from helpers import node_exec

    probe = ("python -c \"import sys, torch; print(sys.executable, torch.__version__)\"; "
             "printenv NCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME PDSH_RCMD_TYPE")
    for src in (1, 2):
        for dst in (1, 2):
            out = node_exec(converged.name, src, f"ssh -o BatchMode=yes node{dst} '{probe}'").stdout.split()
            assert out[:2] == ["/opt/provision/venv/bin/python", "2.13.0+cpu"], (src, dst, out)
            assert out[2:] == ["eth1", "eth1", "ssh"], (src, dst, out)


def test_a_tagged_run_without_the_stages_facts_stops_instead_of_dropping_their_lines(converged, tmp_path):
    """`site.yml --tags shell_env` from a controller whose fact cache is empty (another machine, expired,
    --flush-cache) knows nothing the venv, pdsh and NCCL stages exported: it stops on each node in one line
    naming them and the fix, and ~/.bashrc keeps its lines. The fix line's run puts everything back as it was."""
    from helpers import node_exec

    empty = {"ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts")}
    before = [node_exec(converged.name, n, "cat ~/.bashrc").stdout for n in (1, 2)]
    stopped = run_playbook("site.yml", lab_name=converged.name, extra_args=["--tags", "shell_env"], env=empty)
    assert stopped.rc != 0 and stopped.changed == 0, stopped
    lines = [ln for ln in stopped.output.splitlines() if "which this run does not know" in ln]
    # ansible-core prints each failure twice (the fatal line and its [ERROR] summary): one node each
    assert {re.search(r"(node\d): /root/\.bashrc holds what", ln).group(1) for ln in lines} == {"node1", "node2"}, lines
    assert all("python_env" in ln and "fix: ansible-playbook site.yml --tags " in ln for ln in lines), lines
    assert [node_exec(converged.name, n, "cat ~/.bashrc").stdout for n in (1, 2)] == before
    tags = lines[0].split("--tags ")[1].split()[0]
    assert set(tags.split(",")) >= {"python_env", "shell_env"}, tags
    fixed = run_playbook("site.yml", lab_name=converged.name, extra_args=["--tags", tags], env=empty)
    assert fixed.rc == 0 and fixed.changed == 0, fixed
    assert [node_exec(converged.name, n, "cat ~/.bashrc").stdout for n in (1, 2)] == before


def test_a_node_replaced_under_its_name_has_its_cached_facts_dropped(converged, tmp_path):
    """A node that is another machine than the controller's cached facts say (a lab brought down and up
    under the same name, a reinstalled node) has those facts dropped and gathered again, over the lab's
    podman connection (which runs a command's words without a shell) as over SSH: an interpreter cached
    from the old machine is not used on the new one."""
    import json
    import subprocess

    from helpers import LAB_INVENTORY, ansible_env, node_exec, tool

    # a node's first contact (the podman connection, before the sshd stage made it reachable over SSH)
    over = {"ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts"), "PROVISION_LAB_CONNECTION": "podman"}
    env = {**ansible_env(converged.name), **over}

    def adhoc_node1(module: str, args: dict) -> subprocess.CompletedProcess:
        argv = [tool("ansible"), "node1", "-i", str(LAB_INVENTORY), "-m", module] + (["-a", json.dumps(args)] if args else [])
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=bounds.COMMAND, check=False)

    stale = {"provision_machine": {"machine_id": "0" * 32, "boot": "old/1", "release": "debian 12"},
             "discovered_interpreter_python": "/nonexistent/bin/python3", "cacheable": True}
    planted = adhoc_node1("ansible.builtin.set_fact", stale)
    assert planted.returncode == 0, planted.stdout + planted.stderr
    # the planted interpreter is what the next run would use: the cache is read
    used = adhoc_node1("ansible.builtin.ping", {})
    assert used.returncode != 0 and "/nonexistent/bin/python3" in used.stdout, used.stdout + used.stderr

    run = run_playbook("site.yml", lab_name=converged.name, extra_args=["--tags", "preflight"], env=over)
    assert run.rc == 0 and run.changed == 0, run
    cached = adhoc_node1("ansible.builtin.debug", {"var": "provision_machine"})
    machine_id = node_exec(converged.name, 1, "cat /etc/machine-id").stdout.strip()
    assert machine_id and f'"machine_id": "{machine_id}"' in cached.stdout, cached.stdout + cached.stderr
    assert adhoc_node1("ansible.builtin.ping", {}).returncode == 0


def test_a_pinned_package_gone_from_one_node_is_named_and_site_yml_puts_it_back(converged):
    """Issue 32's symptom: a node whose pinned extra (numpy, python_env_extra_packages) was removed or replaced
    in place. `provision verify` names the node and the package (it compared no extras before); site.yml
    reinstalls it and its verify pass is green, where it failed "nodes differ (node2: numpy)" because node1's
    record (the stage's, with the extras) was compared with node2's (verify's, without them); the next run
    changes nothing."""
    import json
    import subprocess

    from helpers import LAB_INVENTORY, REPO, ansible_env, node_exec, tool

    python = "/opt/provision/venv/bin/python"
    numpy = f"{python} -c 'import numpy; print(numpy.__version__)'"
    pinned = node_exec(converged.name, 1, numpy).stdout.strip()
    node_exec(converged.name, 2, f"{python} -m pip uninstall -y -q numpy")
    converged.dirty = True
    assert node_exec(converged.name, 2, numpy, check=False).returncode != 0

    verify = subprocess.run([tool("provision"), "verify", "-i", str(LAB_INVENTORY), "--only", "versions", "--json"],
                            env=ansible_env(converged.name), capture_output=True, text=True, timeout=bounds.VERIFY,
                            check=False, cwd=REPO)
    assert verify.returncode == 1, verify.stdout + verify.stderr
    failed = [(c["node"], c["check"], c["detail"]) for c in json.loads(verify.stdout)["checks"] if c["status"] == "fail"]
    assert failed == [("node2", "versions equal", "nodes differ (node2: numpy)")], failed

    repair = run_playbook("site.yml", lab_name=converged.name, timeout=bounds.STAGES)
    assert repair.rc == 0, repair
    assert repair.recap["node2"]["changed"] >= 1 and repair.recap["node1"]["changed"] == 0, repair.recap
    assert node_exec(converged.name, 2, numpy).stdout.strip() == pinned
    again = run_playbook("site.yml", lab_name=converged.name, timeout=bounds.STAGES)
    assert again.rc == 0 and again.changed == 0, again
