"""A minimal ssh mesh for the node_runtime integration tests (until the ssh_mesh role is on main).

Real sshd on 2222 in every node, a key pair per node made on that node, every public key in
every authorized_keys, known_hosts from the nodes' real host keys (read through podman, never
accept-new), and an ~/.ssh/config entry per node name. All through `podman exec`.
"""

from __future__ import annotations

from helpers import node_exec


def build_mesh(lab: str, nodes: dict[str, str], port: int = 2222) -> None:
    """nodes: {name: cluster address}, node i is f"{lab}-node{i}" for name node<i>."""
    idx = {name: int(name.removeprefix("node")) for name in nodes}
    pubs, hostkeys = {}, {}
    for name, i in idx.items():
        node_exec(lab, i, f"ssh-keygen -A >/dev/null; mkdir -p /run/sshd /root/.ssh; chmod 700 /root/.ssh; "
                          f"test -f /root/.ssh/id_ed25519 || ssh-keygen -q -t ed25519 -N '' -f /root/.ssh/id_ed25519; "
                          f"(test -s /run/sshd.pid && kill -0 $(cat /run/sshd.pid) 2>/dev/null) || /usr/sbin/sshd -p {port}")
        pubs[name] = node_exec(lab, i, "cat /root/.ssh/id_ed25519.pub").stdout.strip()
        hostkeys[name] = node_exec(lab, i, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[:2]
    auth = "\n".join(pubs.values()) + "\n"
    known = "".join(f"[{addr}]:{port},[{name}]:{port} {' '.join(hostkeys[name])}\n" for name, addr in nodes.items())
    config = "".join(f"Host {name}\n  HostName {addr}\n  Port {port}\n  User root\n"
                     f"  IdentityFile /root/.ssh/id_ed25519\n" for name, addr in nodes.items())
    for i in idx.values():
        node_exec(lab, i, f"cat > /root/.ssh/authorized_keys <<'E'\n{auth}E\n"
                          f"cat > /root/.ssh/known_hosts <<'E'\n{known}E\n"
                          f"cat > /root/.ssh/config <<'E'\n{config}E\n"
                          "chmod 600 /root/.ssh/authorized_keys /root/.ssh/known_hosts /root/.ssh/config")
