"""First contact: take password-only machines to key-based, host-key-checked Ansible control.

`provision bootstrap` is the one place where paramiko is used: Ansible's ssh connection needs
`sshpass` for a password and ansible-core 2.21 dropped its paramiko connection. For each host of
an Ansible inventory (read with `ansible-inventory --list`, never parsed here) it:

1. scans the host key and judges it against a per-inventory known_hosts (known / unknown /
   changed / revoked); unknown keys are confirmed by a person (or `--accept-host-keys`) and
   recorded, changed keys are refused with both fingerprints and the `ssh-keygen -R` command;
2. logs in (the controller's key first, then the password) and appends the controller's public
   key to the remote user's authorized_keys once (~/.ssh 0700, file 0600), through `sh -s` fed
   on stdin, with a guard that the file did not change since it was read;
3. reports python3 (Ansible's interpreter) per host.

The decisions (fingerprints, known_hosts matching, authorized_keys merge and plan, password file
check, inventory to targets) are pure functions at the top of this module, unit-tested without
a network; the paramiko part below them only feeds them and carries out their plans.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import logging
import os
import re
import secrets
import shlex
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

DEFAULT_TIMEOUT = 10.0
DEFAULT_FORKS = 16
DEFAULT_KEY = Path("~/.ssh/id_ed25519")
# the identities OpenSSH (and so Ansible) offers by default, in its order
DEFAULT_IDENTITIES = ("~/.ssh/id_rsa", "~/.ssh/id_ecdsa", "~/.ssh/id_ed25519")
# Inside the inventory directory, but hidden: Ansible parses every other file of an inventory
# directory as an inventory source (and warns, or fails with unparsed_is_failed, on known_hosts).
KNOWN_HOSTS_REL = ".provision/known_hosts"
SSH_VARS_RELPATH = Path("group_vars") / "all" / "provision_ssh.yml"
MIN_PYTHON = (3, 8)  # what ansible-core 2.16+ modules need on the target


class BootstrapError(RuntimeError):
    """A usage or inventory problem (exit 2); the message is one line with the fix."""


class HostFailure(Exception):
    """One host failed; `cause` and `fix` are one line each."""

    def __init__(self, cause: str, fix: str) -> None:
        super().__init__(cause)
        self.cause = cause
        self.fix = fix


# ====================================================================== pure: host keys
# (plugins/module_utils/ssh/known_hosts.py: the same code verify uses to name a changed host key)

def _collection_module(name):
    from provision.ansible import collection_module

    return collection_module(name)


def _known_hosts():
    return _collection_module("ssh.known_hosts")


_kh = _known_hosts()
# the ansible_connection values that log in over SSH (plugins/module_utils/common/cluster_plan.py: the one list,
# which the sshd and ssh_mesh roles read too)
SSH_CONNECTIONS = frozenset(_collection_module("common.cluster_plan").SSH_CONNECTIONS)
KEY_LABELS = _kh.KEY_LABELS
fingerprint, key_label, host_pattern = _kh.fingerprint, _kh.key_label, _kh.host_pattern
host_field_matches, KnownKey, known_keys_for = _kh.host_field_matches, _kh.KnownKey, _kh.known_keys_for
HostKeyVerdict, judge_host_key, preferred_key_types = _kh.HostKeyVerdict, _kh.judge_host_key, _kh.preferred_key_types
known_hosts_line, remove_key_command, replace_host_key = _kh.known_hosts_line, _kh.remove_key_command, _kh.replace_host_key
append_lines = _kh.append_lines


# ====================================================================== pure: authorized_keys

def parse_public_key(line: str) -> tuple[str, str, str]:
    """(type, base64, comment) of an OpenSSH public key line; ValueError when it is not one."""
    fields = line.strip().split(None, 2)
    if len(fields) < 2 or fields[0] not in KEY_LABELS:
        raise ValueError("not an OpenSSH public key line")
    try:
        base64.b64decode(fields[1], validate=True)
    except ValueError as exc:
        raise ValueError("public key is not valid base64") from exc
    return fields[0], fields[1], fields[2] if len(fields) > 2 else ""


def authorized_key_present(text: str, keytype: str, b64: str) -> bool:
    """Is this key (options and comment aside) in the authorized_keys text?"""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        tokens = line.split()
        for i in range(len(tokens) - 1):
            if tokens[i] == keytype and tokens[i + 1] == b64:
                return True
    return False


def merge_authorized_keys(text: str, pubkey_line: str) -> str | None:
    """authorized_keys text with the key appended once, every existing line kept; None if present."""
    keytype, b64, _comment = parse_public_key(pubkey_line)
    if authorized_key_present(text, keytype, b64):
        return None
    if text and not text.endswith("\n"):
        text += "\n"
    return text + pubkey_line.strip() + "\n"


PROBE_MARKER = "@@provision-authorized-keys@@"

# Runs as the login user through `sh -s`: what the plan needs, then the file itself.
PROBE_SCRIPT = r"""
d="$HOME/.ssh"; f="$d/authorized_keys"
echo "user=$(id -un)"
echo "uid=$(id -u)"
echo "home=$HOME"
if [ -r /etc/os-release ]; then (. /etc/os-release; echo "os=${ID:-} ${VERSION_ID:-}"); fi
v='import sys; print("%d.%d.%d" % sys.version_info[:3])'
p=$(command -v python3 2>/dev/null) && echo "python3=$p $("$p" -c "$v" 2>/dev/null)"
if [ -e "$d" ] || [ -L "$d" ]; then echo "ssh_dir=$(stat -c '%a %u %F' "$d")"; fi
if [ -e "$f" ] || [ -L "$f" ]; then echo "authorized_keys=$(stat -c '%a %u %F' "$f")"; fi
if command -v sha256sum >/dev/null 2>&1; then echo "sha256sum=yes"; fi
echo "@@provision-authorized-keys@@"
if [ -f "$f" ]; then cat "$f"; fi
exit 0
"""


@dataclass
class PathState:
    mode: int
    uid: int
    kind: str  # as `stat -c %F` prints it: directory, regular file, symbolic link, ...


@dataclass
class RemoteState:
    user: str = ""
    uid: int = -1
    home: str = ""
    os: str = ""
    python3: str = ""  # path, "" when absent
    python3_version: str = ""
    ssh_dir: PathState | None = None
    authorized_keys: PathState | None = None
    authorized_keys_text: str = ""
    has_sha256sum: bool = False


def _path_state(value: str) -> PathState:
    mode, uid, kind = value.split(" ", 2)
    return PathState(int(mode, 8), int(uid), kind)


def parse_probe(output: str) -> RemoteState:
    """Parse what PROBE_SCRIPT printed (ValueError when it is not that)."""
    head, sep, body = output.partition(PROBE_MARKER + "\n")
    if not sep:
        raise ValueError("probe output has no authorized_keys marker")
    state = RemoteState(authorized_keys_text=body)
    for line in head.splitlines():
        key, _, value = line.partition("=")
        if key == "user":
            state.user = value
        elif key == "uid":
            state.uid = int(value)
        elif key == "home":
            state.home = value
        elif key == "os":
            state.os = value.strip()
        elif key == "python3":
            path, _, version = value.partition(" ")
            state.python3, state.python3_version = path, version.strip()
        elif key == "ssh_dir":
            state.ssh_dir = _path_state(value)
        elif key == "authorized_keys":
            state.authorized_keys = _path_state(value)
        elif key == "sha256sum":
            state.has_sha256sum = True
    if state.uid < 0 or not state.home:
        raise ValueError("probe output lacks the user's uid or home")
    return state


@dataclass
class KeyPlan:
    """What to do to the remote ~/.ssh so that the key is authorized (nothing when empty)."""
    new_text: str | None = None  # full new authorized_keys content
    expected_sha256: str = ""  # sha256 of the content read ("absent" when there was no file)
    create_dir: bool = False
    dir_mode: bool = False
    file_mode: bool = False
    chown: bool = False
    changes: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.changes


def plan_authorized_keys(state: RemoteState, pubkey_line: str) -> KeyPlan:
    """Decide the changes; HostFailure when the remote layout is one we must not touch."""
    where = f"{state.home}/.ssh"
    plan = KeyPlan()
    for label, ps, want_kind in (("~/.ssh", state.ssh_dir, "directory"),
                                 ("~/.ssh/authorized_keys", state.authorized_keys, "regular file")):
        if ps is None:
            continue
        if ps.kind != want_kind:
            raise HostFailure(f"{label} is a {ps.kind}, not a {want_kind}; left alone",
                              f"make {where if label == '~/.ssh' else where + '/authorized_keys'} "
                              f"a plain {want_kind} owned by {state.user}, then re-run")
        if ps.uid != state.uid:
            if state.uid != 0:
                raise HostFailure(f"{label} is owned by uid {ps.uid}, not {state.user} (uid {state.uid})",
                                  f"as root on the host: chown -R {state.user}: {where}")
            plan.chown = True
    text = state.authorized_keys_text if state.authorized_keys is not None else ""
    plan.new_text = merge_authorized_keys(text, pubkey_line)
    plan.expected_sha256 = (hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()
                            if state.authorized_keys is not None else "absent")
    if state.ssh_dir is None:
        plan.create_dir = True
        plan.changes.append("created ~/.ssh (0700)")
    elif state.ssh_dir.mode != 0o700:
        plan.dir_mode = True
        plan.changes.append(f"~/.ssh mode {state.ssh_dir.mode:o} -> 700")
    if plan.new_text is not None:
        plan.changes.append("key added to authorized_keys" if state.authorized_keys is not None
                            else "created authorized_keys (0600) with the key")
    if state.authorized_keys is not None and state.authorized_keys.mode != 0o600:
        plan.file_mode = True
        plan.changes.append(f"authorized_keys mode {state.authorized_keys.mode:o} -> 600")
    if plan.chown:
        plan.changes.append(f"ownership of ~/.ssh -> {state.user}")
    return plan


def write_script(plan: KeyPlan, guard: bool) -> str:
    """The `sh -s` script that carries out a plan (the new content travels in a heredoc)."""
    lines = ['set -e', 'umask 077', 'd="$HOME/.ssh"; f="$d/authorized_keys"']
    if plan.create_dir:
        lines.append('mkdir -m 700 "$d"')
    if plan.dir_mode:
        lines.append('chmod 700 "$d"')
    if plan.new_text is not None:
        if guard:
            lines += [
                f"expected={plan.expected_sha256}",
                'cur=absent; if [ -f "$f" ]; then cur=$(sha256sum < "$f" | cut -d" " -f1); fi',
                'if [ "$cur" != "$expected" ]; then echo "authorized_keys changed while we read it" >&2; exit 3; fi',
            ]
        delim = "PROVISION_EOF_" + secrets.token_hex(8)
        while delim in plan.new_text:
            delim = "PROVISION_EOF_" + secrets.token_hex(8)
        lines += ['t="$f.provision-tmp"', 'rm -f "$t"', f"cat > \"$t\" <<'{delim}'",
                  plan.new_text.rstrip("\n"), delim, 'chmod 600 "$t"', 'mv -f "$t" "$f"']
    if plan.file_mode:
        lines.append('chmod 600 "$f"')
    if plan.chown:
        lines.append('chown "$(id -u):$(id -g)" "$d" "$f"')
    lines.append('if command -v restorecon >/dev/null 2>&1; then restorecon -R "$d" >/dev/null 2>&1 || true; fi')
    return "\n".join(lines) + "\n"


def python_report(state: RemoteState) -> tuple[bool, str, str]:
    """(ok, what was found, fix) for Ansible's interpreter on the host."""
    os_id = state.os.split(" ")[0] if state.os else ""
    if os_id in ("debian", "ubuntu"):
        install = "apt-get install -y python3"
    elif os_id in ("rhel", "centos", "rocky", "almalinux", "fedora", "ol", "amzn"):
        install = "dnf install -y python3"
    elif os_id in ("sles", "opensuse-leap", "opensuse-tumbleweed"):
        install = "zypper install -y python3"
    elif os_id == "alpine":
        install = "apk add python3"
    else:
        install = "install python3 with the distribution's package manager"
    if not state.python3:
        return False, "python3 missing", f"on the host: {install}"
    try:
        version = tuple(int(x) for x in state.python3_version.split(".")[:2])
    except ValueError:
        return False, f"{state.python3} does not run", f"on the host: {install}"
    if version < MIN_PYTHON:
        return (False, f"python3 {state.python3_version} is older than Ansible needs "
                f"({'.'.join(map(str, MIN_PYTHON))})",
                f"on the host: {install} (a newer one), or set ansible_python_interpreter")
    return True, f"python3 {state.python3_version} ({state.python3})", ""


# ====================================================================== pure: password, inventory

def check_password_file(path: str | Path, st: os.stat_result, euid: int) -> None:
    """Refuse a password file that others can read, or that is not ours."""
    qpath = shlex.quote(str(path))
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode)):
        raise BootstrapError(f"password file {path} is not a regular file")
    if st.st_uid != euid:
        raise BootstrapError(f"password file {path} belongs to uid {st.st_uid}, not to you "
                             f"(uid {euid}); fix: chown {euid} {qpath}")
    if stat.S_IMODE(st.st_mode) & 0o077:
        raise BootstrapError(f"password file {path} has mode {stat.S_IMODE(st.st_mode):04o}, readable "
                             f"by others; fix: chmod 600 {qpath}")


def read_password_file(path: str | Path) -> str:
    """The password (first line), from the file opened once: the checks are made on what was opened
    (fstat), so the file cannot be swapped between a check by name and the read. O_NONBLOCK: a FIFO
    (a password piped in) opens without waiting; its read then waits for the writer."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise BootstrapError(f"cannot read password file {path}: {exc.strerror}") from exc
    with os.fdopen(fd, "rb") as raw:
        check_password_file(path, os.fstat(fd), os.geteuid())
        os.set_blocking(fd, True)
        password = raw.readline().decode("utf-8").rstrip("\r\n")
    if not password:
        raise BootstrapError(f"password file {path} is empty (the first line is the password)")
    return password


@dataclass
class Target:
    name: str
    address: str
    port: int = 22
    user: str = "root"
    key_file: str | None = None  # ansible_ssh_private_key_file, when the inventory sets one
    ssh_common_args: str | None = None
    error: str | None = None  # an inventory problem for this host
    proxy: "Proxy | None" = None  # ProxyJump / ProxyCommand for it (resolve_proxy), once resolved
    proxy_resolved: bool = False

    @property
    def pattern(self) -> str:
        return host_pattern(self.address, self.port)

    @property
    def where(self) -> str:
        return f"{self.user}@{self.address}:{self.port}"


def inventory_hosts(data: dict) -> list[str]:
    """Host names of `ansible-inventory --list` output in inventory order (depth first from all)."""
    from provision import ansible

    order = ansible.group_hosts(data, "all")
    return order + [h for h in (data.get("_meta") or {}).get("hostvars", {}) if h not in order]


def targets_from_inventory(data: dict, *, user: str | None = None,
                           default_user: str = "root") -> tuple[list[Target], list[tuple[str, str]]]:
    """(SSH targets, [(host, why skipped)]) from `ansible-inventory --list` JSON."""
    from provision import ansible

    hostvars = (data.get("_meta") or {}).get("hostvars", {})
    targets, skipped = [], []
    for name in inventory_hosts(data):
        hv = ansible.plain(hostvars.get(name) or {})
        conn = str(hv.get("ansible_connection", "ssh"))
        if conn not in SSH_CONNECTIONS:
            skipped.append((name, f"ansible_connection={conn}: no SSH first contact to make"))
            continue
        address = str(hv.get("ansible_host") or hv.get("ansible_ssh_host") or name)
        target = Target(name=name, address=address,
                        user=str(user or hv.get("ansible_user") or hv.get("ansible_ssh_user") or default_user),
                        key_file=hv.get("ansible_ssh_private_key_file") or hv.get("ansible_private_key_file"),
                        ssh_common_args=hv.get("ansible_ssh_common_args"))
        raw_port = hv.get("ansible_port", hv.get("ansible_ssh_port", 22))
        try:
            target.port = int(raw_port)
            if not 1 <= target.port <= 65535:
                raise ValueError
        except (TypeError, ValueError):
            target.error = f"ansible_port={raw_port!r} is not a port number"
        for var, value in (("ansible_host", target.address), ("ansible_user", target.user),
                           ("ansible_port", str(raw_port))):
            if "{{" in value or "{%" in value:
                target.error = f"{var} is a template ({value}); bootstrap needs a literal value"
        targets.append(target)
    return targets, skipped


def inventory_dir(inventory: str) -> Path | None:
    path = Path(inventory).expanduser()
    if path.is_dir():
        return path.resolve()
    if path.is_file():
        return path.resolve().parent
    return None


def ssh_vars_text(known_hosts: Path, inv_dir: Path) -> str:
    ref = ("{{ inventory_dir }}/" + KNOWN_HOSTS_REL if known_hosts == inv_dir / KNOWN_HOSTS_REL
           else str(known_hosts))
    return (
        "---\n"
        "# Written by `provision bootstrap` (only when missing; edit freely).\n"
        "# Ansible's SSH checks host keys against the keys recorded at first contact, and the\n"
        "# ssh_mesh role keeps the controller's known_hosts in the same file.\n"
        f'ansible_ssh_common_args: "-o UserKnownHostsFile={ref} -o StrictHostKeyChecking=yes"\n'
        f'cluster_controller_known_hosts: "{ref}"\n'
    )


# options that switch host-key checking off (what we refuse to run with)
_HOST_KEY_BYPASS = re.compile(r"StrictHostKeyChecking\s*=?\s*(?:no|off|accept-new)\b|"
                              r"UserKnownHostsFile\s*=?\s*/dev/null", re.IGNORECASE)


def ssh_args_problem(target: Target, known_hosts: Path, inv_dir: Path | None) -> str | None:
    """Why Ansible would not use our known_hosts with checking on for this host (None: it will)."""
    args = target.ssh_common_args or ""
    bad = _HOST_KEY_BYPASS.search(args)
    if bad:
        return f"ansible_ssh_common_args contains {bad.group(0)}: host keys would not be checked"
    refs = {str(known_hosts)}
    if inv_dir is not None and known_hosts == inv_dir / KNOWN_HOSTS_REL:
        refs.add("{{ inventory_dir }}/" + KNOWN_HOSTS_REL)
    if not any(f"UserKnownHostsFile={ref}" in args for ref in refs):
        return "ansible_ssh_common_args does not name the bootstrap known_hosts"
    return None


# ====================================================================== pure: bastions (ProxyJump, ProxyCommand)
# What Ansible's ssh does for a host is what ssh's own configuration says for it: the inventory's
# ansible_ssh_common_args (-o ProxyJump=..., -J, -o ProxyCommand=..., -F FILE) and ~/.ssh/config. `ssh -G`
# prints that configuration; bootstrap follows the same ProxyJump / ProxyCommand with paramiko, and checks
# every bastion's host key against the known_hosts files ssh would read for it.

@dataclass
class Hop:
    """One bastion of a ProxyJump chain, as `ssh -G` resolves it."""
    spec: str  # as written ([user@]host[:port] or a Host alias)
    address: str
    port: int = 22
    user: str = ""
    identity_files: list[str] = field(default_factory=list)
    known_hosts_files: list[str] = field(default_factory=list)
    host_key_alias: str = ""

    @property
    def where(self) -> str:
        return f"{self.user}@{self.address}:{self.port}" if self.user else f"{self.address}:{self.port}"

    @property
    def pattern(self) -> str:
        return host_pattern(self.host_key_alias or self.address, self.port)


@dataclass
class Proxy:
    jumps: list[Hop] = field(default_factory=list)
    command: str = ""  # ProxyCommand, its %h %p %r already replaced


def ssh_config_args(common_args: str | None) -> list[str]:
    """The options of ansible_ssh_common_args that choose a configuration (-o, -F, -J), for `ssh -G`."""
    try:
        tokens = shlex.split(common_args or "")
    except ValueError as exc:
        raise BootstrapError(f"ansible_ssh_common_args cannot be split into words ({exc}): {common_args}") from exc
    out, i = [], 0
    while i < len(tokens):
        tok = tokens[i]
        if tok in ("-o", "-F", "-J") and i + 1 < len(tokens):
            out += [tok, tokens[i + 1]]
            i += 2
            continue
        if tok[:2] in ("-o", "-F", "-J") and len(tok) > 2:
            out.append(tok)
        i += 1
    return out


def config_file_args(args: list[str]) -> list[str]:
    """Only the -F of ARGS: what ssh hands to the connection to a jump host (not -o, not -J)."""
    out, i = [], 0
    while i < len(args):
        if args[i] == "-F" and i + 1 < len(args):
            out += args[i:i + 2]
            i += 2
            continue
        if args[i].startswith("-F") and len(args[i]) > 2:
            out.append(args[i])
        i += 1
    return out


def parse_ssh_g(text: str) -> dict[str, list[str]]:
    """`ssh -G` output: keyword -> values (identityfile and the like repeat; userknownhostsfile lists
    several files on one line)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        key, _sep, value = line.strip().partition(" ")
        if key:
            out.setdefault(key.lower(), []).append(value.strip())
    return out


def split_jump(spec: str) -> tuple[str, str, int | None]:
    """([user], host, [port]) of one ProxyJump hop: [user@]host[:port], [user@][v6addr]:port, ssh://..."""
    spec = spec.strip()
    if spec.startswith("ssh://"):
        spec = spec[len("ssh://"):]
    user, at, rest = spec.rpartition("@")
    if not at:
        user, rest = "", spec
    port = None
    if rest.startswith("["):
        host, _sep, tail = rest[1:].partition("]")
        if tail.startswith(":") and tail[1:].isdigit():
            port = int(tail[1:])
    else:
        host, sep, tail = rest.partition(":")
        if sep and tail.isdigit():
            port = int(tail)
        elif sep:
            host = rest
    return user, host, port


def expand_proxy_command(command: str, host: str, port: int, user: str) -> str:
    """ProxyCommand with ssh's %h, %p, %r and %% replaced (other tokens are refused)."""
    out, i = [], 0
    while i < len(command):
        ch = command[i]
        if ch == "%" and i + 1 < len(command):
            token = command[i + 1]
            values = {"h": host, "p": str(port), "r": user, "%": "%", "n": host}
            if token not in values:
                raise BootstrapError(f"ProxyCommand {command!r}: %{token} is not supported by bootstrap "
                                     "(use %h, %p, %r)")
            out.append(values[token])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def proxy_from_config(cfg: dict[str, list[str]], target_address: str, target_port: int,
                      target_user: str, resolve_hop: Callable[[str], Hop]) -> Proxy | None:
    """The Proxy of a host from its `ssh -G` configuration (None: ssh connects directly)."""
    jump = (cfg.get("proxyjump") or ["none"])[0]
    command = (cfg.get("proxycommand") or ["none"])[0]
    if jump and jump.lower() != "none":
        return Proxy(jumps=[resolve_hop(h) for h in jump.split(",") if h.strip()])
    if command and command.lower() != "none":
        return Proxy(command=expand_proxy_command(command, target_address, target_port, target_user))
    return None


def _ssh_g(args: list[str], host: str, port: int | None = None, user: str | None = None,
           timeout: float = 30) -> dict[str, list[str]]:
    ssh = shutil.which("ssh")
    if ssh is None:
        raise BootstrapError("ssh (openssh-client) is missing on this machine: it reads the SSH configuration "
                             "(ProxyJump, ~/.ssh/config) that Ansible's connection uses too")
    argv = [ssh, "-G", *args] + (["-p", str(port)] if port else []) + (["-l", user] if user else []) + [host]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                          stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        raise BootstrapError(f"`ssh -G {host}` cannot read the SSH configuration for {host}: "
                             f"{(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return parse_ssh_g(proc.stdout)


def resolve_proxy(target: Target) -> Proxy | None:
    """The ProxyJump / ProxyCommand Ansible's ssh would use for TARGET (from its ansible_ssh_common_args and
    the SSH configuration files), each jump host resolved as ssh resolves it (only -F passed on)."""
    if target.proxy_resolved:
        return target.proxy
    args = ssh_config_args(target.ssh_common_args)
    cfg = _ssh_g(args, target.address, target.port, target.user)
    files = config_file_args(args)

    def hop(spec: str) -> Hop:
        user, host, port = split_jump(spec)
        hc = _ssh_g(files, host, port, user or None)
        known = [f for v in hc.get("userknownhostsfile", []) for f in v.split()]
        known += [f for v in hc.get("globalknownhostsfile", []) for f in v.split()]
        return Hop(spec=spec, address=(hc.get("hostname") or [host])[0], port=int((hc.get("port") or [22])[0]),
                   user=(hc.get("user") or [user or ""])[0], identity_files=hc.get("identityfile", []),
                   known_hosts_files=known, host_key_alias=(hc.get("hostkeyalias") or [""])[0])

    target.proxy = proxy_from_config(cfg, target.address, target.port, target.user, hop)
    target.proxy_resolved = True
    return target.proxy


# ====================================================================== controller side

@dataclass
class ControllerKey:
    private: Path
    public_line: str
    created: bool = False
    pkey: object | None = None  # paramiko key, None when it cannot be loaded (passphrase)
    note: str = ""


def ensure_controller_key(key_file: str | Path | None = None, *, log: Callable[[str], None] = print
                          ) -> ControllerKey:
    """The controller key whose public half gets installed; an ed25519 pair is made when none exists.

    key_file: a private key path (--key, or the inventory's ansible_ssh_private_key_file); made
    there when missing. None: the first of ~/.ssh/id_ed25519, id_ecdsa, id_rsa, else a new
    ~/.ssh/id_ed25519. The private key stays where it is; only the .pub line travels.
    """
    if key_file is not None:
        candidates = [Path(key_file).expanduser()]
    else:
        candidates = [Path(p).expanduser() for p in DEFAULT_IDENTITIES[::-1]]
    created = False
    chosen = next((p for p in candidates if p.is_file()), None)
    if chosen is None:
        chosen = candidates[0] if key_file is not None else DEFAULT_KEY.expanduser()
        chosen.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        keygen = shutil.which("ssh-keygen")
        if keygen is None:
            raise BootstrapError("ssh-keygen is missing on this machine: install openssh-client")
        comment = f"{getpass.getuser()}@{socket.gethostname()}"
        proc = subprocess.run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(chosen)],
                              capture_output=True, text=True, check=False, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise BootstrapError(f"ssh-keygen failed: {proc.stderr.strip()}")
        created = True
        log(f"made the controller key pair {chosen} (ed25519, no passphrase)")
    pub = chosen.with_name(chosen.name + ".pub")
    try:
        line = pub.read_text(encoding="utf-8").strip().splitlines()[0]
        parse_public_key(line)
    except (OSError, IndexError, ValueError) as exc:
        raise BootstrapError(f"no usable public key {pub} ({exc}); make it: "
                             f"ssh-keygen -y -f {shlex.quote(str(chosen))} > {shlex.quote(str(pub))}") from exc
    key = ControllerKey(private=chosen, public_line=line, created=created)
    import paramiko

    try:
        key.pkey = paramiko.PKey.from_path(str(chosen))
    except paramiko.PasswordRequiredException:
        key.note = f"{chosen} has a passphrase: logging in with it is left to ssh-agent and Ansible"
    except (paramiko.SSHException, OSError, ValueError) as exc:
        key.note = f"cannot load {chosen} ({exc}): the password is used to log in"
    return key


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="surrogateescape")
    except FileNotFoundError:
        return ""


def write_atomic(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        mode = stat.S_IMODE(path.stat().st_mode)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=str(path.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_inventory(inventory: str, limit: str | None = None, *, timeout: float = 120) -> dict:
    """`ansible-inventory -i INV --list` as JSON (BootstrapError when it cannot be read)."""
    from provision import ansible

    try:
        return ansible.read_inventory(inventory, limit, timeout=timeout)
    except ansible.AnsibleError as exc:
        raise BootstrapError(str(exc)) from exc


# ====================================================================== remote side (paramiko)

def _quiet_paramiko() -> None:
    # paramiko logs handshake errors with tracebacks; our one-line causes say it better
    logger = logging.getLogger("paramiko")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())
    logger.propagate = False


def _tcp(address: str, port: int, timeout: float, name: str, what: str = ""):
    """A TCP connection to ADDRESS:PORT; HostFailure naming it (WHAT: 'the bastion ...') otherwise."""
    addr = f"{address}:{port}"
    who = what or name
    try:
        return socket.create_connection((address, port), timeout=timeout)
    except ConnectionRefusedError as exc:
        raise HostFailure(f"connection refused on {addr}" + (f" ({what})" if what else ""),
                          f"start sshd on {who}, or set the port it listens on"
                          + (" (ProxyJump in ansible_ssh_common_args or ~/.ssh/config)" if what else
                             " (ansible_port)")) from exc
    except socket.gaierror as exc:
        raise HostFailure(f"cannot resolve {address}" + (f" ({what})" if what else ""),
                          "set ansible_host to a resolvable name or an IP address" if not what else
                          "name the bastion by a resolvable name or address (ProxyJump, ~/.ssh/config)") from exc
    except (socket.timeout, TimeoutError) as exc:
        raise HostFailure(f"timeout: no answer from {addr} within {timeout:g} s" + (f" ({what})" if what else ""),
                          "check the address and port and any firewall between here and "
                          + ("the bastion" if what else "the host")) from exc
    except OSError as exc:
        raise HostFailure(f"cannot reach {addr}: {exc.strerror or exc}" + (f" ({what})" if what else ""),
                          "check the route to " + ("the bastion (is it up?)" if what else
                                                   "the host (ansible_host)")) from exc


def _handshake(sock, addr: str, timeout: float, prefer: list[str] | None):
    import paramiko

    transport = paramiko.Transport(sock)
    transport.banner_timeout = timeout
    transport.handshake_timeout = timeout
    transport.auth_timeout = timeout
    if prefer:
        opts = transport.get_security_options()
        have = list(opts.key_types)
        opts.key_types = tuple([k for k in prefer if k in have] + [k for k in have if k not in prefer])
    try:
        # start_client returns quietly when its own timeout passes first: give the banner and
        # handshake timeouts room to fire, then make sure the key exchange really finished
        transport.start_client(timeout=2 * timeout + 1)
        transport.get_remote_server_key()
    except (paramiko.SSHException, EOFError, OSError) as exc:
        cause = transport.get_exception() or exc
        transport.close()
        if "banner" in str(cause).lower():
            raise HostFailure(f"timeout: no SSH banner from {addr} within {timeout:g} s",
                              "check that sshd (not another service) listens on that port") from exc
        if "no existing session" in str(cause).lower():
            raise HostFailure(f"timeout: the SSH handshake with {addr} did not finish in {2 * timeout + 1:g} s",
                              "check the host's load and that sshd listens on that port") from exc
        raise HostFailure(f"SSH handshake with {addr} failed: {cause}",
                          "check that sshd listens on that port and supports current algorithms") from exc
    return transport


def _hop_known_text(hop: Hop) -> tuple[str, list[str]]:
    """The known_hosts text ssh reads for a bastion (its UserKnownHostsFile and GlobalKnownHostsFile)."""
    texts, files = [], []
    for name in hop.known_hosts_files:
        path = Path(os.path.expanduser(name))
        if path.is_file():
            files.append(str(path))
            texts.append(read_text(path))
    return "\n".join(texts), files


def _hop_keys(hop: Hop, extra: list) -> list:
    """The keys to offer a bastion: its IdentityFile(s) that load without a passphrase, the agent's, EXTRA."""
    import paramiko

    keys = []
    for name in hop.identity_files:
        path = Path(os.path.expanduser(name))
        if path.is_file():
            try:
                keys.append(paramiko.PKey.from_path(str(path)))
            except (paramiko.SSHException, OSError, ValueError):
                continue  # a passphrase (the agent may hold it) or not a key
    try:
        keys += list(paramiko.Agent().get_keys())
    except paramiko.SSHException:
        pass
    return keys + [k for k in extra if k is not None]


def open_jump(hop: Hop, sock, target: Target, timeout: float, keys: list):
    """An authenticated transport to bastion HOP (over SOCK), its host key checked against the known_hosts
    files ssh reads for it. HostFailure (naming the bastion and the host behind it) otherwise."""
    import paramiko

    what = f"the bastion {hop.where} in front of {target.name}"
    known_text, files = _hop_known_text(hop)
    entries = known_keys_for(known_text, hop.pattern)
    transport = _handshake(sock, f"{hop.where} ({what})", timeout, preferred_key_types(entries))
    keytype, blob = server_key(transport)
    verdict = judge_host_key(entries, keytype, blob)
    label = key_label(keytype)
    where_kh = ", ".join(files) or "no known_hosts file"
    if verdict.status != "known":
        transport.close()
        if verdict.status == "changed":
            raise HostFailure(
                f"{what} presents host key {verdict.presented} ({label}), not the one recorded for {hop.pattern} "
                f"in {where_kh} ({', '.join(verdict.recorded)}): ssh refuses it too",
                f"if the bastion was reinstalled, check {verdict.presented} at its console (ssh-keygen -lf "
                f"/etc/ssh/ssh_host_{label.lower()}_key.pub) and replace its line ("
                f"{remove_key_command(hop.pattern, Path(files[0]) if files else Path('~/.ssh/known_hosts'))}); "
                "otherwise find out who answers there")
        raise HostFailure(f"{what}: its host key {verdict.presented} ({label}) is not in {where_kh}, where ssh "
                          "looks for it",
                          f"check {verdict.presented} at the bastion's console and record it there (connect once "
                          f"with `ssh {hop.spec}` and compare), then re-run")
    for key in keys:
        try:
            transport.auth_publickey(hop.user, key)
            return transport
        except paramiko.AuthenticationException:
            continue
        except paramiko.SSHException as exc:
            transport.close()
            raise HostFailure(f"authentication at {what} did not finish: {exc}", "retry; raise -T/--connect-timeout") from exc
    transport.close()
    raise HostFailure(f"{what} accepts none of our keys for {hop.user or 'the user'}",
                      "log in to the bastion with a key first (its IdentityFile in ~/.ssh/config or an "
                      "ssh-agent): bootstrap makes first contact with the nodes behind it, not with it")


def _via(transport, address: str, port: int, timeout: float, what: str):
    """A direct-tcpip channel from TRANSPORT (a bastion) to ADDRESS:PORT."""
    import paramiko

    try:
        return transport.open_channel("direct-tcpip", (address, port), ("127.0.0.1", 0), timeout=timeout)
    except (paramiko.ChannelException, paramiko.SSHException, EOFError, OSError) as exc:
        raise HostFailure(f"{what} cannot connect to {address}:{port} ({exc})",
                          "check that the host is up and that the bastion reaches it (ansible_host, ansible_port)"
                          ) from exc


def _proxy_sock(target: Target, proxy: Proxy, timeout: float, keys: list):
    """(sock to the target through the proxy, [bastion transports to close with it])."""
    import paramiko

    if proxy.command:
        try:
            return paramiko.ProxyCommand(proxy.command), []
        except (paramiko.SSHException, OSError) as exc:
            raise HostFailure(f"ProxyCommand for {target.name} did not start: {exc}",
                              "fix ProxyCommand in ansible_ssh_common_args or ~/.ssh/config") from exc
    jumps: list = []
    try:
        first = proxy.jumps[0]
        sock = _tcp(first.address, first.port, timeout, target.name,
                    f"the bastion {first.where} in front of {target.name}")
        for i, hop in enumerate(proxy.jumps):
            transport = open_jump(hop, sock, target, timeout, keys)
            jumps.append(transport)
            nxt = proxy.jumps[i + 1] if i + 1 < len(proxy.jumps) else None
            dest = (nxt.address, nxt.port) if nxt else (target.address, target.port)
            sock = _via(transport, dest[0], dest[1], timeout, f"the bastion {hop.where}")
        return sock, jumps
    except BaseException:
        for transport in reversed(jumps):
            transport.close()
        raise


def open_transport(target: Target, timeout: float, prefer: list[str] | None = None, keys: list | None = None):
    """TCP connect (through the host's ProxyJump / ProxyCommand when it has one) + SSH handshake (no auth).
    HostFailure with cause and fix on every failure. KEYS: offered to bastions (with their own)."""
    addr = f"{target.address}:{target.port}"
    try:
        proxy = resolve_proxy(target)
    except BootstrapError as exc:
        raise HostFailure(str(exc), f"fix ansible_ssh_common_args of {target.name} or ~/.ssh/config") from exc
    jumps: list = []
    if proxy is None:
        sock = _tcp(target.address, target.port, timeout, target.name)
    else:
        sock, jumps = _proxy_sock(target, proxy, timeout, list(keys or []))
    try:
        transport = _handshake(sock, addr, timeout, prefer)
    except BaseException:
        for jump in reversed(jumps):
            jump.close()
        raise
    if jumps:
        close = transport.close

        def close_all() -> None:
            close()
            for jump in reversed(jumps):
                jump.close()
        transport.close = close_all
    return transport


def server_key(transport) -> tuple[str, bytes]:
    key = transport.get_remote_server_key()
    return key.get_name(), key.asbytes()


def authenticate(transport, target: Target, pkey, password: str | None) -> str:
    """Log in with the controller's key, else the password. Returns the method used."""
    import paramiko

    if pkey is not None:
        try:
            transport.auth_publickey(target.user, pkey)
            return "key"
        except paramiko.AuthenticationException:
            pass
        except paramiko.SSHException as exc:
            raise HostFailure(f"authentication as {target.user} did not finish: {exc}",
                              "retry; raise -T/--connect-timeout if the host is slow") from exc
    if password is None:
        raise HostFailure(f"the controller's key is not authorized for {target.user} and no password was given",
                          "re-run with --ask-pass or --password-file FILE")
    root_hint = " (a root login also needs PermitRootLogin yes)" if target.user == "root" else ""
    try:
        transport.auth_password(target.user, password)
        return "password"
    except paramiko.BadAuthenticationType as exc:
        raise HostFailure(f"sshd does not accept passwords for {target.user} "
                          f"(allows: {', '.join(exc.allowed_types) or 'nothing'})",
                          f"enable PasswordAuthentication{root_hint} on the host for the first "
                          "contact, or put the controller's public key there by other means") from exc
    except paramiko.AuthenticationException as exc:
        raise HostFailure(f"wrong password: the password was rejected for {target.user}",
                          f"check the password for {target.user}@{target.name}{root_hint}") from exc
    except paramiko.SSHException as exc:
        raise HostFailure(f"authentication as {target.user} did not finish: {exc}",
                          "retry; raise -T/--connect-timeout if the host is slow") from exc


def run_script(transport, script: str, timeout: float) -> tuple[int, str, str]:
    """Run a script with `sh -s` (fed on stdin): (status, stdout, stderr)."""
    chan = transport.open_session(timeout=timeout)
    try:
        chan.settimeout(timeout)
        chan.exec_command("sh -s")
        chan.sendall(script.encode("utf-8", "surrogateescape"))
        chan.shutdown_write()
        out = chan.makefile("rb").read()
        err = chan.makefile_stderr("rb").read()
        if not chan.status_event.wait(timeout):
            raise socket.timeout("no exit status")
        status = chan.recv_exit_status()
    except (socket.timeout, TimeoutError) as exc:
        raise HostFailure(f"timeout: a remote command did not finish within {timeout:g} s",
                          "check the host's load; raise -T/--connect-timeout") from exc
    finally:
        chan.close()
    return status, out.decode("utf-8", "surrogateescape"), err.decode("utf-8", "surrogateescape")


@dataclass
class HostResult:
    host: str
    where: str
    ok: bool = False
    host_key: str = ""  # "ED25519 SHA256:..."
    host_key_status: str = ""  # known | accepted | confirmed | replaced
    login: str = ""  # key | password
    changes: list[str] = field(default_factory=list)
    python: str = ""
    python_ok: bool = True
    python_fix: str = ""
    cause: str = ""
    fix: str = ""
    seconds: float = 0.0
    same_as: str = ""  # another inventory name of the same machine, done under that name

    @property
    def changed(self) -> bool:
        return bool(self.changes) or self.host_key_status in ("accepted", "confirmed", "replaced")

    def as_dict(self) -> dict:
        return {**asdict(self), "changed": self.changed}


@dataclass
class Scan:
    target: Target
    keytype: str = ""
    blob: bytes = b""
    failure: HostFailure | None = None
    seconds: float = 0.0


def _unexpected(exc: Exception) -> HostFailure:
    return HostFailure(f"unexpected {type(exc).__name__}: {exc}", "re-run; report it if it persists")


def scan_host(target: Target, known_text: str, timeout: float, keys: list | None = None) -> Scan:
    t0 = time.monotonic()
    scan = Scan(target)
    try:
        if target.error:
            raise HostFailure(target.error, f"fix {target.name} in the inventory")
        transport = open_transport(target, timeout, preferred_key_types(known_keys_for(known_text, target.pattern)),
                                   keys=keys)
        try:
            scan.keytype, scan.blob = server_key(transport)
        finally:
            transport.close()
    except HostFailure as exc:
        scan.failure = exc
    except Exception as exc:  # noqa: BLE001 - one line per host, never a traceback
        scan.failure = _unexpected(exc)
    scan.seconds = time.monotonic() - t0
    return scan


def install_key(target: Target, keytype: str, blob: bytes, *, pkey, pubkey_line: str,
                password: str | None, timeout: float, result: HostResult) -> None:
    """Connect expecting exactly this host key, log in, make authorized_keys right, read python3."""
    transport = open_transport(target, timeout, preferred_key_types([KnownKey(keytype, blob)]), keys=[pkey])
    try:
        got_type, got_blob = server_key(transport)
        if (got_type, got_blob) != (keytype, blob):
            raise HostFailure(f"host key changed during bootstrap: {fingerprint(blob)} then {fingerprint(got_blob)}",
                              "find out why the host's key changed, then re-run")
        result.login = authenticate(transport, target, pkey, password)
        status, out, err = run_script(transport, PROBE_SCRIPT, timeout)
        try:
            state = parse_probe(out)
        except ValueError as exc:
            raise HostFailure(f"cannot read ~/.ssh of {target.user} (sh exited {status}: "
                              f"{err.strip()[-200:] or exc})",
                              f"check that {target.user} has a home directory and a POSIX sh") from exc
        plan = plan_authorized_keys(state, pubkey_line)
        if not plan.empty:
            status, _out, err = run_script(transport, write_script(plan, state.has_sha256sum), timeout)
            if status != 0:
                raise HostFailure(f"could not update ~/.ssh/authorized_keys (exit {status}: "
                                  f"{err.strip().splitlines()[-1] if err.strip() else 'no message'})",
                                  f"check {state.home}/.ssh on the host (disk full? read-only?), then re-run")
            result.changes = plan.changes
        result.python_ok, result.python, result.python_fix = python_report(state)
    finally:
        transport.close()


# ====================================================================== orchestration

@dataclass
class Options:
    known_hosts: Path
    password: str | None = None
    accept_host_keys: bool = False
    # fingerprints (SHA256:...) a person confirmed at the consoles of reinstalled hosts: a changed key
    # that is one of these replaces the recorded one; any other changed key is still refused
    replace_host_keys: frozenset[str] = frozenset()
    confirm: Callable[[Target, str, str], bool] | None = None  # (target, label, fingerprint) -> yes?
    forks: int = DEFAULT_FORKS
    timeout: float = DEFAULT_TIMEOUT


def _failed(result: HostResult, exc: HostFailure) -> HostResult:
    result.ok, result.cause, result.fix = False, exc.cause, exc.fix
    return result


def bootstrap(targets: list[Target], keys: dict[str | None, ControllerKey], opts: Options, *,
              on_phase: Callable[[str, int], None] = lambda _name, _total: None,
              on_progress: Callable[[], None] = lambda: None,
              on_result: Callable[[HostResult], None] = lambda _r: None) -> list[HostResult]:
    """Run the three phases; returns one HostResult per target, in target order.

    keys maps a target's key_file (None: the default) to the controller key to install there.
    """
    missing = {t.key_file for t in targets} - set(keys)
    if missing:
        raise BootstrapError(f"no controller key loaded for {', '.join(map(str, missing))}")
    _quiet_paramiko()
    # inventory aliases of one machine (same address, port, user and key) are handled once
    every, targets, first_of, aliases = targets, [], {}, {}
    for t in every:
        ident = (t.address, t.port, t.user, t.key_file)
        if ident in first_of:
            aliases[t.name] = first_of[ident]
        else:
            first_of[ident] = t.name
            targets.append(t)
    results = {t.name: HostResult(t.name, t.where) for t in targets}
    started = {t.name: time.monotonic() for t in targets}
    forks = max(1, min(opts.forks, len(targets) or 1))

    def finish(result: HostResult) -> None:
        result.seconds = round(time.monotonic() - started[result.host], 3)
        on_result(result)

    # phase 1: host keys, in parallel
    known_text = read_text(opts.known_hosts)
    on_phase("host keys", len(targets))
    scans: dict[str, Scan] = {}
    with ThreadPoolExecutor(max_workers=forks) as pool:
        futures = [pool.submit(scan_host, t, known_text, opts.timeout, [keys[t.key_file].pkey]) for t in targets]
        for fut in as_completed(futures):
            scan = fut.result()
            scans[scan.target.name] = scan
            on_progress()

    # phase 2: decisions, here (prompts are asked one at a time, in inventory order)
    go: list[tuple[Target, Scan]] = []
    new_lines: list[str] = []
    replaced: list[tuple[str, str]] = []
    for target in targets:
        scan, result = scans[target.name], results[target.name]
        if scan.failure is not None:
            finish(_failed(result, scan.failure))
            continue
        verdict = judge_host_key(known_keys_for(known_text, target.pattern), scan.keytype, scan.blob)
        label = key_label(scan.keytype)
        result.host_key = f"{label} {verdict.presented}"
        if verdict.status == "changed" and verdict.presented in opts.replace_host_keys:
            replaced.append((target.pattern, known_hosts_line(target.pattern, scan.keytype, scan.blob)))
            result.host_key_status = "replaced"
            go.append((target, scan))
            continue
        if verdict.status == "changed":
            finish(_failed(result, HostFailure(
                f"host key changed: {opts.known_hosts} has {', '.join(verdict.recorded)} for "
                f"{target.pattern}, the host now presents {verdict.presented} ({label})",
                f"if {target.name} was reinstalled on purpose, check that its console shows {verdict.presented} "
                f"(ssh-keygen -lf /etc/ssh/ssh_host_{label.lower()}_key.pub) and accept it: provision bootstrap "
                f"-i INVENTORY --limit {target.name} --replace-host-key {verdict.presented} (or "
                f"{remove_key_command(target.pattern, opts.known_hosts)}); otherwise find out why")))
            continue
        if verdict.status == "revoked":
            finish(_failed(result, HostFailure(
                f"host key {verdict.presented} ({label}) is marked @revoked in {opts.known_hosts}",
                f"find out why {target.name} presents a revoked key; do not connect")))
            continue
        if verdict.status == "unknown":
            if opts.accept_host_keys:
                result.host_key_status = "accepted"
            elif opts.confirm is not None:
                if not opts.confirm(target, label, verdict.presented):
                    finish(_failed(result, HostFailure(
                        f"host key {verdict.presented} ({label}) not accepted",
                        f"compare with `ssh-keygen -lf /etc/ssh/ssh_host_{label.lower()}_key.pub` on "
                        f"{target.name}'s console, then re-run and answer yes")))
                    continue
                result.host_key_status = "confirmed"
            else:
                finish(_failed(result, HostFailure(
                    f"unknown host key {verdict.presented} ({label}) and no terminal to confirm it",
                    f"compare with `ssh-keygen -lf /etc/ssh/ssh_host_{label.lower()}_key.pub` on "
                    f"{target.name}'s console, then run on a terminal or add --accept-host-keys")))
                continue
            new_lines.append(known_hosts_line(target.pattern, scan.keytype, scan.blob))
        else:
            result.host_key_status = "known"
        go.append((target, scan))
    if new_lines or replaced:
        # re-read: another run may have added lines meanwhile; only what is missing is appended
        text = read_text(opts.known_hosts)
        for pattern, line in replaced:
            text = replace_host_key(text, pattern, line)
        merged = append_lines(text, new_lines)
        write_atomic(opts.known_hosts, merged if merged is not None else text)

    # phase 3: log in and install the key, in parallel
    on_phase("authorized_keys", len(go))

    def work(target: Target, scan: Scan) -> HostResult:
        result = results[target.name]
        key = keys[target.key_file]
        try:
            install_key(target, scan.keytype, scan.blob, pkey=key.pkey, pubkey_line=key.public_line,
                        password=opts.password, timeout=opts.timeout, result=result)
            result.ok = True
        except HostFailure as exc:
            _failed(result, exc)
        except Exception as exc:  # noqa: BLE001 - one line per host, never a traceback
            _failed(result, _unexpected(exc))
        return result

    if go:
        with ThreadPoolExecutor(max_workers=max(1, min(opts.forks, len(go)))) as pool:
            for fut in as_completed([pool.submit(work, t, s) for t, s in go]):
                finish(fut.result())
                on_progress()
    for alias, name in aliases.items():
        result = replace(results[name], host=alias, changes=[], same_as=name)
        results[alias] = result
        on_result(result)
    return [results[t.name] for t in every]
