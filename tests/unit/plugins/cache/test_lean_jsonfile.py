"""provision.cluster.lean_jsonfile: the fact cache ansible.cfg uses, without Origin tags.

Through ansible-playbook (the plugin loads from ansible.cfg, cached facts come back equal in a
second run, the files hold no source positions) and on ansible-core's own encoding of tagged values
(trust and vault tags survive)."""

from __future__ import annotations

import json
import subprocess

import helpers
import pytest
from ansible_collections.provision.cluster.plugins.cache import lean_jsonfile

try:  # ansible-core >= 2.19: tagged values (before it, the cache holds plain JSON and the plugin is jsonfile)
    from ansible._internal._datatag._tags import Origin, TrustedAsTemplate
    from ansible._internal._json._profiles import _cache_persistence
    from ansible.module_utils._internal._datatag import AnsibleTagHelper
except ImportError:
    Origin = None

tagged = pytest.mark.skipif(Origin is None, reason="ansible-core < 2.19 tags no values: nothing to strip")

SET = """\
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.set_fact:
        lean_plain: "{{ 'node' ~ 1 }}"
        lean_nested: {env: {NCCL_SOCKET_IFNAME: "{{ 'eth' ~ 1 }}"}, ports: "{{ [29500, 2222] }}", rank: "{{ 3 }}"}
        cacheable: true
"""
GET = """\
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.debug:
        msg: "LEAN {{ {'plain': lean_plain, 'nested': lean_nested} | to_json }}"
"""


def _play(tmp_path, text, cache):
    book = tmp_path / "play.yml"
    book.write_text(text)
    inv = tmp_path / "hosts.ini"
    inv.write_text(f"h1 ansible_connection=local ansible_python_interpreter={helpers.BIN / 'python'}\n")
    env = helpers.ansible_env(ANSIBLE_CACHE_PLUGIN_CONNECTION=str(cache))
    env.pop("PROVISION_LAB_NAME", None)
    proc = subprocess.run([helpers.tool("ansible-playbook"), "-i", str(inv), str(book)], capture_output=True,
                          text=True, env=env, cwd=helpers.REPO, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # a cache plugin that does not load makes ansible fall back to memory with a warning only
    assert "[WARNING]" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    return proc.stdout


def test_cached_facts_come_back_without_positions(tmp_path):
    cache = tmp_path / "cache"
    _play(tmp_path, SET, cache)
    files = [f for d in cache.iterdir() for f in d.iterdir()]  # one directory per inventory
    assert [f.name for f in files] in (["s1_h1"], ["h1"])  # the file name of ansible-core >= 2.19, of 2.16-2.18
    stored = files[0].read_text()
    assert "Origin" not in stored and "line_num" not in stored
    out = _play(tmp_path, GET, cache)
    line = next(ln for ln in out.splitlines() if "LEAN " in ln)
    got = json.loads(json.loads("{%s}" % line.strip().rstrip(","))["msg"][len("LEAN "):])
    got["nested"]["rank"] = int(got["nested"]["rank"])  # "3" before ansible-core 2.19 (no native types inside a dict)
    assert got == {"plain": "node1", "nested": {"env": {"NCCL_SOCKET_IFNAME": "eth1"}, "ports": [29500, 2222], "rank": 3}}


def _encode(value):
    return {lean_jsonfile.PAYLOAD_KEY: json.dumps(value, cls=_cache_persistence.Encoder)}


def _decode(entry):
    return json.loads(entry[lean_jsonfile.PAYLOAD_KEY], cls=_cache_persistence.Decoder)


@tagged
def test_only_origin_tags_are_dropped():
    trusted = TrustedAsTemplate().tag(Origin(path="/x.yml", line_num=3).tag("{{ foo }}"))
    placed = Origin(path="/y.yml", line_num=1).tag("plain")
    listed = Origin(path="/z.yml", line_num=2).tag([placed, 2])
    entry = _encode({"a": trusted, "b": placed, "c": listed, "d": {"e": placed}})
    assert "Origin" in entry[lean_jsonfile.PAYLOAD_KEY]
    lean = lean_jsonfile.lean_entry(entry)
    assert "Origin" not in lean[lean_jsonfile.PAYLOAD_KEY]
    back = _decode(lean)
    assert back == {"a": "{{ foo }}", "b": "plain", "c": ["plain", 2], "d": {"e": "plain"}}
    assert AnsibleTagHelper.tag_types(back["a"]) == {TrustedAsTemplate}
    assert AnsibleTagHelper.tag_types(back["b"]) == set()


def test_unknown_shapes_are_kept():
    assert lean_jsonfile.lean_entry({"other": 1}) == {"other": 1}
    assert lean_jsonfile.lean_entry({"__payload__": "not json"}) == {"__payload__": "not json"}
    odd = {"__ansible_type": "_AnsibleTaggedSet", "value": [1], "tags": [{"__ansible_type": "Origin", "path": "p"}]}
    assert lean_jsonfile.strip_origins(odd) == odd


PREFLIGHT = """\
- name: Preflight
  ansible.builtin.import_playbook: {repo}/playbooks/preflight.yml
- hosts: cluster
  gather_facts: false
  tasks:
    - ansible.builtin.debug:
        msg: "PORT {{{{ cluster_master_port }}}}"
      run_once: true
"""


def test_an_edited_inventory_port_is_not_shadowed_by_cached_facts(tmp_path):
    """preflight's cluster_* facts must not be cached: a cached fact outranks inventory variables,
    so an edited cluster_master_port would be ignored for as long as the cache lives."""
    book = tmp_path / "play.yml"
    book.write_text(PREFLIGHT.format(repo=helpers.REPO))
    env = helpers.ansible_env(ANSIBLE_CACHE_PLUGIN_CONNECTION=str(tmp_path / "cache"))
    env.pop("PROVISION_LAB_NAME", None)
    seen = []
    for port in (29511, 29512):
        inv = tmp_path / "hosts.ini"
        inv.write_text("[cluster]\nn1 cluster_address=127.0.0.11\nn2 cluster_address=127.0.0.12\n[cluster:vars]\n"
                       f"ansible_connection=local\nansible_python_interpreter={helpers.BIN / 'python'}\n"
                       f"cluster_master_port={port}\n")
        proc = subprocess.run([helpers.tool("ansible-playbook"), "-i", str(inv), str(book)], capture_output=True,
                              text=True, env=env, cwd=helpers.REPO, timeout=300, check=False)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
        seen += [int(line.split("PORT ")[1].strip('"')) for line in proc.stdout.splitlines() if '"PORT ' in line]
    assert seen == [29511, 29512]


# ---------------------------------------------------------------- one machine of one cluster, private, no environment

ENV_SET = """\
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.setup:
        gather_subset: ["!all", "min"]
    - ansible.builtin.set_fact:
        shell_env_extra_vars: {WANDB_API_KEY: hunter2}
        site_db_password: hunter3
        nested: {ok: 1, hf_token: hunter4}
        kept: node
        cacheable: true
"""
ENV_GET = """\
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.debug:
        msg: "GOT {{ kept | default('none') }} {{ ansible_facts.env is defined }} {{ ansible_facts.distribution | default('none') }}"
"""


def _entry_files(cache):
    return sorted(f for d in cache.iterdir() if d.is_dir() for f in d.iterdir())


def test_cache_is_private_and_holds_no_environment(tmp_path):
    import stat

    cache = tmp_path / "cache"
    _play(tmp_path, ENV_SET, cache)
    (entry,) = _entry_files(cache)
    text = entry.read_text()
    for secret in ("hunter2", "hunter3", "hunter4", "WANDB_API_KEY", "ansible_env", "HOME"):
        assert secret not in text, secret
    payload = json.loads(json.loads(text).get("__payload__", text))
    assert "kept" in payload and "ansible_distribution" in payload and payload["nested"] == {"ok": 1}
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert stat.S_IMODE(entry.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    out = _play(tmp_path, ENV_GET, cache)
    line = next(ln for ln in out.splitlines() if "GOT " in ln)
    assert "GOT node False" in line and "none" not in line.split("GOT node False")[1]


def test_an_old_world_readable_entry_loses_its_environment_when_read(tmp_path):
    entry = {"__payload__": json.dumps({"ansible_env": {"HOME": "/root"}, "kept": 1, "x": {"api_key": "s"}})}
    got = json.loads(lean_jsonfile.private_entry(entry)["__payload__"])
    assert got == {"kept": 1, "x": {}}


def test_two_inventories_with_the_same_host_name_do_not_share_facts(tmp_path):
    """Two clusters that both have a `h1` (two sites, two labs): each reads its own facts."""
    cache = tmp_path / "cache"
    book_set = tmp_path / "set.yml"
    book_get = tmp_path / "get.yml"
    book_set.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.set_fact: "
                        "{where: '{{ site }}', cacheable: true}\n")
    book_get.write_text("- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.debug: "
                        "{msg: \"WHERE {{ where | default('none') }}\"}\n")
    env = helpers.ansible_env(ANSIBLE_CACHE_PLUGIN_CONNECTION=str(cache))
    env.pop("PROVISION_LAB_NAME", None)
    invs = {}
    for site in ("a", "b"):
        d = tmp_path / site
        d.mkdir()
        invs[site] = d / "hosts.ini"
        invs[site].write_text(f"h1 ansible_connection=local ansible_python_interpreter={helpers.BIN / 'python'} site={site}\n")
        proc = subprocess.run([helpers.tool("ansible-playbook"), "-i", str(invs[site]), str(book_set)],
                              capture_output=True, text=True, env=env, cwd=helpers.REPO, timeout=120, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(_entry_files(cache)) == 2
    for site in ("a", "b"):
        proc = subprocess.run([helpers.tool("ansible-playbook"), "-i", str(invs[site]), str(book_get)],
                              capture_output=True, text=True, env=env, cwd=helpers.REPO, timeout=120, check=False)
        assert f"WHERE {site}" in proc.stdout, proc.stdout


def test_inventory_key():
    a = lean_jsonfile.inventory_key(["/x/inventory/lab"], "lg-sudo")
    b = lean_jsonfile.inventory_key(["/x/inventory/lab"], "lg-root")
    assert a.startswith("lg-sudo-") and b.startswith("lg-root-") and a[-16:] != b[-16:]
    assert lean_jsonfile.inventory_key(["/srv/site/hosts.yml"]).startswith("hosts.yml-")
    assert lean_jsonfile.inventory_key(["n1,n2,"]).startswith("hosts-")
