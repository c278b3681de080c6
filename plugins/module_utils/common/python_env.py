# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Python environment: pins, wheelhouse manifests, venv/conda commands, version probes and the
cross-node comparison (pure Python; the modules and `provision verify` call these)."""
from __future__ import annotations

import ast
import glob
import hashlib
import json
import os
import re
import stat
import subprocess
from collections import Counter

from ansible_collections.provision.cluster.plugins.module_utils.common.files import FileWriter
from ansible_collections.provision.cluster.plugins.module_utils.verify.stage_check import Stop

MANIFEST = ".provision-wheelhouse.json"

# ---------------------------------------------------------------- pins


def normalize(name):
    """PEP 503 name normalisation."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pin(spec):
    """'torch==2.13.0' -> ('torch', '2.13.0'). Only exact pins: every node must get the same thing."""
    m = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*==\s*([^\s;,]+)\s*", spec or "")
    if not m:
        raise ValueError(f"{spec!r} is not an exact pin (name==version): pin every package so all nodes match")
    return normalize(m.group(1)), m.group(2)


def pin_satisfied(installed, wanted):
    """'2.13.0+cpu' satisfies '2.13.0' (PEP 440: a pin without a local label matches any local label)."""
    if installed is None:
        return False
    if "+" in wanted:
        return installed == wanted
    return installed.split("+", 1)[0] == wanted


def unmet_pins(pins, installed):
    """The pins (original spellings) that the installed distributions {normalized: version} do not meet."""
    out = []
    for spec in pins:
        name, version = parse_pin(spec)
        if not pin_satisfied(installed.get(name), version):
            out.append(spec)
    return out


def requirement_name(spec):
    """'numpy==2.3.5', 'deepspeed[all]>=0.15' -> 'numpy', 'deepspeed': the distribution a requirement names."""
    return re.sub(r"[\[=<>!~ ;].*$", "", str(spec).strip())


def package_names(*lists):
    """The distributions the versions record reports, from requirement specs or names (python_env_extra_packages,
    verify_packages, ...): each name once (PEP 503), in the order first given."""
    out, seen = [], set()
    for specs in lists:
        for spec in specs or []:
            name = requirement_name(spec)
            if name and normalize(name) not in seen:
                seen.add(normalize(name))
                out.append(name)
    return out


def requirement_key(pins):
    """A stable key for a set of pins (the wheelhouse manifest's index)."""
    return " ".join(sorted(p.strip() for p in pins))


# ---------------------------------------------------------------- wheelhouse (controller)


_LEGACY_MANYLINUX = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}


def expand_platform(platform):
    """'manylinux_2_28_x86_64' -> itself and every older manylinux tag a glibc 2.28 node also runs
    (2_27 ... 2_17, manylinux2014, 2010, 1). pip < 24 takes --platform literally, and wheels such
    as numpy 2.2 are tagged manylinux_2_17 only."""
    m = re.fullmatch(r"manylinux_(\d+)_(\d+)_(\w+)", platform)
    if not m:
        return [platform]
    major, minor, arch = int(m.group(1)), int(m.group(2)), m.group(3)
    out = []
    for mn in range(minor, 4, -1):
        out.append(f"manylinux_{major}_{mn}_{arch}")
        if (major, mn) in _LEGACY_MANYLINUX:
            out.append(f"{_LEGACY_MANYLINUX[(major, mn)]}_{arch}")
    return out


def pip_download_argv(python, dest, pins, *, platform, python_version, implementation, abi,
                      find_links=(), index_url=None, extra_args=()):
    argv = [python, "-m", "pip", "download", "--disable-pip-version-check", "--progress-bar", "off",
            "--dest", dest, "--only-binary=:all:"]
    for tag in expand_platform(platform):
        argv += ["--platform", tag]
    argv += ["--python-version", python_version, "--implementation", implementation, "--abi", abi]
    for link in find_links:
        argv += ["--find-links", link]
    if index_url:
        argv += ["--index-url", index_url]
    return argv + list(extra_args) + list(pins)


_SAVED = re.compile(r"^\s*(?:Saved|File was already downloaded)\s+(\S+\.whl)\s*$", re.M)


def downloaded_files(pip_output):
    """Wheel file names pip download reported (new or already present)."""
    return sorted({os.path.basename(p) for p in _SAVED.findall(pip_output or "")})


def wheel_project(filename):
    """'torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl' -> ('torch', '2.13.0+cpu') (PEP 427's
    name-version-[build-]python-abi-platform.whl); (None, None) for anything else."""
    name = os.path.basename(filename or "")
    parts = name[:-4].split("-") if name.endswith(".whl") else []
    return (normalize(parts[0]), parts[1]) if len(parts) >= 5 else (None, None)


def pins_without_wheel(pins, files):
    """The pins (as spelled) that no wheel among `files` meets: pip's report, or a manifest, that lost one."""
    have = [wheel_project(f) for f in files]
    out = []
    for spec in pins:
        name, version = parse_pin(spec)
        if not any(n == name and pin_satisfied(v, version) for n, v in have):
            out.append(spec)
    return out


def platform_key(platform, python_version, implementation, abi):
    return f"{platform} {implementation}{python_version} {abi}"


def manifest_sets_missing(manifest, sets, pkey, present):
    """Requirement sets (lists of pins) the manifest does not cover with files still present, a wheel of
    every pin among them (a set recorded without its own pins' wheels is downloaded again)."""
    if manifest.get("platform") != pkey:
        return list(sets)
    missing = []
    for pins in sets:
        files = manifest.get("sets", {}).get(requirement_key(pins))
        if not files or any(f not in present for f in files) or pins_without_wheel(pins, files):
            missing.append(pins)
    return missing


def wheelhouse_state(path, requirements, platform, python_version, implementation="cp", abi=None):
    """What the wheelhouse at path holds for these requirement sets: {sets (unique, pins checked),
    pkey, abi, manifest, present, todo (sets to download)}. Raises ValueError on a bad pin."""
    abi = abi or "cp" + python_version.replace(".", "")
    sets = []
    for pins in requirements:
        pins = [str(x) for x in pins]
        for spec in pins:
            parse_pin(spec)
        if requirement_key(pins) not in [requirement_key(s) for s in sets]:
            sets.append(pins)
    pkey = platform_key(platform, python_version, implementation, abi)
    manifest = load_json(os.path.join(path, MANIFEST))
    present = set(os.listdir(path)) if os.path.isdir(path) else set()
    return {"sets": sets, "pkey": pkey, "abi": abi, "manifest": manifest, "present": present,
            "todo": manifest_sets_missing(manifest, sets, pkey, present)}


def wheelhouse_records(path, state, set_files):
    """The manifest after this run: set -> files, and the records of every file still wanted or present."""
    manifest = state["manifest"]
    new = {"platform": state["pkey"],
           "sets": dict(manifest.get("sets", {})) if manifest.get("platform") == state["pkey"] else {},
           "files": manifest.get("files", {})}
    new["sets"].update(set_files)
    needed = sorted({f for s in state["sets"] for f in new["sets"].get(requirement_key(s), [])})
    new["files"] = file_records(path, needed, new["files"]) if needed else {}
    # keep records of other sets' files (other clusters may share the wheelhouse)
    for name, rec in manifest.get("files", {}).items():
        if name not in new["files"] and name in state["present"]:
            new["files"][name] = rec
    return new


def wheelhouse_by_set(state, new):
    """requirement key -> [{name, size, sha256}] for the node side (wheelhouse_sync)."""
    return {requirement_key(s): [dict(name=f, size=new["files"][f]["size"], sha256=new["files"][f]["sha256"])
                                 for f in new["sets"][requirement_key(s)]] for s in state["sets"]}


def sha256_file(path, bufsize=1 << 20):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(bufsize), b""):
            h.update(chunk)
    return h.hexdigest()


def file_records(directory, names, cache):
    """{name: {size, mtime, sha256}} for names in directory, reusing cache entries whose size and
    mtime are unchanged (a wheel is hashed once, not on every run)."""
    out = {}
    for name in names:
        st = os.stat(os.path.join(directory, name))
        old = cache.get(name) or {}
        if old.get("size") == st.st_size and old.get("mtime") == int(st.st_mtime) and old.get("sha256"):
            out[name] = old
        else:
            out[name] = {"size": st.st_size, "mtime": int(st.st_mtime),
                         "sha256": sha256_file(os.path.join(directory, name))}
    return out


def wheelhouse_diff(expected, present):
    """expected: [{name, size, sha256}]; present: {name: {size, sha256}} on the node.
    -> names to copy (missing, or different size/checksum)."""
    todo = []
    for rec in expected:
        have = present.get(rec["name"])
        if not have or have.get("size") != rec["size"] or have.get("sha256") != rec["sha256"]:
            todo.append(rec["name"])
    return todo


def last_line(*texts):
    """The last non-empty line of the first text that has one (a failed command's one-line cause)."""
    for text in texts:
        lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
        if lines:
            return lines[-1]
    return "no output"


def load_json(path):
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


# ---------------------------------------------------------------- venv / pip (node)

# One subprocess in the target interpreter: the installed distributions (cheap, no imports).
DISTS_PROBE = r"""
import json, sys, platform
from importlib import metadata
d = {}
for dist in metadata.distributions():
    name = dist.metadata["Name"]
    if name:
        d[name] = dist.version
print(json.dumps({"python": platform.python_version(), "prefix": sys.prefix, "dists": d}))
"""

# The versions probe: python, torch, its CUDA and NCCL, the distributed backends, the extras.
VERSIONS_PROBE = r"""
import json, sys, platform
from importlib import metadata
names = json.loads(sys.argv[1])
out = {"python": platform.python_version(), "executable": sys.executable, "packages": {}}
for n in names:
    try:
        out["packages"][n] = metadata.version(n)
    except metadata.PackageNotFoundError:
        out["packages"][n] = None
try:
    import torch
    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    out["cuda_available"] = bool(torch.cuda.is_available())
    out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
    try:
        v = torch.cuda.nccl.version()
        out["nccl"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else v
    except Exception:
        out["nccl"] = None
    import torch.distributed as dist
    ok = dist.is_available()
    out["backends"] = {"gloo": ok and dist.is_gloo_available(), "nccl": ok and dist.is_nccl_available(),
                       "mpi": ok and dist.is_mpi_available()}
except ImportError as exc:
    out["torch"] = None
    out["torch_error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
print(json.dumps(out))
"""


def probe_cache_key(python, probe=VERSIONS_PROBE):
    """What the versions probe's answer depends on, cheaply: the interpreter, the installed
    distributions (names and mtimes of the *.dist-info/*.egg-info entries of the environment's
    site-packages, and those directories' own mtimes), torch's __init__/version and every file of its
    library directory, the NVIDIA driver,
    and the probe itself. Any install, removal, replaced torch library or driver change gives a new key.
    (The extras' versions are not part of it: cached_versions reads them from the dist-info names.)
    """
    real = os.path.realpath(python)
    parts = [real, _stat_sig(real), hashlib.sha256(probe.encode()).hexdigest()]
    prefix = os.path.dirname(os.path.dirname(python))
    for site in sorted(glob.glob(os.path.join(prefix, "lib", "python*", "site-packages"))):
        torch_dir = os.path.join(site, "torch")
        parts.append([site, _stat_sig(site), _stat_sig(os.path.join(torch_dir, "__init__.py")),
                      _stat_sig(os.path.join(torch_dir, "version.py")), _dir_sig(os.path.join(torch_dir, "lib"))])
        try:
            names = sorted(n for n in os.listdir(site) if n.endswith((".dist-info", ".egg-info", ".pth")))
        except OSError:
            names = []
        parts.append([[n, _stat_sig(os.path.join(site, n))] for n in names])
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8", errors="replace") as fh:
            parts.append(fh.read())
    except OSError:
        parts.append(None)
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _dir_sig(path):
    """The directory and every file in it (a library replaced in place changes only its own mtime)."""
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return None
    return [_stat_sig(path)] + [[n, _stat_sig(os.path.join(path, n))] for n in names]


def _stat_sig(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_mtime_ns, st.st_size, st.st_ino]


def cached_versions(cache_path, key, python=None, packages=()):
    """The versions stored at cache_path under this key, or None; the extras asked for (packages)
    are read from the environment's dist-info directory names (no interpreter needed)."""
    data = load_json(cache_path)
    if data.get("key") != key or not isinstance(data.get("versions"), dict):
        return None
    versions = dict(data["versions"])
    if python is not None:
        versions["packages"] = installed_versions(python, packages)
    return versions


def cached_check(versions):
    """The verify contract for an answer read from the versions cache."""
    return {"check": "python_env", "status": "pass", "fix": "",
            "detail": f"python {versions.get('python')} torch {versions.get('torch')} "
                      "(environment unchanged since the last probe)"}


def installed_versions(python, names):
    """{name: version or None} from the *.dist-info names of the environment's site-packages."""
    found = {}
    for dist, version in _dist_infos(os.path.dirname(os.path.dirname(python))):
        found.setdefault(dist, version)
    return {name: found.get(normalize(name)) for name in names}


def parse_deepspeed_build(text):
    """DeepSpeed's deepspeed/git_version_info_installed.py (written by its setup.py) -> {"version",
    "torch", "cuda", "ops"}: the torch and CUDA (major.minor) its ops were compiled with and the ops
    compiled at install time (none when they are built just in time). Read, never imported."""
    values = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    torch_info = values.get("torch_info") if isinstance(values.get("torch_info"), dict) else {}
    ops = values.get("installed_ops") if isinstance(values.get("installed_ops"), dict) else {}
    return {"version": values.get("version"), "torch": torch_info.get("version"),
            "cuda": torch_info.get("cuda_version"), "ops": sorted(k for k, v in ops.items() if v)}


def deepspeed_build(python):
    """parse_deepspeed_build of the DeepSpeed installed in python's environment, or None."""
    prefix = os.path.dirname(os.path.dirname(python))
    for path in sorted(glob.glob(os.path.join(prefix, "lib", "python*", "site-packages", "deepspeed",
                                              "git_version_info_installed.py"))):
        try:
            with open(path, encoding="utf-8") as fh:
                return dict(parse_deepspeed_build(fh.read()), path=path)
        except (OSError, SyntaxError, ValueError):
            return None
    return None


def _major_minor(version):
    return ".".join(str(version or "").split("+", maxsplit=1)[0].split(".")[:2])


def deepspeed_check(build, torch_version, torch_cuda, python):
    """DeepSpeed ops compiled for another torch (or CUDA) than the environment has: they fail to load
    ("PyTorch version mismatch! DeepSpeed ops were compiled and installed with a different version")
    The seed's case: torch upgraded, `pip install deepspeed` took the wheel pip had cached for the old one.
    Returns a verify check, or None when DeepSpeed is absent or builds its ops just in time."""
    if not build or not build.get("ops") or not torch_version:
        return None
    fix = (f"{python} -m pip install --no-cache-dir --force-reinstall --no-deps deepspeed "
           "(pip's cache holds the wheel built for the old torch), or pin the torch it was built for")
    ops = ", ".join(build["ops"][:4]) + (" ..." if len(build["ops"]) > 4 else "")
    have = _major_minor(torch_version)
    if build.get("torch") and build["torch"] != have:
        return {"check": "deepspeed build", "status": "fail", "fix": fix,
                "detail": f"deepspeed {build.get('version')} ops ({ops}) were compiled for torch {build['torch']}, "
                          f"the environment has torch {torch_version}: they fail with 'PyTorch version mismatch'"}
    cuda = _major_minor(torch_cuda) if torch_cuda else ""
    if cuda and build.get("cuda") not in (None, "", "0.0") and build["cuda"] != cuda:
        return {"check": "deepspeed build", "status": "fail", "fix": fix,
                "detail": f"deepspeed {build.get('version')} ops ({ops}) were compiled for CUDA {build['cuda']}, "
                          f"torch uses CUDA {torch_cuda}: they fail with 'CUDA version mismatch'"}
    return {"check": "deepspeed build", "status": "pass", "fix": "",
            "detail": f"deepspeed {build.get('version')} ops compiled for torch {build.get('torch')}"}


def parse_probe(stdout):
    """The last JSON line a probe printed (torch may print warnings before it)."""
    for line in reversed((stdout or "").strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError("no JSON in probe output")


def normalize_versions(raw):
    """Probe output -> the python_env_versions fact (stable keys, NCCL as a dotted string)."""
    nccl = raw.get("nccl")
    if isinstance(nccl, int):
        nccl = (f"{nccl // 10000}.{nccl % 10000 // 100}.{nccl % 100}" if nccl >= 10000
                else f"{nccl // 1000}.{nccl % 1000 // 100}.{nccl % 100}")
    return {
        "python": raw.get("python"),
        "torch": raw.get("torch"),
        "torch_cuda": raw.get("torch_cuda"),
        "nccl": nccl,
        "cuda_available": raw.get("cuda_available", False),
        "device_count": raw.get("device_count", 0),
        "backends": raw.get("backends") or {"gloo": False, "nccl": False, "mpi": False},
        "packages": raw.get("packages") or {},
    }


def _writable_by_others(st):
    """Group- or world-writable, a sticky directory (/tmp) excepted: another user can change it."""
    if stat.S_ISLNK(st.st_mode):
        return False
    if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX:
        return False
    return bool(st.st_mode & 0o022)


# uv's flock file at an environment's root (`uv pip install` leaves it there, made 0666 on purpose since
# uv 0.5.29 so another user's uv can take the lock: astral-sh/uv#11328, #16845): python never reads it,
# nor anything root runs; its content is nobody's word. Who could replace it could write the directory,
# and that is judged. Tolerated where root owns it (trusted_uids) and it is one plain file (a hard link
# is judged like any other entry).
UV_LOCK = ".lock"


def _inert(path, where, st, trusted_uids):
    """uv's lock file at path's root, as UV_LOCK says: a group/world-writable entry that does not count."""
    return (where == os.path.join(path, UV_LOCK) and stat.S_ISREG(st.st_mode) and st.st_nlink == 1
            and st.st_uid in trusted_uids)


def is_environment(prefix):
    """A venv (pyvenv.cfg) or a conda environment (conda-meta): a tree of its own, walked whole by
    untrusted(); a system prefix such as /usr is the distribution's and is not walked."""
    return os.path.exists(os.path.join(prefix, "pyvenv.cfg")) or os.path.isdir(os.path.join(prefix, "conda-meta"))


def untrusted(path, trusted_uids=(0,), limit=3, walk=True):
    """Why root must not run code from the tree at path (issue 31): up to LIMIT lines naming an entry
    owned by a uid outside TRUSTED_UIDS or writable by group or others (a link's own mode does not
    count), in the tree itself or in a directory above it (which could swap the whole tree). [] when
    none: only root (and the trusted uids) could have written what root is about to run. Nothing is
    followed: every entry is lstat'ed, the walk does not enter linked directories. walk=False: path and
    the directories above it only. Below path the walk is one find(1) where the node has GNU find (C: a
    torch environment's ~25,000 entries in about half the time of Python's), else Python's own. uv's
    lock file at path's root does not count (UV_LOCK)."""
    found = []

    def judge(where, st):
        if st.st_uid not in trusted_uids or _writable_by_others(st):
            found.append(_reason(where, st.st_uid, stat.S_IMODE(st.st_mode), trusted_uids))

    above = os.path.dirname(os.path.abspath(path))
    while True:
        try:
            judge(above, os.stat(above))
        except OSError:
            pass
        if above == os.path.dirname(above) or len(found) >= limit:
            break
        above = os.path.dirname(above)
    try:
        judge(path, os.lstat(path))
    except FileNotFoundError:
        return found
    if os.path.islink(path) or not walk or len(found) >= limit:
        return found[:limit]
    path = os.path.abspath(path)
    below = _find_untrusted(path, trusted_uids, limit - len(found))
    if below is not None:
        return (found + below)[:limit]
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            if len(found) >= limit:
                return found
            full = os.path.join(root, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if not _inert(path, full, st, trusted_uids):
                judge(full, st)
    return found[:limit]


FIND = ("/usr/bin/find", "/bin/find")


def _find_untrusted(path, trusted_uids, limit):
    """untrusted()'s lines for the entries below path, from one `find -P` (nothing followed; the same
    rule: an owner outside trusted_uids, else group/other write on anything but a link or a sticky
    directory, uv's lock file excepted), reading no more than LIMIT of them (and the one lock file it may
    print besides); None where there is no GNU find (then Python walks)."""
    find = next((f for f in FIND if os.access(f, os.X_OK)), None)
    if find is None:
        return None
    owner = [arg for uid in trusted_uids for arg in ("!", "-uid", str(int(uid)))]
    argv = [find, "-P", path, "-mindepth", "1", "("] + owner + [
        "-o", "(", "-perm", "/022", "!", "-type", "l", "!", "(", "-type", "d", "-perm", "-1000", ")", ")",
        ")", "-printf", "%U %m %p\\0"]
    try:
        # stderr not read: errors many enough to fill a pipe could not stall the walk
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                env=dict(os.environ, LC_ALL="C"))
    except OSError:
        return None
    data = b""
    try:
        while data.count(b"\0") <= limit:
            chunk = proc.stdout.read1(65536)
            if not chunk:
                break
            data += chunk
    finally:
        if data.count(b"\0") > limit:
            proc.kill()
        proc.communicate()
    if proc.returncode != 0 and not data:
        # not GNU find (busybox's has no -printf and stops at once), or entries it could not read:
        # Python walks, and names what it can read
        return None
    found = []
    for entry in data.split(b"\0")[:limit + 1]:
        if not entry:
            continue
        uid, mode, where = entry.decode("utf-8", "surrogateescape").split(" ", 2)
        if where == os.path.join(path, UV_LOCK):   # lstat'ed only for that one name
            try:
                if _inert(path, where, os.lstat(where), trusted_uids):
                    continue
            except OSError:
                pass
        found.append(_reason(where, int(uid), int(mode, 8), trusted_uids))
    return found[:limit]


def _reason(where, uid, mode, trusted_uids):
    """untrusted()'s line for an entry either walk found: its owner when that is not trusted, else its mode."""
    if uid not in trusted_uids:
        return "%s is owned by uid %d" % (where, uid)
    return "%s is mode %04o (writable by group or others)" % (where, mode)


def dist_names(prefix):
    """{normalized name: version} of the *.dist-info directories under prefix's site-packages (read
    from the names: nothing of the environment is run)."""
    return dict(_dist_infos(prefix))


def _dist_infos(prefix):
    """(normalized name, version) of each *.dist-info directory under prefix's site-packages, in order."""
    for site in sorted(glob.glob(os.path.join(prefix, "lib", "python*", "site-packages"))):
        try:
            entries = os.listdir(site)
        except OSError:
            continue
        for entry in entries:
            if entry.endswith(".dist-info") and "-" in entry:
                name, version = entry[: -len(".dist-info")].rsplit("-", 1)
                yield normalize(name), version


def chown_tree(path, uid, gid):
    """Own a whole environment by uid:gid (root: nothing in it may be another user's); symlinks themselves."""
    os.lchown(path, uid, gid)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), uid, gid)


def venv_create_argv(python, path, system_site_packages=False):
    argv = [python, "-m", "venv"]
    if system_site_packages:
        argv.append("--system-site-packages")
    return argv + [path]


def pip_install_argv(python, pins, find_links):
    """Offline install from the node's wheelhouse: never an index."""
    return [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--no-index",
            "--find-links", find_links, "--progress-bar", "off"] + list(pins)


# ---------------------------------------------------------------- conda


def conda_install_argv(installer, prefix):
    """Batch mode (-b: no prompts, no licence pager, no `conda init`), into prefix."""
    return ["bash", installer, "-b", "-p", prefix]


def conda_create_argv(prefix, env_prefix, python_version, *, channels=(), offline=False):
    argv = [f"{prefix}/bin/conda", "create", "--yes", "--quiet", "--prefix", env_prefix,
            f"python={python_version}", "pip"]
    for ch in channels:
        argv += ["--channel", ch]
    if channels:
        argv.append("--override-channels")
    if offline:
        argv.append("--offline")
    return argv


def conda_env_facts(prefix, env_name):
    env_prefix = f"{prefix}/envs/{env_name}"
    return env_prefix, {
        "env": {"CONDA_PREFIX": env_prefix, "CONDA_DEFAULT_ENV": env_name, "CONDA_EXE": f"{prefix}/bin/conda"},
        "path": [f"{env_prefix}/bin", f"{prefix}/condabin"],
        "ld_library_path": [],
        "source": [],
    }


def python_matches(found, wanted):
    """'3.11.9' matches '3.11' and '3.11.9'."""
    if not found:
        return False
    f, w = found.split("."), str(wanted).split(".")
    return f[:len(w)] == w


def env_python(backend, path, conda_prefix, env_name):
    """The training environment's interpreter: the venv's, or the conda env's."""
    if backend == "conda":
        return "%s/envs/%s/bin/python" % (conda_prefix, env_name)
    return "%s/bin/python" % path


def venv_env(path):
    return {"env": {"VIRTUAL_ENV": path}, "path": [f"{path}/bin"], "ld_library_path": [], "source": []}


# ---------------------------------------------------------------- cross-node comparison

def _cells(v):
    v = v or {}
    b = v.get("backends") or {}
    cells = {"python": v.get("python"), "torch": v.get("torch"), "torch_cuda": v.get("torch_cuda"),
             "nccl": v.get("nccl"), "gloo": b.get("gloo"), "nccl_backend": b.get("nccl"), "mpi": b.get("mpi")}
    for name, ver in sorted((v.get("packages") or {}).items()):
        cells[name] = ver
    return cells


def _fmt(value):
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def compare_versions(per_host, order=None):
    """Compare the python_env_versions of every node.

    per_host: {host: versions fact}; order: host order (inventory order) for the table.
    Returns {ok, differing_columns, differing_hosts, table, reference}: for each column where
    nodes disagree, the reference value is the most common one (ties: the first node's) and a
    node is 'differing' when its value is not the reference. The table lists every node on the
    differing columns, the odd cells marked with '*'.
    """
    hosts = [h for h in (order or sorted(per_host)) if h in per_host]
    missing = [h for h in (order or []) if h not in per_host]
    cells = {h: _cells(per_host[h]) for h in hosts}
    columns = []
    for h in hosts:
        for c in cells[h]:
            if c not in columns:
                columns.append(c)
    reference, differing_cols, odd = {}, [], {}
    for c in columns:
        # a package is compared among the records that read it: one that was not asked for it (another
        # list of packages) says nothing about it (a package asked for and not installed reads None: "-")
        read = [h for h in hosts if c in cells[h]]
        values = [_fmt(cells[h][c]) for h in read]
        counts = Counter(values)
        top = max(counts.values()) if counts else 0
        ref = next(v for v in values if counts[v] == top) if values else None
        reference[c] = ref
        if len(counts) > 1:
            differing_cols.append(c)
            for h, v in zip(read, values):
                if v != ref:
                    odd.setdefault(h, []).append(c)
    differing_hosts = [h for h in hosts if h in odd] + missing
    table = ""
    if differing_cols or missing:
        header = ["node"] + differing_cols + (["versions"] if missing else [])
        rows = [header]
        for h in hosts:
            rows.append([h] + [(_fmt(cells[h][c]) if c in cells[h] else "?") + ("*" if c in odd.get(h, []) else "")
                               for c in differing_cols]
                        + (["recorded"] if missing else []))
        for h in missing:
            rows.append([h] + ["-"] * len(differing_cols) + ["missing*"])
        widths = [max(len(r[i]) if i < len(r) else 0 for r in rows) for i in range(len(header))]
        table = "\n".join("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in rows)
    return {"ok": not differing_cols and not missing, "differing_columns": differing_cols,
            "differing_hosts": differing_hosts, "odd_cells": odd, "reference": reference, "table": table}


def compare_outcome(versions, order=None, fail=True):
    """versions_compare's whole answer: (result fields, failure message or None)."""
    result = compare_versions({h: v for h, v in (versions or {}).items() if v}, order or None)
    check = versions_check(result)
    out = dict(changed=False, ok=result["ok"], differing_hosts=result["differing_hosts"],
               differing_columns=result["differing_columns"], table=result["table"], check=check)
    if not result["ok"] and fail:
        return out, f"versions differ on {', '.join(result['differing_hosts'])}: {check['fix']}\n" + result["table"]
    return out, None


def compare_checks(compare, compared):
    """One "versions equal" check per compared node (name -> check) from compare_outcome's answer."""
    check = compare.get("check") or {}
    odd = set(compare.get("differing_hosts") or [])
    out = {}
    for h in compared:
        if check.get("status") == "fail" and h in odd:
            out[h] = {"check": "versions equal", "status": "fail", "detail": check.get("detail", ""),
                      "fix": check.get("fix", ""), "node": h}
        else:
            out[h] = {"check": "versions equal", "status": "pass", "detail": "same as the other nodes", "fix": "",
                      "node": h}
    return out


def versions_check(result):
    """The verify contract for the comparison."""
    if result["ok"]:
        return {"check": "versions_equal", "status": "pass", "detail": "python/torch/CUDA/NCCL/extras equal on all nodes",
                "fix": ""}
    odd = "; ".join(f"{h}: {', '.join(cols)}" for h, cols in result["odd_cells"].items()) or \
        ", ".join(result["differing_hosts"])
    return {"check": "versions_equal", "status": "fail",
            "detail": f"nodes differ ({odd})",
            "fix": "pin the same python_env_torch_spec/python_env_extra_packages for every node and re-run the python_env stage"}


# ---------------------------------------------------------------- the check `versions` (python_versions, python_venv)

# the check's arguments (the module python_versions's options)
VERSIONS_ARGS = {
    "python": {"type": "path", "required": True},
    "packages": {"type": "list", "elements": "str", "default": []},
    "require_torch": {"type": "bool", "default": True},
    "timeout": {"type": "int", "default": 120},
    "cache": {"type": "path"},
}
VERSIONS_FIX = "run the python_env stage (ansible-playbook playbooks/python_env.yml)"


def run_versions(p, module, trusted=None):
    """The check with VERSIONS_ARGS's parameters on this node -> {checks, cached, ansible_facts:
    {python_env_versions}}; Stop where torch must import (require_torch) and does not, or the probe fails.
    trusted: an environment whose trust the caller established in this process (python_venv walked it, or
    made it, as root just before): not walked again."""
    packages = package_names(p["packages"])
    python = p["python"]
    if not os.access(python, os.X_OK):
        check = {"check": "python_env", "status": "fail", "detail": f"{python} missing", "fix": VERSIONS_FIX}
        if p["require_torch"]:
            raise Stop(f"{python} does not exist: {VERSIONS_FIX}", checks=[check])
        return {"checks": [check], "ansible_facts": {"python_env_versions": normalize_versions({})}}
    prefix = os.path.dirname(os.path.dirname(python))
    reasons = untrusted(prefix, walk=is_environment(prefix)) if os.geteuid() == 0 and prefix != trusted else []
    if reasons:
        # root runs nothing another user could have written (issue 31): the probe would import its code,
        # and its cache file would be another user's word
        detail = f"root does not run {python}: {'; '.join(reasons)}"
        check = {"check": "python_env", "status": "fail", "detail": detail,
                 "fix": "run the python_env stage: it makes the environment again as root's"}
        if p["require_torch"]:
            raise Stop(f"{detail}; fix: {check['fix']}", checks=[check])
        return {"checks": [check], "ansible_facts": {"python_env_versions": normalize_versions({})}}
    key = probe_cache_key(python) if p["cache"] else None
    cached = cached_versions(p["cache"], key, python, packages) if key else None
    if cached is not None:
        return {"cached": True, "checks": _versions_checks(python, cached_check(cached), cached),
                "ansible_facts": {"python_env_versions": cached}}
    # -I: no PYTHON* variables, no user site, not the working directory on sys.path
    argv = [python, "-I", "-c", VERSIONS_PROBE, json.dumps(packages)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=p["timeout"], check=False)
    except subprocess.TimeoutExpired:
        raise Stop(f"{python}: version probe took more than {p['timeout']}s (import torch hangs?)") from None
    try:
        raw = parse_probe(proc.stdout)
    except ValueError:
        raise Stop(f"{python}: version probe failed: {last_line(proc.stderr)}", stderr=proc.stderr) from None
    versions = normalize_versions(raw)
    if versions["torch"] is None:
        check = {"check": "python_env", "status": "fail",
                 "detail": f"torch does not import: {raw.get('torch_error')}", "fix": VERSIONS_FIX}
        if p["require_torch"]:
            raise Stop(f"torch does not import in {python}: {raw.get('torch_error')}; fix: {VERSIONS_FIX}",
                       checks=[check], ansible_facts={"python_env_versions": versions})
    else:
        check = {"check": "python_env", "status": "pass",
                 "detail": f"python {versions['python']} torch {versions['torch']}", "fix": ""}
        if key and not module.check_mode:
            try:
                FileWriter(module).write(p["cache"], json.dumps({"key": key, "versions": versions}))
            except OSError as exc:   # a cache that cannot be written only costs the next run a probe
                module.warn(f"could not write the versions cache {p['cache']}: {exc}")
    return {"cached": False, "checks": _versions_checks(python, check, versions),
            "ansible_facts": {"python_env_versions": versions}}


def _versions_checks(python, check, versions):
    """check, and DeepSpeed's build against this torch when DeepSpeed has compiled ops here."""
    ds = deepspeed_check(deepspeed_build(python), versions.get("torch"), versions.get("torch_cuda"), python)
    return [check] + ([ds] if ds else [])
