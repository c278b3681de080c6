"""provision.cluster.setting: a role's default read outside the role is templated for the node.

Runs a real play on localhost (connection local, nothing leaves the machine): the launchers
default `~{{ cluster_plan.user }}/.provision/launch` must come back with the user filled in. On
ansible-core 2.19 strings loaded from a file are data, not templates, unless the loader is told so;
`provision launch` once looked for `~{{ cluster_plan.user }}/...` on the nodes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from provision import ansible

PLAY = """
- hosts: localhost
  gather_facts: false
  vars:
    cluster_plan: {user: alice, nodes: [localhost]}
  tasks:
    - name: Read settings the way launch.yml and verify do
      ansible.builtin.copy:
        dest: "{{ out }}"
        mode: "0600"
        content: "{{ {'dir': lookup('provision.cluster.setting', 'launchers_dir'),
                      'nofile': lookup('provision.cluster.setting', 'node_runtime_min_nofile'),
                      'set': lookup('provision.cluster.setting', 'allreduce_smoke_timeout'),
                      'block': lookup('provision.cluster.setting', 'ssh_mesh_block_name'),
                      'unknown': lookup('provision.cluster.setting', 'no_role_owns_this')} | to_json }}"
"""


def _settings(tmp_path, *extra: str) -> dict:
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    out = tmp_path / "out.json"
    proc = subprocess.run([ansible.tool("ansible-playbook"), "-i", "localhost,", "-c", "local", str(play),
                           "-e", f"out={out}", "-e", f"ansible_python_interpreter={sys.executable}", *extra],
                          env=ansible.environment(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(out.read_text())


def test_role_defaults_are_templated_for_the_node(tmp_path):
    got = _settings(tmp_path)
    assert got["dir"] == "~alice/.provision/launch"
    assert int(got["nofile"]) > 0
    assert got["unknown"] is None
    assert got["block"] == "cluster"  # cluster_group through the lookup (cluster_plan.DEFAULTS): the verify mesh check's block name


def test_the_node_value_wins_over_the_role_default(tmp_path):
    got = _settings(tmp_path, "-e", "launchers_dir=/opt/{{ cluster_plan.user }}/l", "-e", "allreduce_smoke_timeout=77")
    assert got["dir"] == "/opt/alice/l"
    assert int(got["set"]) == 77
    assert _settings(tmp_path, "-e", "cluster_group=gpus")["block"] == "gpus"


def test_loading_the_lookup_loads_every_filter_of_the_collection_once():
    """Every play names its hosts with this lookup, templated in ansible-playbook's main process before
    it forks a task's workers: the collection's filters loaded there are inherited by every worker,
    instead of each worker that templates one of them loading all of them again (0.1-0.3 s each)."""
    repo = Path(__file__).resolve().parents[4]
    code = ("import sys\n"
            "from ansible.plugins.loader import init_plugin_loader, lookup_loader\n"
            "init_plugin_loader()\n"
            "assert not [m for m in sys.modules if '.plugins.filter.' in m]\n"
            "lookup_loader.get('provision.cluster.setting')\n"
            "print(' '.join(sorted(m.rsplit('.', 1)[1] for m in sys.modules\n"
            "                      if m.startswith('ansible_collections.provision.cluster.plugins.filter.'))))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, ANSIBLE_CONFIG=str(repo / "ansible.cfg")), check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == sorted(p.stem for p in (repo / "plugins" / "filter").glob("*.py"))
