"""Labs logged into as users log into clusters: an admin with sudo, a training user, a bastion.

`provision lab up --login sudo` (or `sudo-password`, and `--bastion`) gives nodes like cloud VMs and
HPC sites, made through the lab's console (`podman exec`, as root), the way their images or their
site make them:

- an admin `ops` (uid 1500) with sudo: `NOPASSWD: ALL` in /etc/sudoers.d (a cloud image's default
  user), or membership of the `sudo` group and a password (`--sudo-password-file`: an HPC admin);
- a training user `trainer` (uid and gid 2001 on every node, as an LDAP user is), no sudo;
- sshd on port 22 with key login only and root login refused (`PermitRootLogin no`); on nodes without
  systemd it is started as a VM's boot would (the snapshot code restarts it after a restore);
- the lab's key (made on this machine, in the lab's state directory ~/.cache/provision/labs/NAME/,
  0600) authorized for `ops`, and every node's real host keys read at the console into the lab's
  known_hosts (a cloud console prints them the same way): nothing is trusted on first use;
- `--bastion`: one more container, NAME-bastion (10.89.K.3, the same admin and key), which this
  machine reaches; the nodes drop what this machine sends them directly (iptables in each node's
  network namespace, entered from outside with nsenter, as faults.py does), so Ansible reaches them
  through the bastion only (ProxyJump, the bastion's host key checked too). The nodes reach each
  other directly, as a cluster's nodes behind a login node do.

The lab inventory (plugins/inventory/lab.py) then logs in as `ops` over ssh with `ansible_become`,
never through podman (it would bypass the login being tested), with `cluster_user: trainer`.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from ._base import LABEL, LABEL_ADDRESS, LABEL_ROLE, LabError, _run, podman

LOGINS = ("root", "sudo", "sudo-password")
ADMIN, ADMIN_UID = "ops", 1500
TRAINER, TRAINER_UID = "trainer", 2001
LABEL_LOGIN = "provision.lab.login"
LABEL_BASTION = "provision.lab.bastion"
BASTION_ROLE = "bastion"
KEY_NAME = "id_ed25519"
SSH_CONFIG = "ssh_config"
DROP_CHAIN = "PROVISION_BASTION"


def bastion_address(k: int) -> str:
    return f"10.89.{k}.3"


def bastion_container(lab: str) -> str:
    return f"{lab}-bastion"


def bastion_alias(lab: str) -> str:
    """The bastion's Host name in the lab's ssh_config (what ProxyJump names)."""
    return f"{lab}-bastion"


def check(login: str, password: str | None, bastion: bool, flavour: str) -> None:
    """Everything wrong with a login shape, before anything starts."""
    if login not in LOGINS:
        raise LabError(f"--login {login!r}: choose one of {', '.join(LOGINS)}")
    if login == "sudo-password" and not password:
        raise LabError("--login sudo-password needs the admin's password: --sudo-password-file FILE")
    if password and login != "sudo-password":
        raise LabError(f"--sudo-password-file is the password sudo asks for: it needs --login sudo-password, not {login}")
    if bastion and login == "root":
        raise LabError("--bastion logs in as the admin through the bastion: use --login sudo or sudo-password")
    if login != "root" and flavour == "bare":
        raise LabError(f"--login {login} needs sudo and openssh-server in the node image, which --image bare has not; "
                       "use --image full or minimal")
    if password is not None and ("\n" in password or ":" in password):
        raise LabError("the sudo password may not hold a newline or ':' (chpasswd's separator)")


# ---------------------------------------------------------------- the controller's side

def lab_key(state_dir: Path, lab: str) -> tuple[Path, str]:
    """(private key path, public key line) of the lab's key, made here (ed25519, 0600) when missing."""
    key = state_dir / KEY_NAME
    pub = state_dir / f"{KEY_NAME}.pub"
    if not key.is_file() or not pub.is_file():
        keygen = shutil.which("ssh-keygen")
        if keygen is None:
            raise LabError("ssh-keygen is missing on this machine: install openssh-client")
        for path in (key, pub):
            path.unlink(missing_ok=True)
        _run([keygen, "-q", "-t", "ed25519", "-N", "", "-C", f"provision-lab-{lab}", "-f", str(key)])
    os.chmod(key, 0o600)
    return key, pub.read_text().strip()


def record_host_keys(known_hosts: Path, address: str, lines: list[str]) -> None:
    """known_hosts with exactly these keys for ADDRESS (port 22: the bare address), the others kept."""
    from provision.ansible import collection_module

    kh = collection_module("ssh.known_hosts")
    entries = []
    for line in lines:
        fields = line.split()
        if len(fields) >= 2 and fields[0] in kh.KEY_LABELS:
            entries.append(f"{address} {fields[0]} {fields[1]}")
    if not entries:
        raise LabError(f"no SSH host key was read at {address}'s console")
    text = known_hosts.read_text() if known_hosts.is_file() else ""
    text = kh.replace_host_key(text, address, entries[0])
    text = kh.append_lines(text, entries[1:]) or text
    tmp = known_hosts.with_name(f".{known_hosts.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    os.replace(tmp, known_hosts)


def write_ssh_config(state_dir: Path, lab: str, address: str) -> Path:
    """The lab's ssh_config: the bastion as a Host that ProxyJump names, its key checked in the lab's
    known_hosts (ssh passes -F to the jump connection; the -o options of the command line it does not)."""
    path = state_dir / SSH_CONFIG
    text = (f"# written by `provision lab up --bastion`: the bastion of lab {lab}\n"
            f"Host {bastion_alias(lab)}\n"
            f"  HostName {address}\n  Port 22\n  User {ADMIN}\n"
            f"  IdentityFile {state_dir / KEY_NAME}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {state_dir / 'known_hosts'}\n  StrictHostKeyChecking yes\n"
            f"  BatchMode yes\n  ConnectTimeout 10\n")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)
    return path


# ---------------------------------------------------------------- the nodes' side (the console)

# run as root in the node through podman exec; $1 login, $2 init, $3 the admin's public key; the
# password (sudo-password) on standard input
SETUP = r"""
set -eu
login=$1; init=$2; key=$3
getent group trainer >/dev/null || groupadd -g 2001 trainer
id -u trainer >/dev/null 2>&1 || useradd -m -u 2001 -g 2001 -s /bin/bash trainer
getent group ops >/dev/null || groupadd -g 1500 ops
id -u ops >/dev/null 2>&1 || useradd -m -u 1500 -g 1500 -s /bin/bash ops
install -d -m 700 -o ops -g ops /home/ops/.ssh
printf '%s\n' "$key" > /home/ops/.ssh/authorized_keys
chown ops:ops /home/ops/.ssh/authorized_keys; chmod 600 /home/ops/.ssh/authorized_keys
if [ "$login" = sudo ]; then
  printf 'ops ALL=(ALL:ALL) NOPASSWD: ALL\n' > /etc/sudoers.d/90-lab-ops; chmod 440 /etc/sudoers.d/90-lab-ops
  usermod -p '*' ops
elif [ "$login" = sudo-password ]; then
  rm -f /etc/sudoers.d/90-lab-ops
  usermod -aG sudo ops
  IFS= read -r pw
  printf 'ops:%s\n' "$pw" | chpasswd
else
  # the bastion: a login, no sudo
  rm -f /etc/sudoers.d/90-lab-ops
  usermod -p '*' ops
fi
printf 'PermitRootLogin no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n' \
  > /etc/ssh/sshd_config.d/00-lab-login.conf
MACHINE_ID_LINE
ssh-keygen -A >/dev/null
if [ "$init" = systemd ]; then
  systemctl reload-or-restart ssh.service
else
  # started from podman exec, not a login: pam_loginuid cannot set another user's loginuid in a
  # container (the sshd role makes it optional too)
  sed -i -E 's/^(\s*session\s+)required(\s+pam_loginuid\.so)/\1optional\2/' /etc/pam.d/sshd
fi
""".replace("MACHINE_ID_LINE", "if [ ! -s /etc/machine-id ]; then tr -d '-' < /proc/sys/kernel/random/uuid > /etc/machine-id; fi")

# every boot (a restarted node without systemd: nothing else starts sshd), then the host keys
BOOT = r"""
set -eu
init=$1
if [ "$init" != systemd ]; then
  mkdir -p /run/sshd
  if ! grep -q ':0016 00000000:0000 0A' /proc/net/tcp; then /usr/sbin/sshd; fi
fi
i=0
while ! grep -q ':0016 00000000:0000 0A' /proc/net/tcp; do
  i=$((i+1)); [ $i -lt 150 ] || { echo "sshd does not listen on 22" >&2; exit 3; }; sleep 0.1
done
cat /etc/ssh/ssh_host_*_key.pub
"""


# a machine-id for a node without systemd (systemd makes its own at first boot): what tells a machine from
# another one of the same name (the fact cache's playbooks/identity.yml)
MACHINE_ID = "if [ ! -s /etc/machine-id ]; then tr -d '-' < /proc/sys/kernel/random/uuid > /etc/machine-id; fi"


def host_keys(container: str) -> list[str]:
    """The node's SSH host keys, read at its console."""
    proc = _run(["podman", "exec", container, "sh", "-c", "cat /etc/ssh/ssh_host_*_key.pub"], timeout=60)
    return [ln for ln in proc.stdout.splitlines() if ln.strip()]


def setup_machine(container: str, login: str, init: str, public_key: str, password: str | None) -> None:
    """Make CONTAINER a node (or, login `none`, the bastion) of this login shape, at its console."""
    argv = ["podman", "exec", "-i", container, "sh", "-c", SETUP, "lab-login", login, init, public_key]
    # the password goes through stdin: never on a command line
    _run(argv, input_text=(password + "\n") if password else "", timeout=120)


def boot_machine(container: str, init: str) -> list[str]:
    """sshd on 22 as the machine's boot starts it; its SSH host keys, read at the console."""
    proc = _run(["podman", "exec", container, "sh", "-c", BOOT, "lab-boot", init], timeout=120)
    return [ln for ln in proc.stdout.splitlines() if ln.strip()]


def _pid(container: str) -> int:
    from .faults import container_pid

    return container_pid(container)


def _ns(pid: int, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return _run(["nsenter", "-t", str(pid), "-n", "--", *argv], check=check, timeout=60)


def drop_direct(container: str, sources: list[str]) -> None:
    """In the node's network namespace: drop what SOURCES (this machine's bridge addresses) send it;
    idempotent (a chain of its own, rebuilt)."""
    from .faults import ensure_tools

    ensure_tools()
    pid = _pid(container)
    if _ns(pid, "iptables", "-w", "5", "-L", DROP_CHAIN, "-n", check=False).returncode != 0:
        _ns(pid, "iptables", "-w", "5", "-N", DROP_CHAIN)
    if _ns(pid, "iptables", "-w", "5", "-C", "INPUT", "-j", DROP_CHAIN, check=False).returncode != 0:
        _ns(pid, "iptables", "-w", "5", "-I", "INPUT", "1", "-j", DROP_CHAIN)
    _ns(pid, "iptables", "-w", "5", "-F", DROP_CHAIN)
    for src in sources:
        _ns(pid, "iptables", "-w", "5", "-A", DROP_CHAIN, "-s", src, "-j", "DROP")


def dropped_sources(container: str) -> list[str]:
    """The sources the node drops (lab status, tests)."""
    out = _ns(_pid(container), "iptables", "-w", "5", "-S", DROP_CHAIN, check=False).stdout
    return re.findall(r"-s (\S+?)(?:/32)? -j DROP", out)


def gateways(subnets: list[str]) -> list[str]:
    """This machine's address on each lab network (the bridge's, .1 of the subnet)."""
    import ipaddress

    return [str(next(ipaddress.ip_network(s).hosts())) for s in subnets]


def ensure_bastion(lab: str, k: int, tag: str, init: str, public_key: str, *, log=print) -> tuple[str, list[str]]:
    """(address, host key lines) of the lab's bastion, started when missing (a login for the admin and
    the lab's key, no sudo)."""
    from . import node_mac

    name = bastion_container(lab)
    address = bastion_address(k)
    state = podman("inspect", "--format", "{{.State.Status}}", name, check=False)
    if state.returncode == 0 and state.stdout.strip() != "running":
        podman("rm", "-f", "-t", "0", name)
    if state.returncode != 0 or state.stdout.strip() != "running":
        init_args, command = (["--systemd=always"], ["/sbin/init"]) if init == "systemd" else (["--init"],
                                                                                               ["sleep", "infinity"])
        podman("run", "-d", *init_args, "--name", name, "--hostname", "bastion",
               "--label", f"{LABEL}={lab}", "--label", f"{LABEL_ROLE}={BASTION_ROLE}",
               "--label", f"{LABEL_ADDRESS}={address}",
               "--network", f"{lab}:ip={address},mac={node_mac(address)},interface_name=eth0",
               "--no-hosts", "--dns", "none", "--cap-add", "AUDIT_WRITE", "--cap-add", "SYS_CHROOT",
               tag, *command)
        if init == "systemd":
            from . import wait_booted

            wait_booted([name], log=log)
        log(f"bastion {name} at {address}")
    setup_machine(name, "none", init, public_key, None)
    return address, boot_machine(name, init)
