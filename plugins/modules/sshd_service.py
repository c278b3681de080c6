#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: sshd_service
short_description: sshd on the cluster port, with or without systemd, config validated first
description:
  - Makes sure the host keys exist (C(ssh-keygen -A) when one is missing) and the
    privilege-separation directory too.
  - Writes the drop-in O(path) with O(content) only when it differs. The new file is first checked
    alone with C(sshd -t -f), then the whole configuration with C(sshd -t); if that fails the old
    drop-in is put back and the module fails with sshd's message.
  - Reads the effective configuration (C(sshd -T)) and fails when the ports asked for are not in
    it (drop-in not included), warns when a setting of O(expect) is overridden by another file.
  - C(direct) mode (no systemd, e.g. containers) finds the sshd that listens on O(ports) from
    C(/proc) (see M(provision.cluster.port_facts)); starts C(sshd) detached in its own session so it
    outlives the play; restarts it only when the effective configuration changed since it was
    started (digest kept in O(state_file)) or when it runs with another configuration; fails with
    the holder's pid and name when another program holds a port.
  - C(systemd) mode enables/starts the unit, reloads it when the configuration changed; on
    distributions where C(ssh.socket) starts sshd, runs C(daemon-reload) and restarts the socket.
  - Waits at most O(timeout) seconds for sshd to listen on every port.
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
options:
  ports:
    description: The ports sshd must listen on (they must be in O(content) as C(Port) lines).
    type: list
    elements: int
    required: true
  path:
    description: The drop-in file we own.
    type: path
    default: /etc/ssh/sshd_config.d/10-provision.conf
  content:
    description: Content of the drop-in (the role renders C(templates/sshd_provision.conf.j2)). Omit to leave it alone.
    type: str
  main_config:
    description: The sshd_config that includes O(path).
    type: path
    default: /etc/ssh/sshd_config
  mode:
    description: C(auto) picks C(systemd) when C(/run/systemd/system) exists, else C(direct).
    type: str
    choices: [auto, systemd, direct]
    default: auto
  service:
    description: The systemd unit; C(auto) takes C(ssh) when it exists (Debian/Ubuntu), else C(sshd).
    type: str
    default: auto
  expect:
    description: Effective settings (C(sshd -T) keywords) we set and want to win, e.g. C(passwordauthentication=no).
    type: dict
    default: {}
  state_file:
    description: Where the digest of the configuration sshd was started with is kept.
    type: path
    default: /run/provision-sshd.json
  keep_default_port:
    description:
      - On a host whose sshd systemd runs (O(mode=systemd), a VM or bare metal), keep port 22 when no other
        configuration file sets a C(Port). The drop-in's C(Port) lines would otherwise replace sshd's default,
        and the cluster port must come beside 22, not instead of it. Not done in containers without systemd
        (O(mode=direct)), where 22 often belongs to the host.
    type: bool
    default: true
  pam_file:
    description:
      - C(direct) mode only. In it C(pam_loginuid) is made C(optional) - an sshd started from an
        SSH session inherits its loginuid, and in a container (no CAP_AUDIT_CONTROL) a
        C(required) pam_loginuid then ends every non-root session with exit 254.
    type: path
    default: /etc/pam.d/sshd
  timeout:
    description: Seconds to wait for sshd to listen (and for an old one to exit).
    type: int
    default: 15
extends_documentation_fragment: [provision.cluster.attributes]
attributes:
  check_mode:
    support: full
    details: No host key, drop-in, PAM file or state file is written and sshd is neither started nor reloaded.
  diff_mode:
    support: partial
    details: The drop-in (O(content)); host keys, the PAM file and a restart or reload show only as a change.
"""

EXAMPLES = r"""
- name: sshd on 2222, key-only
  provision.cluster.sshd_service:
    ports: [2222]
    content: "{{ lookup('ansible.builtin.template', 'sshd_provision.conf.j2') }}"
    expect: {passwordauthentication: "no"}
"""

RETURN = r"""
found: {description: sshd is installed; when false nothing else was done., returned: always, type: bool}
mode: {description: C(direct) or C(systemd)., returned: always, type: str, sample: direct}
action:
  description: What was done to the daemon (none, start, restart, reload, blocked).
  returned: always
  type: str
  sample: none
reason: {description: "Why, in one line.", returned: always, type: str, sample: configuration changed}
pids: {description: Pids of the sshd listening on the ports afterwards., returned: always, type: list, elements: int}
host_keys_generated: {description: C(ssh-keygen -A) ran., returned: always, type: bool}
config_changed: {description: The drop-in was (or would be) rewritten., returned: always, type: bool}
ports:
  description: Port reports after the change (as M(provision.cluster.port_facts) returns them).
  returned: always
  type: list
  elements: dict
checks:
  description: One check per port, C(sshd listening on PORT), shape of C(provision verify).
  returned: always
  type: list
  elements: dict
"""

import glob
import json
import os
import signal
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.common.files import FileWriter, read_text
from ansible_collections.provision.cluster.plugins.module_utils.net.ports import port_facts
from ansible_collections.provision.cluster.plugins.module_utils.common.spawn import start_process
from ansible_collections.provision.cluster.plugins.module_utils.ssh.sshd import (
    config_digest,
    configured_ports,
    effective_problems,
    include_patterns,
    pam_loginuid_optional,
    parse_sshd_T,
    plan_direct,
    plan_systemd,
    with_port_lines,
)

HOST_KEYS = ("rsa", "ecdsa", "ed25519")
SSHD_NAMES = ("sshd",)


def _wait(predicate, timeout, step=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


class Sshd:
    def __init__(self, module):
        self.m = module
        self.p = module.params
        self.sshd = module.get_bin_path("sshd", opt_dirs=["/usr/sbin", "/sbin"])

    def run(self, argv, check=True):
        rc, out, err = self.m.run_command(argv)
        if check and rc != 0:
            self.m.fail_json(msg="`%s` failed: %s" % (" ".join(argv), (err or out).strip()))
        return rc, out, err

    def prepare(self):
        generated = False
        missing = [t for t in HOST_KEYS if not os.path.exists("/etc/ssh/ssh_host_%s_key" % t)]
        if missing and not self.m.check_mode:
            self.run([self.m.get_bin_path("ssh-keygen", required=True), "-A"])
        generated = bool(missing)
        if not os.path.isdir("/run/sshd") and os.path.isdir("/run") and not self.m.check_mode:
            os.makedirs("/run/sshd", 0o755, exist_ok=True)
        return generated

    def write_dropin(self):
        content = self.p["content"]
        path = self.p["path"]
        if content is None:
            return False, None
        if not content.endswith("\n"):
            content += "\n"
        old = read_text(path)
        w = FileWriter(self.m)

        def valid(tmp):
            rc, out, err = self.run([self.sshd, "-t", "-f", tmp], check=False)
            if rc != 0:
                raise ValueError("the new sshd drop-in is invalid (%s): %s" % (path, (err or out).strip()))

        try:
            if not w.write(path, content, mode=0o644, new_only=True, validate=valid, dir_mode=0o755):
                return False, None
        except ValueError as exc:
            self.m.fail_json(msg=str(exc))
        if self.m.check_mode:
            return True, w.diffs[0]
        rc, out, err = self.run([self.sshd, "-t", "-f", self.p["main_config"]], check=False)
        if rc != 0:
            restore = FileWriter(self.m)
            if old is None:
                restore.remove(path)
            else:
                restore.write(path, old)
            self.m.fail_json(msg="sshd -t rejects %s with the new drop-in, old one restored: %s"
                             % (self.p["main_config"], (err or out).strip()))
        return True, w.diffs[0]

    def effective(self):
        rc, out, err = self.run([self.sshd, "-T", "-f", self.p["main_config"]], check=False)
        if rc != 0:
            if self.m.check_mode:
                return "", {}
            self.m.fail_json(msg="sshd -T failed: %s" % (err or out).strip())
        return out, parse_sshd_T(out)

    def reports(self):
        return port_facts(self.p["ports"])

    def listening(self):
        reports = self.reports()
        ok = all(r["listening"] and any(p["name"] in SSHD_NAMES for p in r["processes"]) for r in reports)
        return ok

    def stop(self, pids):
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

        def gone():
            return all(not os.path.exists("/proc/%d" % pid) or _zombie(pid) for pid in pids)

        if not _wait(gone, self.p["timeout"]):
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            _wait(gone, 5)

    def start_direct(self):
        # sshd daemonizes itself (fork + setsid); a new session on top keeps it out of the
        # process group of the podman exec / ssh session that runs this module.
        with open(os.devnull, "rb") as null_in, open(os.devnull, "wb") as null_out:
            proc = start_process([self.sshd, "-f", self.p["main_config"]], stdin=null_in, stdout=null_out,
                                 stderr=subprocess.PIPE, close_fds=True, start_new_session=True)
            try:
                _unused, err = proc.communicate(timeout=self.p["timeout"])
            except subprocess.TimeoutExpired:
                proc.kill()
                self.m.fail_json(msg="sshd did not detach within %ds" % self.p["timeout"])
        if proc.returncode != 0:
            self.m.fail_json(msg="sshd failed to start: %s" % err.decode(errors="replace").strip())


def _zombie(pid):
    stat = read_text("/proc/%d/stat" % pid, "")
    return ") Z " in stat


def main():
    module = AnsibleModule(
        argument_spec=dict(
            ports=dict(type="list", elements="int", required=True),
            path=dict(type="path", default="/etc/ssh/sshd_config.d/10-provision.conf"),
            content=dict(type="str"),
            main_config=dict(type="path", default="/etc/ssh/sshd_config"),
            mode=dict(type="str", choices=["auto", "systemd", "direct"], default="auto"),
            service=dict(type="str", default="auto"),
            expect=dict(type="dict", default={}),
            state_file=dict(type="path", default="/run/provision-sshd.json"),
            timeout=dict(type="int", default=15),
            pam_file=dict(type="path", default="/etc/pam.d/sshd"),
            keep_default_port=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    s = Sshd(module)
    if s.sshd is None:
        # the role installs the package and calls us again (no apt/dnf work on a re-run)
        module.exit_json(changed=False, found=False, action="none", reason="sshd is not installed",
                         mode=p["mode"], pids=[], ports=[], checks=[], host_keys_generated=False,
                         config_changed=False)
    mode = p["mode"]
    if mode == "auto":
        mode = "systemd" if os.path.isdir("/run/systemd/system") else "direct"
    if mode == "systemd" and p["keep_default_port"] and p["content"] is not None:
        # the host's own sshd (a VM, bare metal): our Port lines would replace its default 22 when no
        # other file sets a Port; keep it, so the cluster port is added beside it
        main_text = read_text(p["main_config"]) or ""
        others = [main_text] + [read_text(f) for pat in include_patterns(main_text) for f in sorted(glob.glob(pat))
                                if os.path.abspath(f) != os.path.abspath(p["path"])]
        if not configured_ports(others):
            p["content"] = with_port_lines(p["content"], [22])
            p["ports"] = sorted(set(p["ports"]) | {22})
    generated = s.prepare()
    config_changed, diff = s.write_dropin()
    text, effective = s.effective()
    digest = config_digest(text)
    warnings = []
    # in check mode a changed drop-in was not written: sshd -T shows the old configuration
    if effective and not (module.check_mode and config_changed):
        problems = effective_problems(effective, p["ports"], p["expect"])
        if problems and problems[0].startswith("effective config does not listen"):
            module.fail_json(msg=problems[0])
        warnings += problems
    try:
        state = json.loads(read_text(p["state_file"]) or "{}")
    except ValueError:
        state = {}
    result = dict(mode=mode, host_keys_generated=generated, config_changed=config_changed,
                  changed=generated or config_changed)
    if diff:
        result["diff"] = diff
    checks_ok = True
    if mode == "direct":
        pam = read_text(p["pam_file"])
        new_pam = pam_loginuid_optional(pam) if pam else None
        if new_pam is not None:
            result["changed"] = result["pam_loginuid_optional"] = True
            FileWriter(module).write(p["pam_file"], new_pam)
        plan = plan_direct(s.reports(), state, digest, SSHD_NAMES)
        if config_changed and plan["action"] == "none":
            plan = dict(plan, action="restart", reason="configuration changed")
        if plan["action"] == "blocked":
            module.fail_json(msg="cannot start sshd: %s; free the port or set sshd_port" % plan["reason"],
                             **result)
        if plan["action"] != "none":
            result["changed"] = True
            if not module.check_mode:
                s.stop(plan["kill"])
                s.start_direct()
                checks_ok = _wait(s.listening, p["timeout"])
    else:
        unit = p["service"]
        if unit == "auto":
            rc, out, _unused = s.run(["systemctl", "show", "-p", "LoadState", "--value", "ssh.service"], check=False)
            unit = "ssh" if out.strip() == "loaded" else "sshd"
        active = s.run(["systemctl", "is-active", unit], check=False)[0] == 0
        enabled = s.run(["systemctl", "is-enabled", unit], check=False)[0] == 0
        sock = s.run(["systemctl", "is-active", "ssh.socket"], check=False)[0] == 0
        cmds = plan_systemd(unit, active, enabled, sock, config_changed or state.get("digest") != digest)
        plan = {"action": "reload" if cmds else "none", "reason": "; ".join(" ".join(c[1:]) for c in cmds)
                or "running with the current configuration"}
        if cmds:
            result["changed"] = True
            if not module.check_mode:
                for argv in cmds:
                    s.run(argv)
                checks_ok = _wait(s.listening, p["timeout"])
    reports = s.reports()
    pids = sorted({pr["pid"] for r in reports for pr in r["processes"] if pr["name"] in SSHD_NAMES})
    if plan["action"] != "none" and not module.check_mode:
        if not checks_ok:
            module.fail_json(msg="sshd does not listen on %s after %ds: %s" % (
                ", ".join(map(str, p["ports"])), p["timeout"], "; ".join(r["summary"] for r in reports)),
                **result)
        FileWriter(module).write(p["state_file"], json.dumps({"pid": pids[0] if pids else None, "digest": digest,
                                                             "mode": mode}))
    checks = [{"check": "sshd listening on %d" % r["port"],
               "status": "pass" if r["listening"] and any(x["name"] in SSHD_NAMES for x in r["processes"])
               else ("warn" if module.check_mode else "fail"),
               "detail": r["summary"], "fix": "" if r["listening"] else "run the sshd stage"}
              for r in reports]
    for w in warnings:
        module.warn(w)
    module.exit_json(found=True, action=plan["action"], reason=plan["reason"], pids=pids, ports=reports,
                     checks=checks, **result)


if __name__ == "__main__":
    main()
