"""The node_runtime module's bare-metal path, run for real on this machine (a VM) by Ansible's local
connection; every file it writes is redirected into tmp_path (limits_source=module: PAM is untouched)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from helpers import REPO, ansible_env, tool
from ansible_collections.provision.cluster.plugins.module_utils.common import limits as LIM
from ansible_collections.provision.cluster.plugins.module_utils.common import node_facts as NF


def _run(tmp_path, *extra, check=False):
    args = (f"limits_file={tmp_path}/90-provision.conf node_id_file={tmp_path}/node-id fstab={tmp_path}/fstab "
            "node_id=ctl manage_limits=true require_memlock_unlimited=true min_nofile=65536 limits_source=module "
            "container=false " + " ".join(extra))
    argv = [tool("ansible"), "localhost", "-c", "local", "-i", "localhost,", "-e",
            f"ansible_python_interpreter={sys.executable}", "-m", "provision.cluster.node_runtime", "-a", args]
    if check:
        argv += ["--check", "--diff"]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
                          env=ansible_env(ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="json"))
    doc = proc.stdout[proc.stdout.index("{\n"):]
    return json.JSONDecoder().raw_decode(doc)[0]["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_bare_metal_dropin_check_mode_then_write_then_idempotent(tmp_path):
    dry = _run(tmp_path, check=True)
    assert dry["changed"] is True and not (tmp_path / "90-provision.conf").exists()
    assert not (tmp_path / "node-id").exists()
    first = _run(tmp_path)
    assert first["changed"] is True
    text = (tmp_path / "90-provision.conf").read_text()
    assert "root         soft  memlock  unlimited\nroot         hard  memlock  unlimited\n" in text
    assert "root         soft  nofile   65536\n" in text
    assert (tmp_path / "node-id").read_text().startswith("ctl ")
    assert first["ansible_facts"]["node_runtime"]["limits"]["source"] == "module"
    token = (tmp_path / "node-id").read_text()
    second = _run(tmp_path)
    assert second["changed"] is False and (tmp_path / "node-id").read_text() == token
    # this process's own memlock is measured (the drop-in is not where PAM reads): the forced rule
    # passes only through CAP_IPC_LOCK or an unlimited limit, and says which
    memlock = {c["check"]: c for c in second["checks"]}["memlock"]
    cap = NF.parse_capeff(open("/proc/self/status").read())
    soft = NF.parse_limits(open("/proc/self/limits").read())["memlock"][0]
    if soft is None:
        assert memlock["status"] == "pass"
    elif cap & (1 << LIM.CAP_IPC_LOCK):
        assert memlock["status"] == "pass" and "CAP_IPC_LOCK" in memlock["detail"]
    else:
        assert memlock["status"] == "fail" and "node_runtime_manage_limits" in memlock["fix"]


def test_min_nofile_above_nr_open_fails_in_one_line(tmp_path):
    res = _run(tmp_path, "min_nofile=99999999")
    assert res["failed"] is True
    assert res["msg"].startswith("node_runtime_min_nofile 99999999 exceeds fs.nr_open")
    assert not (tmp_path / "90-provision.conf").exists()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare")
def test_manage_shm_remounts_in_a_private_mount_namespace(tmp_path):
    """A 64 MiB tmpfs on /dev/shm in a private mount namespace (this machine's stays as it is):
    manage_shm remounts it to the rule's size and records it in (a copy of) fstab."""
    (tmp_path / "fstab").write_text("# test fstab\n")
    module = ("%s localhost -c local -i localhost, -e ansible_python_interpreter=%s -m provision.cluster.node_runtime "
              "-a 'manage_shm=true container=false fstab=%s/fstab limits_source=module shm_min=256m'"
              % (tool("ansible"), sys.executable, tmp_path))
    script = "mount -t tmpfs -o size=64m tmpfs /dev/shm && %s >/dev/null; %s; df -B1 --output=size /dev/shm | tail -1" \
        % (module, module.replace("localhost -c local", "localhost -o -c local"))
    proc = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], cwd=REPO,
                          env=ansible_env(), capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[-1].strip() == str(256 * 1024 * 1024), proc.stdout
    assert "SUCCESS" in proc.stdout and "CHANGED" not in proc.stdout  # the second run changes nothing
    assert (tmp_path / "fstab").read_text() == "# test fstab\ntmpfs\t/dev/shm\ttmpfs\tdefaults,nosuid,nodev,size=256m\t0\t0\n"


def test_warn_on_check_shows_each_warning_check_with_its_fix(tmp_path):
    # a container's limits it cannot raise itself, under on_container_limit=warn: warnings, not a failure
    args = ("container=true", "on_container_limit=warn", "shm_min=100t")
    quiet = _run(tmp_path, *args)
    warned = [c for c in quiet["checks"] if c["status"] == "warn"]
    assert "shm" in [c["check"] for c in warned] and not quiet.get("failed"), quiet
    assert not [w for w in quiet.get("warnings") or [] if "| fix:" in str(w)]
    loud = _run(tmp_path, *args, "warn_on_check=true")
    shown = [w if isinstance(w, str) else w["event"]["msg"] for w in loud["warnings"]]
    assert shown == ["ctl: %s | %s | fix: %s" % (c["check"], c["detail"], c["fix"])
                     for c in loud["checks"] if c["status"] == "warn"], shown
    assert len(shown) == len(warned)


def test_limits_no_source_could_measure_are_a_warning_that_says_why(tmp_path):
    """A source that cannot run here (runuser as a user other than root, ssh without a host) is named
    in the checks' detail, not hidden behind 'none'."""
    out = _run(tmp_path, "limits_source=ssh", check=True)
    by = {c["check"]: c for c in out["checks"]}
    assert by["nofile"]["status"] == "warn"
    assert by["nofile"]["detail"] == "nofile could not be measured (ssh: no ssh_host given)", by["nofile"]
    assert out["ansible_facts"]["node_runtime"]["limits"]["source"] == "none"
