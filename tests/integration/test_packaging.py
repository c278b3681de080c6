"""`pip install .` (not editable) into a fresh venv outside the checkout gives a working CLI
that finds the playbooks, roles and plugins it ships."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import REPO

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    base = tmp_path_factory.mktemp("pkg")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    proc = subprocess.run([str(py), "-m", "pip", "install", "-q", str(REPO)], capture_output=True,
                          text=True, cwd=base, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return base, venv


def _run(venv, *argv, cwd, **kw):
    env = {k: v for k, v in os.environ.items() if k not in ("PROVISION_CONTENT_ROOT", "VIRTUAL_ENV")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    return subprocess.run([str(venv / "bin" / argv[0]), *argv[1:]], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600, **kw)


def test_cli_and_content_come_from_the_wheel(installed):
    base, venv = installed
    help_ = _run(venv, "provision", "--help", cwd=base)
    assert help_.returncode == 0 and "lab" in help_.stdout
    root = _run(venv, "python", "-c", "from provision.paths import content_root, collections_dir;"
                "print(content_root()); print(collections_dir())", cwd=base)
    content, colls = root.stdout.split()
    assert "site-packages" in content and str(REPO) not in content
    for rel in ("site.yml", "ansible.cfg", "playbooks/preflight.yml", "roles/preflight/tasks/main.yml",
                "plugins/module_utils/cluster_plan.py", "plugins/inventory/lab.py", "inventory/lab/lab.yml"):
        assert os.path.exists(os.path.join(content, rel)), rel
    assert os.path.isdir(os.path.join(colls, "ansible_collections", "provision", "cluster", "roles"))


def test_shipped_site_yml_parses_with_shipped_collection(installed, tmp_path):
    base, venv = installed
    inv = tmp_path / "hosts.yml"
    inv.write_text("cluster:\n  hosts:\n    a: {ansible_host: 10.0.0.1}\n    b: {ansible_host: 10.0.0.2}\n")
    proc = _run(venv, "provision", "site", "-i", str(inv), "--syntax-check", cwd=base)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_lab_commands_work_from_the_wheel(installed):
    base, venv = installed
    proc = _run(venv, "provision", "lab", "up", "--name", "t-pkg", "--nodes", "1", cwd=base)
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        doc = json.loads(_run(venv, "provision", "lab", "status", "--name", "t-pkg", "--json", cwd=base).stdout)
        assert doc["up"] and doc["nodes"][0]["name"] == "node1"
    finally:
        _run(venv, "provision", "lab", "down", "--name", "t-pkg", cwd=base)
