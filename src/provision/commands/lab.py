"""`provision lab`: a local N-node lab of podman containers (src/provision/lab.py is the core)."""

from __future__ import annotations

import click

from provision import lab as lab_core
from provision.app import Application
from provision.commands._options import deprecated
from provision.exits import EXIT_USAGE
from provision.terminal import Terminal, make_table


class UsageError(click.UsageError):
    exit_code = EXIT_USAGE


def _lab_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """Every lab command's --name: one rule (lab_core.check_name), a usage error (exit 2) otherwise."""
    try:
        return lab_core.check_name(value)
    except lab_core.LabError as exc:
        raise UsageError(str(exc)) from None


@click.group("lab")
def command() -> None:
    """A local N-node lab of podman containers (nodes start bare, like fresh machines)."""


def _parse_node_options(values: tuple[str, ...]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for value in values:
        idx, sep, opts = value.partition(":")
        if not sep or not idx.isdigit():
            raise UsageError(f"--node-option must look like 2:--ulimit=memlock=64:64, got {value!r}")
        out.setdefault(int(idx), []).extend(opts.split())
    return out


@command.command("up")
@click.option("--nodes", "-n", default=lab_core.DEFAULT_NODES, show_default=True, type=int,
              help="Number of nodes.")
@click.option("--name", default=lab_core.DEFAULT_NAME, show_default=True, envvar="PROVISION_LAB_NAME", callback=_lab_name,
              help="Lab name (several labs can coexist).")
@click.option("--image", "flavour", default=None, type=click.Choice(sorted(lab_core.FLAVOURS)), envvar="PROVISION_LAB_IMAGE",
              help="Node image flavour: full (default; gcc, pdsh, venv, iproute2 in the image), minimal "
                   "(no iproute2), bare (only what a fresh minimal server image has: python3, apt, and "
                   "openssh-server with --init systemd; no gcc, pdsh, python3-venv, iperf3, iproute2; the mirror "
                   "is always on).")
@click.option("--os", "releases", default=lab_core.SUITE, show_default=True, metavar="RELEASE[,RELEASE...]",
              envvar="PROVISION_LAB_OS",
              help=f"Debian release of every node, or one per node ({', '.join(lab_core.RELEASES)}), "
                   "e.g. --nodes 3 --os bullseye,bookworm,trixie.")
@click.option("--init", "init", default="none", show_default=True, type=click.Choice(lab_core.INITS),
              envvar="PROVISION_LAB_INIT",
              help="none: catatonit is PID 1 and sshd is not running (a container); systemd: systemd is "
                   "PID 1 and runs openssh-server on port 22 (a VM).")
@click.option("--bare", is_flag=True, envvar="PROVISION_LAB_BARE", hidden=True,
              help="Deprecated spelling of --image bare.")
@click.option("--mirror", is_flag=True, envvar="PROVISION_LAB_MIRROR",
              help="Serve a package mirror in the lab (always on with --image bare): the .debs the roles may "
                   "install, fetched once per release into ~/.cache/provision/mirror; the inventory "
                   "gives its URL as cluster_package_mirror.")
@click.option("--slurm", is_flag=True, envvar="PROVISION_LAB_SLURM",
              help="A real SLURM in the lab: Debian's munge and slurm-wlm from the lab mirror, slurmctld on "
                   "node1, slurmd on every node, partition 'lab' of all nodes (implies --mirror).")
@click.option("--shm-size", default="1g", show_default=True, help="/dev/shm size of every node.")
@click.option("--node-option", "node_options", multiple=True, metavar="I:OPTS",
              help="Extra podman run options for node I, e.g. '2:--ulimit=memlock=65536:65536'.")
@click.option("--root-password-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Root password login only (first-contact tests): sshd started on the cluster's sshd_port (no init), or "
                   "the systemd node's own sshd on 22 (--init systemd).")
@click.option("--login", "login", default=None, type=click.Choice(["root", "sudo", "sudo-password"]),
              envvar="PROVISION_LAB_LOGIN",
              help="How Ansible logs in. root (default): as root (podman until sshd runs, then ssh). sudo: as the "
                   "admin 'ops' over ssh on port 22 with passwordless sudo (a cloud VM); sudo-password: ops's sudo "
                   "asks for a password (--sudo-password-file; an HPC site). Both refuse root over SSH and have a "
                   "training user 'trainer' (uid 2001 on every node), the lab inventory's cluster_user.")
@click.option("--sudo-password-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="With --login sudo-password: the admin's password (first line), set at the nodes' console.")
@click.option("--bastion", is_flag=True, envvar="PROVISION_LAB_BASTION",
              help="Put the nodes behind a bastion container: this machine reaches them only through it "
                   "(ProxyJump; implies --login sudo unless --login says otherwise).")
@click.option("--from", "snapshot", default=None, metavar="SNAPSHOT",
              help="Re-create the lab's nodes from a snapshot (`provision lab save`): the nodes as they were when "
                   "saved, at the same addresses; the snapshot sets the nodes, images and options (--mirror "
                   "may be added).")
@click.option("--json", "json_mode", is_flag=True, help="Print the lab status as JSON.")
@click.pass_context
def lab_up(ctx: click.Context, nodes: int, name: str, flavour: str | None, releases: str, init: str, bare: bool,
           mirror: bool, slurm: bool, shm_size: str, node_options: tuple[str, ...], root_password_file: str | None,
           login: str | None, sudo_password_file: str | None, bastion: bool, snapshot: str | None,
           json_mode: bool) -> None:
    """Bring up (or keep) a lab of N nodes; a second `up` is a fast no-op."""
    term = Application(json_mode=json_mode)
    if snapshot:
        given = [f"--{p.replace('_', '-')}" for p in ("nodes", "flavour", "releases", "init", "bare", "slurm",
                                                       "shm_size", "node_options", "root_password_file", "login",
                                                       "sudo_password_file", "bastion")
                 if ctx.get_parameter_source(p) == click.core.ParameterSource.COMMANDLINE]
        if given:
            raise UsageError(f"--from {snapshot} sets the nodes and their options; drop {', '.join(given)}")
        from provision.lab import snapshot as snapshot_mod

        with term.guard():
            state = snapshot_mod.restore(name, snapshot, mirror=mirror, log=term.info)
        _print_status(term, state, json_mode)
        return
    if bare and flavour not in (None, "bare"):
        raise UsageError(f"--bare and --image {flavour} contradict each other; give one of them")
    if bare and ctx.get_parameter_source("bare") == click.core.ParameterSource.COMMANDLINE:
        deprecated("lab up --bare", "lab up --image bare")
    password = None
    if root_password_file:
        password = open(root_password_file, encoding="utf-8").read().strip()
    login = login or ("sudo" if bastion else "root")
    if login != "root" and root_password_file:
        raise UsageError(f"--root-password-file opens root password login; --login {login} refuses root over SSH")
    sudo_password = None
    if sudo_password_file:
        from provision import ansible

        try:  # yours, 0600, not a link: as every password file
            sudo_password = ansible.read_become_password_file(sudo_password_file)
        except ansible.AnsibleError as exc:
            raise UsageError(str(exc).replace("--become-password-file", "--sudo-password-file")) from None
    spec = lab_core.LabSpec(name=name, nodes=nodes, flavour="bare" if bare else (flavour or "full"),
                            shm_size=shm_size, node_options=_parse_node_options(node_options),
                            password=password, init=init, mirror=mirror, slurm=slurm,
                            os=tuple(r.strip() for r in releases.split(",") if r.strip()) or (lab_core.SUITE,),
                            login=login, sudo_password=sudo_password, bastion=bastion)
    with term.guard():
        state = lab_core.up(spec, log=term.info)
    _print_status(term, state, json_mode)
    if not json_mode:
        from provision.paths import content_root

        term.info(f"inventory: {content_root() / 'inventory' / 'lab'}"
                  + ("" if name == lab_core.DEFAULT_NAME else f"  (with PROVISION_LAB_NAME={name})"))


@command.command("status")
@click.option("--name", default=lab_core.DEFAULT_NAME, show_default=True, envvar="PROVISION_LAB_NAME", callback=_lab_name)
@click.option("--json", "json_mode", is_flag=True, help="Machine-readable output.")
def lab_status(name: str, json_mode: bool) -> None:
    """Show each node's name, container, addresses and state."""
    term = Application(json_mode=json_mode)
    with term.guard():
        state = lab_core.status(name)
    _print_status(term, state, json_mode)
    if not state["up"]:
        term.done(False)


@command.command("down")
@click.option("--name", default=lab_core.DEFAULT_NAME, show_default=True, envvar="PROVISION_LAB_NAME", callback=_lab_name)
def lab_down(name: str) -> None:
    """Remove every container and network of this lab, and nothing else."""
    term = Application()
    with term.guard():
        removed = lab_core.down(name, log=lambda _m: None)
    term.info(f"lab {name}: removed {len(removed['containers'])} container(s), "
              f"{len(removed['networks'])} network(s)")


@command.command("save")
@click.argument("snapshot")
@click.option("--name", default=lab_core.DEFAULT_NAME, show_default=True, envvar="PROVISION_LAB_NAME", callback=_lab_name)
def lab_save(snapshot: str, name: str) -> None:
    """Save the lab's running nodes as SNAPSHOT (podman commit); `lab up --from SNAPSHOT` brings them back."""
    from provision.lab import snapshot as snapshot_mod

    term = Application()
    with term.guard():
        snapshot_mod.save(name, snapshot, log=term.info)


@command.command("snapshots")
@click.option("--json", "json_mode", is_flag=True, help="Machine-readable output.")
def lab_snapshots(json_mode: bool) -> None:
    """List the saved snapshots."""
    from provision.lab import snapshot as snapshot_mod

    term = Application(json_mode=json_mode)
    with term.guard():
        found = snapshot_mod.listing()
    if json_mode:
        term.emit_json({"snapshots": [dict(s, nodes=len(s["nodes"])) for s in found]})
        return
    table = make_table("lab snapshots", ["snapshot", "from lab", "nodes", "network", "saved"])
    # whole names: they are what `lab up --from` takes (a narrow terminal wraps the other columns)
    for column, values in ((0, [s["snapshot"] for s in found]), (4, [s["created"] for s in found])):
        table.columns[column].no_wrap = True
        table.columns[column].min_width = max(map(len, values), default=0)
    for s in found:
        table.add_row(s["snapshot"], s["lab"], str(len(s["nodes"])), f"10.89.{s['subnet']}.0/24", s["created"])
    term.table(table)


@command.command("forget")
@click.argument("snapshot")
def lab_forget(snapshot: str) -> None:
    """Remove a snapshot's images and record."""
    from provision.lab import snapshot as snapshot_mod

    term = Application()
    with term.guard():
        if not snapshot_mod.forget(snapshot, log=term.info):
            term.info(f"no snapshot {snapshot}")


@command.command("fault")
@click.argument("target", nargs=-1, required=True, metavar="NODE")
@click.option("--name", default=lab_core.DEFAULT_NAME, show_default=True, envvar="PROVISION_LAB_NAME", callback=_lab_name,
              help="The lab.")
@click.option("--rate", default=None, metavar="RATE", help="Limit the node's cluster link, e.g. 100mbit (tc tbf).")
@click.option("--delay", default=None, metavar="TIME", help="Delay each packet on the cluster link, e.g. 5ms.")
@click.option("--loss", default=None, metavar="PCT", help="Drop this share of the cluster link's packets, e.g. 1%.")
@click.option("--mtu", default=None, type=int, help="Set the node's cluster interface MTU (the others keep theirs).")
@click.option("--freeze", is_flag=True, help="Freeze every process of the node (podman pause).")
@click.option("--thaw", is_flag=True, help="Thaw a frozen node (podman unpause).")
@click.option("--clear", is_flag=True, help="Remove every fault of the node (and thaw it).")
@click.option("--direction", default="both", show_default=True, type=click.Choice(["both", "out", "in"]),
              help="Which traffic --rate/--delay/--loss apply to: what the node sends (out), receives (in), or both.")
def lab_fault(target: tuple[str, ...], name: str, rate: str | None, delay: str | None, loss: str | None,
              mtu: int | None, freeze: bool, thaw: bool, clear: bool, direction: str) -> None:
    """Degrade one node from the controller (the node is not told): `provision lab fault node2 --name LAB --rate 100mbit`."""
    term = Application()
    if len(target) > 2:
        raise UsageError("give one node: provision lab fault NODE --name LAB --rate 100mbit")
    lab, node = (target[0], target[1]) if len(target) == 2 else (name, target[0])
    if len(target) == 2:  # the older spelling `lab fault LAB NODE`
        deprecated("lab fault LAB NODE", "lab fault NODE --name LAB")
    _lab_name(click.get_current_context(), None, lab)
    if freeze and thaw:
        raise UsageError("--freeze and --thaw contradict each other; give one of them")
    with term.guard():
        lab_core.fault(lab, node, rate=rate, delay=delay, loss=loss, mtu=mtu, freeze=freeze, thaw=thaw,
                       clear=clear, direction=direction, log=term.info)


@command.command("setup")
def lab_setup() -> None:
    """Install what the lab needs on this (Debian-family) machine: podman, runc, mmdebstrap, containers.podman."""
    from provision import deps

    term = Application()
    with term.guard():
        done = lab_core.setup_host(log=term.info)
        done += [f"installed the collection {n}" for n in deps.ensure_collections(log=term.info, lab=True)]
    term.info("; ".join(done) if done else "nothing to do: podman, runc, mmdebstrap and "
              "containers.conf are in place")


def _print_status(term: Terminal, state: dict, json_mode: bool) -> None:
    if json_mode:
        term.emit_json(state)
        return
    # the container is NAME-<node> (in --json); the columns fit 80 characters
    table = make_table(f"lab {state['lab']}", ["node", "cluster (eth1)", "side (eth0)", "os", "init", "image",
                                              "state"])
    for node in state["nodes"]:
        table.add_row(node["name"], node["address"], node["side_address"], node["os"], node["init"],
                      node["flavour"], node["state"])
    term.table(table)
    for node in state["nodes"]:
        if node.get("faults"):
            term.info(f"{node['name']}: fault " + ", ".join(
                "frozen" if k == "frozen" else f"{k} {v}" + (f" ({node['faults'][k + '_direction']})"
                                                            if k + "_direction" in node["faults"] else "")
                for k, v in node["faults"].items() if not k.endswith("_direction")))
    if state.get("login") and state["login"].get("login", "root") != "root":
        lg = state["login"]
        term.info(f"login: {lg['admin']} ({lg['login']}) over ssh, key {lg['key']}; training user {lg['trainer']}"
                  + (f"; bastion {lg['bastion']['address']} ({lg['bastion']['state']})" if lg.get("bastion") else ""))
    if state.get("slurm"):
        sl = state["slurm"]
        term.info(f"SLURM: slurmctld on {sl['controller']}, partition {sl['partition']} of {', '.join(sl['nodes'])}")
    server = state.get("mirror")
    if server:
        sizes = ", ".join(f"{r} {m['debs'] or 0} debs {(m['bytes'] or 0) / 1e6:.0f} MB (built in {m['seconds'] or 0:.0f} s)"
                          for r, m in server["releases"].items())
        term.info(f"package mirror ({server['state']}): {server['url']}/<release>/ flat; {sizes}")
    if not state["nodes"]:
        term.info(f"lab {state['lab']} is down: `provision lab up --name {state['lab']}`")
