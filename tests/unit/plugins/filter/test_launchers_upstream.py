"""Our rendered files read by the launchers' OWN parsers, not by ours.

- DeepSpeed: `deepspeed.launcher.runner.fetch_hostfile` (and the --include filter). When DeepSpeed
  is importable we call it; otherwise (importing it needs torch, a built op registry and ~10 more
  packages) we fetch DeepSpeed's sdist from PyPI with `pip download --no-deps` at test time and
  execute the parser functions' source from runner.py (nothing of DeepSpeed is committed here).
- accelerate: `accelerate.commands.config.config_args.load_config_from_file`, the loader behind
  `accelerate launch --config_file`. Needs torch; accelerate and its pure-Python helpers are
  fetched with `pip install --no-deps --target` into a cache at test time.

Downloads are cached under ~/.cache/provision/upstream (PROVISION_UPSTREAM_CACHE). A test skips only
when the package cannot be had (no index reachable), saying so.
"""

from __future__ import annotations

import ast
import collections
import importlib.util
import logging
import os
import re
import subprocess
import sys
import tarfile
from copy import deepcopy
from pathlib import Path

import pytest
import yaml

import helpers  # noqa: F401
from helpers import cannot_run
from ansible_collections.provision.cluster.plugins.filter import launchers as L

DEEPSPEED = "deepspeed==0.19.8"
ACCELERATE = ["accelerate==1.15.0", "huggingface_hub", "safetensors", "numpy", "psutil", "pyyaml", "packaging",
              "filelock", "fsspec", "tqdm", "requests", "typing_extensions", "hf_xet", "idna", "certifi",
              "charset_normalizer", "urllib3"]
PARSER_FUNCTIONS = ("fetch_hostfile", "_parse_hostfile", "_stable_remove_duplicates", "parse_node_config",
                    "parse_node_config_list", "parse_resource_filter", "parse_inclusion_exclusion")


def _cache() -> Path:
    path = Path(os.environ.get("PROVISION_UPSTREAM_CACHE") or Path.home() / ".cache/provision/upstream")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _pip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, timeout=600, check=False)


def _deepspeed_runner_source() -> str:
    name, version = DEEPSPEED.split("==")
    target = _cache() / "deepspeed"
    sdists = sorted(target.glob(f"{name}-{version}.tar.gz"))
    if not sdists:
        proc = _pip("download", "--no-deps", "--no-binary", ":all:", "-d", str(target), DEEPSPEED)
        sdists = sorted(target.glob(f"{name}-{version}.tar.gz"))
        if not sdists:
            cannot_run(f"DeepSpeed's sdist cannot be downloaded here (pip: {proc.stderr.strip()[-200:]})")
    with tarfile.open(sdists[0]) as tar:
        member = f"{name}-{version}/deepspeed/launcher/runner.py"
        return tar.extractfile(member).read().decode()


@pytest.fixture(scope="module")
def deepspeed_runner():
    """A namespace with DeepSpeed's own fetch_hostfile / parse_inclusion_exclusion."""
    if importlib.util.find_spec("deepspeed") is not None:
        try:
            from deepspeed.launcher import runner
            return runner
        except Exception:  # noqa: BLE001 - an installed but unimportable DeepSpeed: fall back to its source
            pass
    tree = ast.parse(_deepspeed_runner_source())
    funcs = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in PARSER_FUNCTIONS]
    assert {f.name for f in funcs} == set(PARSER_FUNCTIONS), "DeepSpeed's runner.py changed shape"
    namespace = {"os": os, "re": re, "collections": collections, "deepcopy": deepcopy,
                 "defaultdict": collections.defaultdict, "logger": logging.getLogger("deepspeed"),
                 "Tuple": tuple, "List": list, "Dict": dict}
    exec(compile(ast.Module(body=funcs, type_ignores=[]), "deepspeed/launcher/runner.py", "exec"), namespace)
    return type("runner", (), {k: staticmethod(namespace[k]) for k in PARSER_FUNCTIONS})


def nodes(*slots):
    names = ["node%d" % (i + 1) for i in range(len(slots))]
    hostvars = {n: {"cluster_address": "10.89.77.%d" % (11 + i), "launchers_slots": s}
                for i, (n, s) in enumerate(zip(names, slots, strict=True))}
    return L.launch_nodes(names, hostvars)


def test_deepspeed_reads_our_hostfile(tmp_path, deepspeed_runner):
    path = tmp_path / "hostfile"
    path.write_text(L.deepspeed_hostfile(nodes(8, 4), header="Managed by Ansible"))
    pool = deepspeed_runner.fetch_hostfile(str(path))
    assert list(pool.items()) == [("node1", 8), ("node2", 4)]
    # what `deepspeed --include node2:0,1` would start from our hostfile
    active = deepspeed_runner.parse_inclusion_exclusion(pool, "node2:0,1", "")
    assert dict(active) == {"node2": [0, 1]}


def test_deepspeed_rejects_what_we_must_never_write(tmp_path, deepspeed_runner):
    # the check above would pass vacuously if the parser accepted anything
    path = tmp_path / "bad"
    path.write_text(L.colossalai_hostfile(nodes(1, 1)))  # names only: not a DeepSpeed hostfile
    with pytest.raises(ValueError, match="bad entry"):
        deepspeed_runner.fetch_hostfile(str(path))


def test_mpi_hostfile_is_also_valid_for_deepspeed(tmp_path, deepspeed_runner):
    path = tmp_path / "hostfile.mpi"
    path.write_text(L.mpi_hostfile(nodes(2, 2, 2), header="x"))
    assert list(deepspeed_runner.fetch_hostfile(str(path))) == ["node1", "node2", "node3"]


@pytest.fixture(scope="module")
def accelerate_loader():
    if importlib.util.find_spec("torch") is None:
        cannot_run("accelerate imports torch, which is not in this venv (pip install torch==2.13.0)")
    target = _cache() / "accelerate-1.15.0"
    if not (target / "accelerate").is_dir():
        proc = _pip("install", "--quiet", "--no-deps", "--target", str(target), *ACCELERATE)
        if proc.returncode != 0:
            cannot_run(f"accelerate cannot be installed here (pip: {proc.stderr.strip()[-200:]})")
    sys.path.insert(0, str(target))
    try:
        from accelerate.commands.config.config_args import load_config_from_file
    finally:
        sys.path.remove(str(target))
    return load_config_from_file


@pytest.mark.parametrize("use_gpu", [True, False])
def test_accelerate_loads_our_config(tmp_path, accelerate_loader, use_gpu):
    ns = nodes(4, 4)
    for name, rank in (("node1", 0), ("node2", 1)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(L.accelerate_config(ns, name, "10.89.77.11", 29500, use_gpu=use_gpu, header="managed"))
        cfg = accelerate_loader(str(path))
        assert type(cfg).__name__ == "ClusterConfig"
        assert (cfg.machine_rank, cfg.main_process_ip, cfg.main_process_port) == (rank, "10.89.77.11", 29500)
        assert (cfg.num_machines, cfg.num_processes, cfg.rdzv_backend, cfg.same_network) == (2, 8, "c10d", False)
        assert str(cfg.distributed_type).endswith("MULTI_GPU" if use_gpu else "MULTI_CPU")
        # accelerate writes back what it read: nothing of ours was dropped as unknown
        assert set(yaml.safe_load(path.read_text())) <= set(cfg.to_dict())
