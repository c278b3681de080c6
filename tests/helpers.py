"""Shared test helpers: paths, the lab, and running Ansible the way a user does."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import bounds

REPO = Path(__file__).resolve().parent.parent
# real captured outputs, each folder with a README that says where it comes from
FIXTURES = REPO / "tests" / "fixtures"
COLLECTIONS = REPO / "collections"
LAB_INVENTORY = REPO / "inventory" / "lab"
# the lab of fresh VMs of each supported Debian release (conftest's release_lab; molecule's releases)
RELEASES = ["bullseye", "bookworm", "trixie"]
RELEASE_LAB_OPTIONS = ["--os", ",".join(RELEASES), "--init", "systemd", "--image", "bare"]
BIN = Path(sys.executable).parent

if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))


def tool(name: str) -> str:
    """An executable from the test venv (ansible-playbook, provision, ...) or PATH."""
    local = BIN / name
    return str(local) if local.exists() else (shutil.which(name) or name)


def ansible_env(lab_name: str | None = None, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["ANSIBLE_CONFIG"] = str(REPO / "ansible.cfg")
    env["ANSIBLE_FORCE_COLOR"] = "0"
    env["ANSIBLE_NOCOLOR"] = "1"
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    if lab_name:
        env["PROVISION_LAB_NAME"] = lab_name
        # hosts are called node1..N in every lab: keep each lab's cached facts apart
        env["ANSIBLE_CACHE_PLUGIN_CONNECTION"] = os.path.expanduser(f"~/.cache/provision/facts-{lab_name}")
    env.update(extra)
    return env


def adhoc(module: str, args: dict, *extra: str) -> tuple[str, dict]:
    """`ansible localhost -c local -m provision.cluster.MODULE` as a user runs it -> (status, result)."""
    argv = [tool("ansible"), "localhost", "-c", "local", "-m", f"provision.cluster.{module}",
            "-a", json.dumps(args), "-o", *extra]
    proc = subprocess.run(argv, cwd=REPO, env=ansible_env(), capture_output=True, text=True, timeout=bounds.COMMAND,
                          check=False)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("localhost |"))
    status, _, payload = line.partition(" => ")
    return status, json.loads(payload)


def run_module(name: str, args: dict, env: dict[str, str] | None = None) -> dict:
    """A module's main() run in this process on ARGS (with _ansible_check_mode etc. as Ansible passes
    them) -> its result. env: the whole environment during the run (as a module process started with it)."""
    import contextlib
    import importlib
    import io
    import locale
    from unittest import mock

    from ansible.module_utils.common import warnings as module_warnings

    module = importlib.import_module(f"ansible_collections.provision.cluster.plugins.modules.{name}")
    # a module process starts with no warnings: earlier runs in this process must not hide or add any
    # (ansible-core keeps them in module-level collections, and 2.19 shows a repeated one once)
    module_warnings._global_warnings.clear()
    module_warnings._global_deprecations.clear()
    out = io.StringIO()
    saved = locale.setlocale(locale.LC_ALL)  # AnsibleModule sets the locale from the environment
    # a module process is not the controller: ansible-core 2.19 shows a warning on the controller's display
    # instead of returning it once a test of this process imported the controller's code
    try:
        from ansible.module_utils import _internal as module_internal
    except ImportError:  # 2.16-2.18
        module_internal = None
    not_controller = (mock.patch.object(module_internal, "is_controller", False)
                      if hasattr(module_internal, "is_controller") else contextlib.nullcontext())
    with mock.patch.dict(os.environ, env or {}, clear=env is not None), patch_module_args(args), \
            contextlib.redirect_stdout(out), not_controller:
        try:
            module.main()
        except SystemExit:
            pass
        finally:
            locale.setlocale(locale.LC_ALL, saved)
    return json.loads(out.getvalue())


try:
    from ansible.module_utils.testing import patch_module_args  # ansible-core >= 2.19
except ImportError:  # 2.16-2.18: AnsibleModule reads its arguments from basic._ANSIBLE_ARGS
    import contextlib as _contextlib

    @_contextlib.contextmanager
    def patch_module_args(args=None):
        from ansible.module_utils import basic

        saved = basic._ANSIBLE_ARGS
        basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": dict(args or {})}).encode()
        try:
            yield
        finally:
            basic._ANSIBLE_ARGS = saved


_RECAP = re.compile(r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
                    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)", re.M)


class PlaybookResult:
    def __init__(self, proc: subprocess.CompletedProcess):
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.recap = {m["host"]: {k: int(m[k]) for k in ("ok", "changed", "unreachable", "failed")}
                      for m in _RECAP.finditer(proc.stdout)}

    @property
    def changed(self) -> int:
        return sum(h["changed"] for h in self.recap.values())

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    @property
    def failures(self) -> list[str]:
        """The lines where Ansible reports a failed or unreachable task (`fatal: [node1]: FAILED! => ...`),
        each with the task header above it, cut to 700 characters: what a truncated log must still show."""
        out, task = [], ""
        for line in self.output.splitlines():
            if line.startswith("TASK ["):
                task = line.rstrip(" *")
            elif line.startswith(("fatal: [", "failed: [", "ERROR!")):
                out.append((f"{task} {line}" if task else line)[:700])
        return out

    def __repr__(self) -> str:  # shows up in assertion messages
        # the failures first: a log that keeps only the head of a long message still shows why
        failures = "".join(f"\n  {line}" for line in self.failures[:6])
        return f"PlaybookResult(rc={self.rc}){failures}\nrecap={self.recap}\n{self.output[-6000:]}"


def run_playbook(playbook: str | Path, *, lab_name: str | None = None, inventory: str | Path | None = None,
                 extra_args: list[str] | None = None, extra_vars: dict | None = None,
                 env: dict[str, str] | None = None, timeout: float = bounds.STAGES) -> PlaybookResult:
    argv = [tool("ansible-playbook"), str(REPO / playbook) if not Path(playbook).is_absolute() else str(playbook),
            "-i", str(inventory or LAB_INVENTORY)]
    if extra_vars:
        argv += ["-e", json.dumps(extra_vars)]
    argv += extra_args or []
    proc = subprocess.run(argv, cwd=REPO, env={**ansible_env(lab_name), **(env or {})},
                          capture_output=True, text=True, timeout=timeout, check=False)
    return PlaybookResult(proc)


def lab_cmd(*args: str, lab_name: str, timeout: float = bounds.LAB_UP, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([tool("provision"), "lab", *args, "--name", lab_name], cwd=REPO,
                          env=ansible_env(), capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"provision lab {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def node_exec(lab_name: str, node: int, script: str, *, check: bool = True, timeout: float = bounds.COMMAND,
              user: str | None = None, privileged: bool = False) -> subprocess.CompletedProcess:
    """Run a shell script inside a lab node (as root unless user is given; privileged: with every
    capability, e.g. CAP_NET_ADMIN for `ip rule`, which the node's own processes do not have)."""
    argv = (["podman", "exec"] + (["--user", user] if user else []) + (["--privileged"] if privileged else [])
            + [f"{lab_name}-node{node}", "bash", "-c", script])
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise AssertionError(f"node{node}: `{script}` failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


STRICT = os.environ.get("PROVISION_TEST_STRICT") == "1"


def cannot_run(reason: str):
    """A test that cannot run on this machine (no podman, no torch, a download that failed): skipped
    for a developer's partial setup, but a FAILURE under PROVISION_TEST_STRICT=1 (scripts/test.sh and
    CI set it), where everything is installed and a skip would hide work that did not run."""
    import pytest

    if STRICT:
        pytest.fail(f"{reason} (PROVISION_TEST_STRICT=1: every test must run here)", pytrace=False)
    pytest.skip(reason)


def need_module(name: str, why: str):
    """importorskip that fails under PROVISION_TEST_STRICT=1 (see cannot_run)."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as exc:
        cannot_run(f"{why}: {exc}")


def podman_available() -> bool:
    if shutil.which("podman") is None:
        return False
    return subprocess.run(["podman", "info"], capture_output=True, check=False).returncode == 0


def leftover_labs(prefix: str) -> list[str]:
    """The labs on this machine whose name starts with PREFIX (their containers' and networks' label)."""
    from provision.lab import LABEL

    names: set[str] = set()
    for listing in (["ps", "-a"], ["network", "ls"]):
        proc = subprocess.run(["podman", *listing, "--filter", f"label={LABEL}", "--format", "json"],
                              capture_output=True, text=True, check=False, timeout=bounds.COMMAND)
        for entry in json.loads(proc.stdout or "[]") if proc.returncode == 0 else []:
            name = (entry.get("Labels") or entry.get("labels") or {}).get(LABEL, "")  # networks: "labels"
            if prefix and name.startswith(prefix):
                names.add(name)
    return sorted(names)


def lab_name(short: str) -> str:
    """A test lab's name: $PROVISION_TEST_LAB_PREFIX (default "t-") + short, so that two
    checkouts can run the lab tests on one machine at once without sharing labs."""
    return os.environ.get("PROVISION_TEST_LAB_PREFIX", "t-") + short


def nodelist_inventory(path: Path, lab: str, first_address: str, body: str, python: str) -> Path:
    """A provision.cluster.nodelist inventory file (BODY: its plugin/source lines) that reaches the
    nodes of lab LAB over podman, with the lab's addresses (node N at .N+10 of FIRST_ADDRESS's subnet)."""
    subnet = first_address.rsplit(".", 1)[0]
    path.write_text(body + f"""
address_template: "{subnet}.{{{{ number + 10 }}}}"
vars:
  ansible_connection: containers.podman.podman
  ansible_host: "{lab}-{{{{ name }}}}"
  ansible_user: root
  launchers_python: {python}
""")
    return path


def probe_lines(text: str) -> list[dict]:
    """The `PROBE key=value ...` records a test job printed (one per rank), as dicts. One line can hold
    two records: `colossalai run` relays each node's output through a process of its own, and once
    wrote node2's record before node1's newline ("...:/binPROBE host=node2 ...")."""
    return [dict(kv.split("=", 1) for kv in record.split())
            for line in text.splitlines() for record in line.split("PROBE ")[1:]]


TORCH_WHEELHOUSE = Path.home() / ".cache" / "provision" / "wheelhouse-torch"


# the cluster plan (cluster_plan's fields) of a 2-node cluster that the catalog's unit tests build contexts on
CHECK_PLAN = {"nodes": [{"name": "n1", "address": "10.0.0.1"}, {"name": "n2", "address": "10.0.0.2"}],
              "hosts": ["n1", "n2"], "address_of": {"n1": "10.0.0.1", "n2": "10.0.0.2"}, "master": "n1",
              "master_addr": "10.0.0.1", "master_port": 29500, "ssh_port": 2222, "user": "train"}


class CheckVars(dict):
    """A catalog Context's `var` without Ansible: this node's variables, else where the default is written
    (cluster_plan.DEFAULTS, the role's defaults file; untemplated), as verify's resolver answers;
    hostvar(h, name): another node's, from OTHERS."""

    def __init__(self, mine=None, others=None):
        super().__init__(mine or {})
        self.others = others or {}

    def __call__(self, name, default=None):
        from ansible_collections.provision.cluster.plugins.module_utils.common import settings

        if name in self:
            return self[name]
        try:
            value = settings.default(name)
        except KeyError:
            return default
        if isinstance(value, str) and "{{" in value:
            # templated in this node's variables, as verify's resolver does (an undefined name: the default)
            import jinja2
            try:
                return jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(value).render(**self)
            except jinja2.UndefinedError:
                return default
        return value

    def data(self, name, default=None):
        return self.get(name, default)

    def hostvar(self, host, name, default=None):
        return (self.others.get(host) or {}).get(name, default)


def provision_wheelhouse(out: Path) -> Path:
    """provision built from this checkout and its dependencies, as wheels in `out` (the controller's Python is
    the lab nodes' 3.11): what a node without the internet installs provision from."""
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(REPO)], check=True,
                   capture_output=True, timeout=bounds.DOWNLOAD)
    own = next(out.glob("provision-*.whl"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "-w", str(out), str(own)],
                          capture_output=True, text=True, timeout=bounds.DOWNLOAD)
    if proc.returncode != 0:
        cannot_run(f"cannot make provision's wheelhouse: {proc.stderr[-300:]}")
    return out


def install_wheels(lab: str, node: int, src: Path, venv: str, packages: str, compile_: str = "") -> None:
    """pip install PACKAGES into VENV on the node from the wheels in SRC (copied in, removed after), without
    compiling every .py (torch's thousands of files cost minutes of CPU on the shared machine); COMPILE_: the
    packages to compile (what a check imports on every run). The venv is made when missing."""
    tmp = f"/tmp/wh-{src.name}"
    subprocess.run(["podman", "cp", str(src), f"{lab}-node{node}:{tmp}"], check=True, timeout=bounds.INSTALL)
    site = f"{venv}/lib/python3*/site-packages"
    node_exec(lab, node, f"test -x {venv}/bin/python || python3 -m venv {venv}; "
                         f"{venv}/bin/pip install -q --no-compile --no-index --find-links {tmp} {packages} && rm -rf {tmp}"
                         + (f" && {venv}/bin/python -m compileall -q " + " ".join(f"{site}/{c}" for c in compile_.split())
                            + " >/dev/null" if compile_ else ""), timeout=bounds.INSTALL)


def torch_wheelhouse() -> Path:
    """torch 2.13.0 and numpy for lab nodes, downloaded once on the controller (cached between runs);
    torch does not require numpy, but the nodes install both (torch warns without it). One download at a
    time on this machine (the lab tests' workers, two checkouts)."""
    from provision.lab._base import machine_lock

    with machine_lock("wheelhouse-torch", timeout=bounds.DOWNLOAD, what="the tests' torch wheelhouse"):
        if not list(TORCH_WHEELHOUSE.glob("torch-2.13.0*.whl")) or not list(TORCH_WHEELHOUSE.glob("numpy-*.whl")):
            TORCH_WHEELHOUSE.mkdir(parents=True, exist_ok=True)
            proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:", "-d",
                                   str(TORCH_WHEELHOUSE), "torch==2.13.0", "numpy"], capture_output=True, text=True,
                                  timeout=bounds.DOWNLOAD)
            if proc.returncode != 0:
                cannot_run(f"cannot build a torch 2.13.0 wheelhouse on the controller: {proc.stderr[-300:]}")
    return TORCH_WHEELHOUSE


def readme_lab_block(lab: str, *, until: str | None = None, only: str | None = None,
                     timeout: float = bounds.SITE_FRESH) -> list[dict]:
    """The README's `<!-- runnable: lab -->` blocks, one command at a time, as a user runs them from the
    checkout, with PROVISION_LAB_NAME=LAB (the commands and the lab inventory read it); stops before the
    first command that starts with UNTIL; ONLY: runs just the commands that start with it.
    -> [{command, line, result: PlaybookResult}]; the first command that fails ends it."""
    from unit.test_docs import README, blocks

    steps = []
    for block in [b for b in blocks(README) if b["marker"] == "lab"]:
        for offset, command in enumerate(block["code"].splitlines()):
            command = command.split("#", 1)[0].strip()
            if not command:
                continue
            if until and command.startswith(until):
                return steps
            if only and not command.startswith(only):
                continue
            proc = subprocess.run(["bash", "-euo", "pipefail", "-c", command], cwd=REPO, env=ansible_env(lab),
                                  capture_output=True, text=True, timeout=timeout, check=False)
            steps.append({"command": command, "line": block["line"] + 1 + offset, "result": PlaybookResult(proc)})
            if proc.returncode != 0:
                return steps
    return steps
