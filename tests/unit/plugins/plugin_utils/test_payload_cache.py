"""The module payloads kept between runs (plugins/plugin_utils/payload_cache.py, callback payload_cache)."""
from __future__ import annotations

import ast
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.provision.cluster.plugins.plugin_utils import payload_cache as P

REPO = Path(__file__).resolve().parents[4]
OURS = "ansible_collections.provision.cluster.plugins.modules."


def tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_the_key_follows_every_file_a_payload_is_built_from(tmp_path):
    coll = tree(tmp_path / "coll", {"plugins/modules/m.py": "import x\n", "plugins/module_utils/u.py": "A = 1\n",
                                    "plugins/module_utils/sub/v.py": "B = 1\n"})
    core = tree(tmp_path / "core", {"module_utils/basic.py": "C = 1\n"})
    key = P.fingerprint([core / "module_utils"], coll)
    assert key == P.fingerprint([core / "module_utils"], coll)  # stable
    (coll / "plugins/module_utils/sub/v.py").write_text("B = 2\n")  # one of our module_utils, deep down
    changed = P.fingerprint([core / "module_utils"], coll)
    assert changed != key
    (core / "module_utils/basic.py").write_text("C = 2\n")  # ansible-core's
    assert P.fingerprint([core / "module_utils"], coll) not in (key, changed)
    # compiled files are not sources
    before = P.fingerprint([core / "module_utils"], coll)
    tree(coll, {"plugins/module_utils/__pycache__/u.cpython-311.pyc": "junk"})
    assert P.fingerprint([core / "module_utils"], coll) == before


def test_the_key_of_this_checkout_covers_ansible_cores_payload_code():
    names = [p.name for p in P._ansible_sources()]
    assert "module_utils" in names and "module_common.py" in names
    assert len(P.fingerprint()) == 32


def test_a_run_keeps_only_our_payloads_and_the_next_run_finds_them(tmp_path):
    run1 = tree(tmp_path / "run1", {f"{OURS}gcc_facts-ZIP_DEFLATED-none": "zip1",
                                    f"{OURS}gcc_facts-ZIP_DEFLATED-none.lock": "",
                                    "ansible.modules.ping-ZIP_DEFLATED-none": "builtin"})
    store = tmp_path / "store"
    assert P.save(store, "k1", run1) == [f"{OURS}gcc_facts-ZIP_DEFLATED-none"]
    kept = store / "k1" / f"{OURS}gcc_facts-ZIP_DEFLATED-none"
    assert kept.read_text() == "zip1"
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.stat().st_mode) == 0o700 and stat.S_IMODE((store / "k1").stat().st_mode) == 0o700
    assert sorted(p.name for p in (store / "k1").iterdir()) == [kept.name]  # no lock, no builtin, no temp file
    assert P.save(store, "k1", run1) == []  # kept once

    run2 = tmp_path / "run2"
    assert P.restore(store, "k1", run2) == [kept.name]
    assert (run2 / kept.name).read_text() == "zip1"
    assert P.restore(store, "other-key", tmp_path / "run3") == []  # another version of the code finds nothing
    assert not (tmp_path / "run3").exists()
    # a payload the run already has is not replaced
    (run2 / kept.name).write_text("built here")
    assert P.restore(store, "k1", run2) == [] and (run2 / kept.name).read_text() == "built here"


def test_the_least_recently_used_keys_go_first(tmp_path):
    store = tmp_path / "store"
    for i, key in enumerate(("a", "b", "c")):
        tree(store / key, {f"{OURS}m-ZIP_DEFLATED-none": key})
        os.utime(store / key, (1000 + i, 1000 + i))
    P.restore(store, "a", tmp_path / "run")  # used now: the newest
    assert P.prune(store, 2) == ["b"]
    assert sorted(p.name for p in store.iterdir()) == ["a", "c"]
    run = tree(tmp_path / "run-d", {f"{OURS}m-ZIP_DEFLATED-none": "d"})
    P.save(store, "d", run, keep=2)
    assert sorted(p.name for p in store.iterdir()) == ["a", "d"]


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_our_payloads_are_built_only_from_what_the_key_covers():
    """The key covers ansible-core's module_utils and this collection's modules and module_utils: a module or
    module_util that imported another collection's code would be served an old payload when that changed."""
    allowed = ("ansible.module_utils", "ansible_collections.provision.cluster.plugins.module_utils")
    files = sorted((REPO / "plugins" / "modules").glob("*.py")) + sorted((REPO / "plugins" / "module_utils").rglob("*.py"))
    assert len(files) > 40
    for path in files:
        for name in _imports(path):
            if name.split(".")[0] in ("ansible", "ansible_collections"):
                assert name.startswith(allowed), f"{path.relative_to(REPO)} imports {name}"


def test_a_second_run_uses_the_payloads_the_first_one_built(tmp_path):
    """ansible-playbook with the repository's ansible.cfg (which enables the callback), on localhost."""
    play = tmp_path / "play.yml"
    play.write_text("- hosts: localhost\n  gather_facts: false\n  tasks:\n"
                    "    - provision.cluster.port_facts: {ports: [1]}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PROVISION_"))}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_CACHE_PLUGIN_CONNECTION=str(tmp_path / "facts"),
               PROVISION_PAYLOAD_CACHE_DIR=str(tmp_path / "payloads"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), str(play), "-i", "localhost,", "-c", "local", "-vvv",
            "-e", f"ansible_python_interpreter={sys.executable}"]

    def run():
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, cwd=REPO, check=False)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout

    first = run()
    assert "payload_cache: 0 payload(s) restored" in first and "payload_cache: 1 payload(s) kept" in first
    kept = [p.name for key in (tmp_path / "payloads").iterdir() for p in key.iterdir()]
    # ansible-core's own name for it (<module fqn>-<compression>[-<extensions>], by version)
    assert len(kept) == 1 and kept[0].startswith(f"{OURS}port_facts-")
    second = run()
    assert "payload_cache: 1 payload(s) restored" in second and "payload_cache: 0 payload(s) kept" in second


def test_payloads_another_user_could_have_written_are_not_used(tmp_path):
    """They run on every node (as root where the play escalates): a store or payload that is not this user's
    alone, or a link, is refused with one line that says how to clear it."""
    store = tmp_path / "store"
    P.save(store, "k", tree(tmp_path / "run", {f"{OURS}m-ZIP_DEFLATED-none": "zip"}))
    assert P.restore(store, "k", tmp_path / "ok") == [f"{OURS}m-ZIP_DEFLATED-none"]
    for loose in (store, store / "k", store / "k" / f"{OURS}m-ZIP_DEFLATED-none"):
        before = stat.S_IMODE(loose.stat().st_mode)
        loose.chmod(before | 0o002)
        with pytest.raises(P.UntrustedCache, match=r"not this user's alone .* fix: rm -rf "):
            P.restore(store, "k", tmp_path / "loose")
        loose.chmod(before)
    assert not list((tmp_path / "loose").glob("*"))  # nothing was copied from a loose store
    planted = tmp_path / "elsewhere"
    planted.write_text("not ours")
    (store / "k" / f"{OURS}other-ZIP_DEFLATED-none").symlink_to(planted)
    with pytest.raises(P.UntrustedCache):
        P.restore(store, "k", tmp_path / "linked")
