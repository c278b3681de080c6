"""python_env: pins, wheelhouse manifests, pip/venv/conda commands, the version probe and the
cross-node comparison."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import helpers
from helpers import FIXTURES, REPO, need_module

from ansible_collections.provision.cluster.plugins.module_utils.gpu import gpu as G
from ansible_collections.provision.cluster.plugins.module_utils.common import python_env as P

CAPTURES = REPO / "tests" / "fixtures" / "toolchains"


def test_parse_pin_exact_only():
    assert P.parse_pin("torch==2.13.0") == ("torch", "2.13.0")
    assert P.parse_pin("Typing_Extensions==4.16.0") == ("typing-extensions", "4.16.0")
    assert P.parse_pin("deepspeed[autotuning]==0.16.4") == ("deepspeed", "0.16.4")
    for bad in ("torch", "torch>=2.1", "torch==2.*; python_version<'3.12'", ""):
        with pytest.raises(ValueError, match="not an exact pin"):
            P.parse_pin(bad)


def test_pin_satisfied_local_versions():
    assert P.pin_satisfied("2.13.0+cpu", "2.13.0")
    assert not P.pin_satisfied("2.13.0+cpu", "2.13.0+cu130")
    assert not P.pin_satisfied("2.12.1", "2.13.0")
    assert not P.pin_satisfied(None, "2.13.0")
    installed = {"torch": "2.13.0+cpu", "numpy": "2.3.5"}
    assert P.unmet_pins(["torch==2.13.0", "numpy==2.3.5"], installed) == []
    assert P.unmet_pins(["torch==2.13.0", "NumPy==2.2.6", "einops==0.8.2"], installed) == ["NumPy==2.2.6", "einops==0.8.2"]


def test_requirement_key_is_order_free():
    assert P.requirement_key(["torch==2.13.0", "numpy==2.3.5"]) == P.requirement_key(["numpy==2.3.5", "torch==2.13.0"]) \
        == "numpy==2.3.5 torch==2.13.0"


def test_pip_download_argv_targets_the_nodes_platform():
    argv = P.pip_download_argv("/usr/bin/python3", "/wh", ["torch==2.13.0"], platform="manylinux_2_28_x86_64",
                               python_version="3.11", implementation="cp", abi="cp311", find_links=["/opt/wheels"])
    assert argv[:4] == ["/usr/bin/python3", "-m", "pip", "download"]
    assert "--only-binary=:all:" in argv and argv[-1] == "torch==2.13.0"
    plats = [argv[i + 1] for i, a in enumerate(argv) if a == "--platform"]
    # numpy 2.2 is tagged manylinux_2_17/manylinux2014 only; pip 23 needs them named
    assert plats[0] == "manylinux_2_28_x86_64" and "manylinux_2_17_x86_64" in plats and "manylinux2014_x86_64" in plats
    assert argv[argv.index("--abi") + 1] == "cp311" and argv[argv.index("--find-links") + 1] == "/opt/wheels"
    assert P.expand_platform("macosx_11_0_arm64") == ["macosx_11_0_arm64"]


def test_downloaded_files_real_pip_output():
    new = P.downloaded_files((CAPTURES / "pip-download-new.txt").read_text())
    assert new == ["numpy-2.2.6-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"]
    present = P.downloaded_files((CAPTURES / "pip-download-present.txt").read_text())
    assert "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl" in present
    assert len(present) == 11 and all(f.endswith(".whl") for f in present)


TORCH = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
NUMPY = "numpy-2.3.5-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
SYMPY = "sympy-1.14.0-py3-none-any.whl"


def test_manifest_sets_missing(tmp_path):
    pkey = P.platform_key("manylinux_2_28_x86_64", "3.11", "cp", "cp311")
    manifest = {"platform": pkey, "sets": {"numpy==2.3.5 torch==2.13.0": [NUMPY, SYMPY, TORCH]}}
    sets = [["torch==2.13.0", "numpy==2.3.5"]]
    both = {TORCH, NUMPY, SYMPY}
    assert P.manifest_sets_missing(manifest, sets, pkey, both) == []
    assert P.manifest_sets_missing(manifest, sets, pkey, {TORCH, SYMPY}) == sets            # a file went away
    assert P.manifest_sets_missing(manifest, sets + [["numpy==2.2.6"]], pkey, both) == [["numpy==2.2.6"]]
    other = P.platform_key("manylinux_2_28_aarch64", "3.11", "cp", "cp311")
    assert P.manifest_sets_missing(manifest, sets, other, both) == sets  # platform changed


def test_a_set_recorded_without_its_own_pins_wheels_is_downloaded_again():
    """Seen on this machine: two controllers filled one wheelhouse at once and the manifest kept the set
    'numpy==2.3.5 torch==2.13.0' with only their dependencies; every later run copied the nodes a
    wheelhouse without torch and pip failed 'No matching distribution found for torch==2.13.0'."""
    pkey = P.platform_key("manylinux_2_28_x86_64", "3.11", "cp", "cp311")
    sets = [["torch==2.13.0", "numpy==2.3.5"]]
    lost = {"platform": pkey, "sets": {"numpy==2.3.5 torch==2.13.0": [SYMPY]}}
    assert P.manifest_sets_missing(lost, sets, pkey, {TORCH, NUMPY, SYMPY}) == sets
    assert P.pins_without_wheel(["torch==2.13.0", "numpy==2.3.5", "typing-extensions==4.16.0"], [SYMPY, NUMPY]) == [
        "torch==2.13.0", "typing-extensions==4.16.0"]
    assert P.pins_without_wheel(["Typing_Extensions==4.16.0"], ["typing_extensions-4.16.0-py3-none-any.whl"]) == []
    assert P.pins_without_wheel(["torch==2.13.0+cu121"], [TORCH]) == ["torch==2.13.0+cu121"]   # another build
    assert P.wheel_project("not-a-wheel.tar.gz") == (None, None)


def test_file_records_hash_once_and_diff(tmp_path):
    (tmp_path / "a.whl").write_bytes(b"wheel-a")
    recs = P.file_records(str(tmp_path), ["a.whl"], {})
    assert recs["a.whl"]["sha256"] == P.sha256_file(str(tmp_path / "a.whl")) and recs["a.whl"]["size"] == 7
    # a stale cache entry (same size/mtime) is trusted: nothing re-read
    cached = {"a.whl": dict(recs["a.whl"], sha256="cached")}
    assert P.file_records(str(tmp_path), ["a.whl"], cached)["a.whl"]["sha256"] == "cached"
    expected = [{"name": "a.whl", "size": 7, "sha256": recs["a.whl"]["sha256"]},
                {"name": "b.whl", "size": 3, "sha256": "x"}]
    assert P.wheelhouse_diff(expected, recs) == ["b.whl"]
    assert P.wheelhouse_diff(expected, {"a.whl": dict(recs["a.whl"], sha256="other"), "b.whl": {"size": 3, "sha256": "x"}}) == ["a.whl"]


def _module(name, args):
    return helpers.run_module(name, args, env={"PATH": "/usr/bin:/bin"})


def test_wheelhouse_sync_module_compare_and_adopt(tmp_path):
    node = tmp_path / "node"
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "a.whl").write_bytes(b"wheel-a")
    files = [{"name": "a.whl", "size": 7, "sha256": P.sha256_file(str(staged / "a.whl"))}]
    first = _module("wheelhouse_sync", {"path": str(node), "files": files})
    assert first["changed"] and first["missing"] == ["a.whl"] and node.is_dir()
    check = _module("wheelhouse_sync", {"path": str(node), "files": files, "_ansible_check_mode": True})
    assert check["changed"] and check["missing"] == ["a.whl"]
    adopted = _module("wheelhouse_sync", {"path": str(node), "files": files, "staged": str(staged)})
    assert adopted["missing"] == [] and (node / "a.whl").read_bytes() == b"wheel-a"
    again = _module("wheelhouse_sync", {"path": str(node), "files": files})
    assert not again["changed"] and again["missing"] == [] and again["present"] == ["a.whl"]
    # a corrupt transfer is refused, not installed
    (staged / "b.whl").write_bytes(b"bad")
    bad = _module("wheelhouse_sync", {"path": str(node), "staged": str(staged),
                                      "files": files + [{"name": "b.whl", "size": 3, "sha256": "0" * 64}]})
    assert bad["failed"] and "b.whl: sha256" in bad["msg"] and not (node / "b.whl").exists()


def test_wheelhouse_sync_fetches_from_a_peer_and_checks_every_file(tmp_path):
    """A node fetches the wheels it lacks from another node's server (python_env_wheel_peers); a file
    the peer serves wrong is refused and left missing (the action then sends it from the controller)."""
    import functools
    import http.server
    import threading

    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "a.whl").write_bytes(b"wheel-a")
    (seed / "b.whl").write_bytes(b"tampered")
    files = [{"name": "a.whl", "size": 7, "sha256": P.sha256_file(str(seed / "a.whl"))},
             {"name": "b.whl", "size": 7, "sha256": "0" * 64},
             {"name": "c.whl", "size": 3, "sha256": "1" * 64}]  # the peer does not have it
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(seed))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        node = tmp_path / "node"
        node.mkdir()
        url = "http://127.0.0.1:%d/" % server.server_address[1]
        got = _module("wheelhouse_sync", {"path": str(node), "files": files, "peer_url": url, "fetch": True,
                                          "peer_timeout": 5})
    finally:
        server.shutdown()
    assert got["fetched"] == ["a.whl"] and got["bytes_from_peer"] == 7 + 8
    assert (node / "a.whl").read_bytes() == b"wheel-a" and not (node / "b.whl").exists()
    assert got["missing"] == ["b.whl", "c.whl"]
    assert "sha256" in got["peer_errors"]["b.whl"] and "c.whl" in got["peer_errors"]
    assert not [p for p in node.iterdir() if p.name.startswith(".incoming-")]


def test_pip_install_is_offline():
    argv = P.pip_install_argv("/opt/provision/venv/bin/python", ["torch==2.13.0"], "/var/cache/provision/wheelhouse")
    assert "--no-index" in argv and argv[argv.index("--find-links") + 1] == "/var/cache/provision/wheelhouse"
    assert not any(a.startswith("--index-url") or a.startswith("--extra-index-url") for a in argv)
    assert P.venv_create_argv("/usr/bin/python3", "/opt/v") == ["/usr/bin/python3", "-m", "venv", "/opt/v"]
    assert P.venv_env("/opt/v") == {"env": {"VIRTUAL_ENV": "/opt/v"}, "path": ["/opt/v/bin"], "ld_library_path": [],
                                    "source": []}


def test_conda_commands():
    # no installer can be downloaded here: the generated commands are what is tested
    assert P.conda_install_argv("/var/cache/provision/Miniforge3-Linux-x86_64.sh", "/opt/conda") == \
        ["bash", "/var/cache/provision/Miniforge3-Linux-x86_64.sh", "-b", "-p", "/opt/conda"]
    argv = P.conda_create_argv("/opt/conda", "/opt/conda/envs/provision", "3.11")
    assert argv == ["/opt/conda/bin/conda", "create", "--yes", "--quiet", "--prefix", "/opt/conda/envs/provision",
                    "python=3.11", "pip"]
    argv = P.conda_create_argv("/opt/conda", "/opt/conda/envs/p", "3.11", channels=["conda-forge"], offline=True)
    assert argv[-4:] == ["--channel", "conda-forge", "--override-channels", "--offline"]
    assert not any("init" == a for a in argv)
    prefix, env = P.conda_env_facts("/opt/conda", "provision")
    assert prefix == "/opt/conda/envs/provision"
    assert env["path"][0] == "/opt/conda/envs/provision/bin" and env["env"]["CONDA_PREFIX"] == prefix
    assert P.python_matches("3.11.9", "3.11") and not P.python_matches("3.12.1", "3.11") and not P.python_matches(None, "3.11")


def test_conda_module_checks_installer_sha256(tmp_path):
    installer = tmp_path / "Miniforge3.sh"
    installer.write_text("#!/bin/sh\nexit 0\n")
    out = _module("conda_env", {"installer": str(installer), "installer_sha256": "0" * 64,
                                "prefix": str(tmp_path / "conda")})
    assert out["failed"] and "sha256" in out["msg"] and "wrong or corrupt installer" in out["msg"]
    good = _module("conda_env", {"installer": str(installer), "installer_sha256": P.sha256_file(str(installer)),
                                 "prefix": str(tmp_path / "conda"), "_ansible_check_mode": True})
    assert good["changed"] and good["commands"][0] == ["bash", str(installer), "-b", "-p", str(tmp_path / "conda")]
    assert good["commands"][1][:2] == [str(tmp_path / "conda/bin/conda"), "create"]


def test_versions_probe_real_output():
    # the probe's own output in a lab node's venv (see tests/fixtures/toolchains/README.md)
    raw = P.parse_probe((CAPTURES / "versions-probe-lab.txt").read_text())
    v = P.normalize_versions(raw)
    assert v["torch"] == "2.13.0+cpu" and v["python"].startswith("3.11.")
    assert v["torch_cuda"] is None and v["cuda_available"] is False
    assert v["backends"]["gloo"] is True and v["backends"]["nccl"] is False
    assert v["packages"]["numpy"] == "2.3.5"


def test_versions_from_the_h100_capture_compare_against_the_lab():
    h100 = G.parse_torch_versions((FIXTURES / "h100-node" / "torch-versions.txt").read_text())
    gpu = {"python": h100["python"], "torch": h100["torch"], "torch_cuda": h100["torch_cuda"], "nccl": h100["nccl"],
           "backends": h100["backends"], "packages": {}}
    lab = P.normalize_versions(P.parse_probe((CAPTURES / "versions-probe-lab.txt").read_text()))
    lab["packages"] = {}
    res = P.compare_versions({"gpu1": gpu, "lab1": lab}, ["gpu1", "lab1"])
    assert not res["ok"] and {"torch", "torch_cuda", "nccl", "python", "nccl_backend"} <= set(res["differing_columns"])


def _v(torch="2.13.0+cpu", numpy="2.3.5", gloo=True):
    return {"python": "3.11.2", "torch": torch, "torch_cuda": None, "nccl": None,
            "backends": {"gloo": gloo, "nccl": False, "mpi": False}, "packages": {"numpy": numpy}}


def test_compare_equal():
    res = P.compare_versions({"node1": _v(), "node2": _v(), "node3": _v()}, ["node1", "node2", "node3"])
    assert res["ok"] and res["table"] == "" and res["differing_hosts"] == []
    assert P.versions_check(res)["status"] == "pass"


def test_compare_names_the_odd_node_with_a_table():
    res = P.compare_versions({"node1": _v(), "node2": _v(torch="2.12.0+cpu"), "node3": _v()},
                             ["node1", "node2", "node3"])
    assert not res["ok"] and res["differing_hosts"] == ["node2"] and res["differing_columns"] == ["torch"]
    lines = res["table"].splitlines()
    assert lines[0].split() == ["node", "torch"]
    assert lines[2].split() == ["node2", "2.12.0+cpu*"]
    assert lines[1].split() == ["node1", "2.13.0+cpu"]
    check = P.versions_check(res)
    assert check["status"] == "fail" and "node2: torch" in check["detail"] and "python_env" in check["fix"]


def test_compare_two_nodes_tie_reference_is_first_node_and_several_columns():
    res = P.compare_versions({"node1": _v(), "node2": _v(numpy="2.2.6", gloo=False)}, ["node1", "node2"])
    assert res["differing_hosts"] == ["node2"]
    assert res["differing_columns"] == ["gloo", "numpy"]
    assert "2.2.6*" in res["table"] and "no*" in res["table"]


def test_compare_reports_a_node_without_versions():
    res = P.compare_versions({"node1": _v(), "node2": _v()}, ["node1", "node2", "node3"])
    assert not res["ok"] and res["differing_hosts"] == ["node3"] and "node3" in res["table"]


def test_compare_a_package_among_the_records_that_read_it():
    # issue 32: inside site.yml node1's record is the python_env stage's (its extras: numpy) and node2's
    # verify's own, read after a repair with another list; a record that did not read a package says nothing
    # of it, so the nodes are equal, where "node2: numpy" (absent read as "-") sent the user the wrong way
    bare = dict(_v(), packages={})
    res = P.compare_versions({"node1": _v(), "node2": bare}, ["node1", "node2"])
    assert res["ok"] and res["differing_hosts"] == [] and res["table"] == ""
    # read and different is named; read and absent (None) is a difference too; not read shows "?"
    res = P.compare_versions({"node1": _v(), "node2": _v(numpy="2.4.6"), "node3": bare}, ["node1", "node2", "node3"])
    assert not res["ok"] and res["differing_columns"] == ["numpy"] and res["differing_hosts"] == ["node2"]
    assert res["table"].splitlines()[3].split() == ["node3", "?"]
    res = P.compare_versions({"node1": _v(), "node2": _v(numpy=None)}, ["node1", "node2"])
    assert res["differing_hosts"] == ["node2"] and "-*" in res["table"]


def test_package_names_from_specs_or_names_each_once():
    assert P.requirement_name("numpy==2.3.5") == "numpy"
    assert P.requirement_name(" deepspeed[all]>=0.15 ; python_version>'3'") == "deepspeed"
    assert P.requirement_name("flash-attn") == "flash-attn"
    assert P.package_names(["numpy==2.3.5", "deepspeed==0.16.4"], ["Numpy", "flash_attn", "flash-attn"], None) == [
        "numpy", "deepspeed", "flash_attn"]
    assert P.package_names() == [] and P.package_names([], None) == []


def test_versions_compare_outcome_fails_with_table():
    out, msg = P.compare_outcome({"node1": _v(), "node2": _v(numpy="2.2.6")}, ["node1", "node2"])
    assert msg.startswith("versions differ on node2:") and "numpy" in msg and "2.2.6*" in msg
    assert out["check"]["status"] == "fail" and out["differing_hosts"] == ["node2"]
    assert P.compare_outcome({"node1": _v(), "node2": _v(numpy="2.2.6")}, fail=False)[1] is None
    ok, msg = P.compare_outcome({"node1": _v(), "node2": _v()})
    assert ok["ok"] and msg is None


def test_versions_compare_action_runs_in_ansible_without_a_module_process():
    """Through ansible itself: the action plugin answers (the module file is documentation only)."""
    args = json.dumps({"versions": {"node1": _v(), "node2": _v(numpy="2.2.6")}, "order": ["node1", "node2"]})
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible"), "localhost", "-c", "local", "-o",
                           "-m", "provision.cluster.versions_compare", "-a", args],
                          capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={**{k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")},
                               "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")})
    assert proc.returncode != 0 and "versions differ on node2" in proc.stdout, proc.stdout + proc.stderr


# ---------------------------------------------------------------- versions probe cache
def _fake_env(tmp_path):
    prefix = tmp_path / "env"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").symlink_to(sys.executable)
    site = prefix / "lib" / "python3.11" / "site-packages"
    (site / "torch" / "lib").mkdir(parents=True)
    (site / "torch-2.13.0.dist-info").mkdir()
    return prefix, site


def test_probe_cache_key_follows_installs_removals_and_torch_libraries(tmp_path):
    prefix, site = _fake_env(tmp_path)
    python = str(prefix / "bin" / "python")
    key = P.probe_cache_key(python)
    assert P.probe_cache_key(python) == key                             # stable
    (site / "numpy-2.3.5.dist-info").mkdir()
    installed = P.probe_cache_key(python)
    assert installed != key
    lib = site / "torch" / "lib" / "libtorch_cpu.so"
    lib.write_bytes(b"")                                                  # torch's libraries changed
    with_lib = P.probe_cache_key(python)
    assert with_lib != installed
    os.utime(lib, ns=(1, 1))                                              # replaced in place (dir mtime kept)
    assert P.probe_cache_key(python) != with_lib


def test_installed_versions_from_dist_info_names(tmp_path):
    prefix, site = _fake_env(tmp_path)
    (site / "numpy-2.3.5.dist-info").mkdir()
    (site / "typing_extensions-4.12.2.dist-info").mkdir()
    assert P.installed_versions(str(prefix / "bin" / "python"), ["numpy", "typing-extensions", "deepspeed"]) == {
        "numpy": "2.3.5", "typing-extensions": "4.12.2", "deepspeed": None}


def test_cached_versions_needs_the_same_key(tmp_path):
    path = tmp_path / "cache.json"
    assert P.cached_versions(str(path), "k") is None
    path.write_text(json.dumps({"key": "k", "versions": {"torch": "2.13.0+cpu"}}))
    assert P.cached_versions(str(path), "k") == {"torch": "2.13.0+cpu"}
    prefix, site = _fake_env(tmp_path)
    (site / "numpy-2.3.5.dist-info").mkdir()
    assert P.cached_versions(str(path), "k", str(prefix / "bin" / "python"), ["numpy"]) == {
        "torch": "2.13.0+cpu", "packages": {"numpy": "2.3.5"}}
    assert P.cached_versions(str(path), "other") is None


def test_python_versions_module_reuses_its_answer_until_the_environment_changes(tmp_path):
    need_module("torch", "the probe must import torch for its answer to be kept")
    cache = tmp_path / "versions.json"
    args = {"python": sys.executable, "packages": ["pyyaml"], "cache": str(cache)}
    first = _module("python_versions", dict(args, _ansible_check_mode=True))
    assert first["cached"] is False and not cache.exists()                 # check mode writes nothing
    second = _module("python_versions", args)
    assert second["cached"] is False and cache.exists() and second["changed"] is False
    third = _module("python_versions", args)
    assert third["cached"] is True and third["checks"][0]["status"] == "pass"
    assert third["ansible_facts"] == second["ansible_facts"]
    data = json.loads(cache.read_text())
    cache.write_text(json.dumps(dict(data, key="stale")))                  # environment changed
    assert _module("python_versions", args)["cached"] is False


# ---------------------------------------------------------------- DeepSpeed built for another torch

def test_deepspeed_build_read_from_its_installed_file():
    wheel = P.parse_deepspeed_build((CAPTURES / "deepspeed-0.15.0-wheel-git_version_info_installed.py.txt").read_text())
    assert wheel["version"] == "0.15.0" and wheel["torch"] == "2.3" and wheel["cuda"] == "12.1"
    assert "fused_adam" in wheel["ops"] and "async_io" not in wheel["ops"]
    sdist = P.parse_deepspeed_build((CAPTURES / "deepspeed-0.15.0-sdist-git_version_info_installed.py.txt").read_text())
    assert sdist == {"version": "0.15.0", "torch": "2.13", "cuda": "0.0", "ops": []}


def test_deepspeed_check_is_the_seeds_upgraded_torch():
    py = "/opt/provision/venv/bin/python"
    wheel = P.parse_deepspeed_build((CAPTURES / "deepspeed-0.15.0-wheel-git_version_info_installed.py.txt").read_text())
    upgraded = P.deepspeed_check(wheel, "2.4.1+cu121", "12.1", py)
    assert upgraded["status"] == "fail" and "compiled for torch 2.3" in upgraded["detail"]
    assert "torch 2.4.1+cu121" in upgraded["detail"] and "--no-cache-dir --force-reinstall" in upgraded["fix"]
    assert upgraded["fix"].startswith(py + " -m pip install")
    assert P.deepspeed_check(wheel, "2.3.1+cu121", "12.1", py)["status"] == "pass"
    other_cuda = P.deepspeed_check(wheel, "2.3.1+cu118", "11.8", py)
    assert other_cuda["status"] == "fail" and "CUDA 12.1" in other_cuda["detail"]
    # just-in-time ops (the sdist build), no DeepSpeed, no torch: nothing to compare
    sdist = P.parse_deepspeed_build((CAPTURES / "deepspeed-0.15.0-sdist-git_version_info_installed.py.txt").read_text())
    assert P.deepspeed_check(sdist, "2.4.1", None, py) is None
    assert P.deepspeed_check(None, "2.4.1", None, py) is None
    assert P.deepspeed_check(wheel, None, None, py) is None


def test_deepspeed_build_found_in_an_environment(tmp_path):
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "deepspeed"
    site.mkdir(parents=True)
    python = str(tmp_path / "venv" / "bin" / "python")
    assert P.deepspeed_build(python) is None
    src = CAPTURES / "deepspeed-0.15.0-wheel-git_version_info_installed.py.txt"
    (site / "git_version_info_installed.py").write_text(src.read_text())
    assert P.deepspeed_build(python)["torch"] == "2.3"
