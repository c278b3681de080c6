"""Cached facts belong to one machine (issue 30): playbooks/identity.yml, run first by site.yml, verify and
every stage playbook, drops the cached facts of a node that is another machine now.

Seen: a lab re-created under the same names with other releases failed every module on the next run,
"The module interpreter '/usr/bin/python3.11' was not found", from the facts cached for the node before.
Here the cache (the plugin ansible.cfg names) holds facts of another machine for `h1` (its interpreter,
its identity: another release); this machine is `h1` now, reached with the local connection."""

from __future__ import annotations

import json
import subprocess

import helpers
from helpers import REPO

SEED = """\
- hosts: cluster
  gather_facts: false
  tasks:
    - ansible.builtin.set_fact:
        discovered_interpreter_python: /usr/bin/python3.99
        provision_machine: {machine_id: "0123456789abcdef0123456789abcdef", boot: "x/1", release: "%s"}
        stage_export: kept
        cacheable: true
"""
RUN = """\
- ansible.builtin.import_playbook: {identity}
- hosts: cluster
  gather_facts: false
  tasks:
    - ansible.builtin.ping:
    - ansible.builtin.debug:
        msg: "SEEN {{{{ {{'verdict': provision_machine_verdict | default('-'), 'export': stage_export | default('dropped'),
                      'release': provision_machine.release}} | to_json }}}}"
"""
WITHOUT = """\
- hosts: cluster
  gather_facts: false
  tasks:
    - ansible.builtin.ping:
"""


def _play(tmp_path, text, name):
    book = tmp_path / name
    book.write_text(text)
    inv = tmp_path / "hosts.ini"
    inv.write_text("[cluster]\nh1 ansible_connection=local\n")
    env = helpers.ansible_env(ANSIBLE_CACHE_PLUGIN_CONNECTION=str(tmp_path / "facts"))
    env.pop("PROVISION_LAB_NAME", None)
    # interpreter discovery as on a node: the system's python3 (not a version manager's shims on this machine)
    env["PATH"] = f"{helpers.BIN}:/usr/local/bin:/usr/bin:/bin"
    return subprocess.run([helpers.tool("ansible-playbook"), "-i", str(inv), str(book)], capture_output=True,
                          text=True, env=env, cwd=REPO, timeout=180, check=False)


def _seen(proc):
    line = next(ln for ln in proc.stdout.splitlines() if "SEEN " in ln)
    return json.loads(json.loads("{%s}" % line.strip().rstrip(","))["msg"][len("SEEN "):])


def _release():
    out = subprocess.run(["sh", "-c", ". /etc/os-release; echo \"$ID ${VERSION_ID:-$VERSION_CODENAME}\""],
                         capture_output=True, text=True, check=True).stdout.strip()
    return out


def test_the_stale_interpreter_fails_every_module_without_identity(tmp_path):
    """The failure the issue saw, reproduced: the cached interpreter of the machine before."""
    assert _play(tmp_path, SEED % "debian 11", "seed.yml").returncode == 0
    proc = _play(tmp_path, WITHOUT, "without.yml")
    assert proc.returncode != 0 and "/usr/bin/python3.99" in proc.stdout + proc.stderr


def test_another_machine_under_the_same_name_is_gathered_again(tmp_path):
    assert _play(tmp_path, SEED % "debian 11", "seed.yml").returncode == 0
    proc = _play(tmp_path, RUN.format(identity=REPO / "playbooks" / "identity.yml"), "run.yml")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    seen = _seen(proc)
    assert seen == {"verdict": "other", "export": "dropped", "release": _release()}, seen
    # the next run trusts the facts of this machine
    again = _seen(_play(tmp_path, RUN.format(identity=REPO / "playbooks" / "identity.yml"), "run.yml"))
    assert again["verdict"] == "same"


def test_the_same_machine_rebooted_keeps_what_the_stages_recorded(tmp_path):
    """Same machine-id and release, another boot: nothing is dropped (preflight gathers the facts again)."""
    # this machine's machine-id and release, another boot (the interpreter of the same machine is kept)
    mid = subprocess.run(["sh", "-c", "cat /etc/machine-id 2>/dev/null"], capture_output=True, text=True).stdout.strip()
    seed = (SEED % _release()).replace("0123456789abcdef0123456789abcdef", mid).replace(
        "discovered_interpreter_python: /usr/bin/python3.99\n        ", "")
    assert "python3.99" not in seed
    assert _play(tmp_path, seed, "seed.yml").returncode == 0
    seen = _seen(_play(tmp_path, RUN.format(identity=REPO / "playbooks" / "identity.yml"), "run.yml"))
    assert seen["verdict"] == "rebooted" and seen["export"] == "kept", seen


def test_the_same_machine_without_its_cached_interpreter_is_gathered_again(tmp_path):
    """Same machine-id, release and boot, but the interpreter the cached facts name is gone (a venv removed,
    a Python upgraded in place): without identity.yml every module fails on it; with it the facts are
    dropped and the next module runs on the interpreter found now."""
    from ansible_collections.provision.cluster.plugins.module_utils.common.machine import PROBE, parse_identity

    now = parse_identity(subprocess.run(["sh", "-c", PROBE], capture_output=True, text=True, check=True).stdout)
    seed = (SEED % now["release"]).replace('"0123456789abcdef0123456789abcdef"', json.dumps(now["machine_id"])).replace(
        '"x/1"', json.dumps(now["boot"]))
    assert _play(tmp_path, seed, "seed.yml").returncode == 0
    assert _play(tmp_path, WITHOUT, "without.yml").returncode != 0
    proc = _play(tmp_path, RUN.format(identity=REPO / "playbooks" / "identity.yml"), "run.yml")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert _seen(proc) == {"verdict": "other", "export": "dropped", "release": now["release"]}
    assert _seen(_play(tmp_path, RUN.format(identity=REPO / "playbooks" / "identity.yml"), "run.yml"))["verdict"] == "same"
