"""Cached facts belong to one machine (issue 30): the identity probe and the verdict identity.yml acts on."""

from __future__ import annotations

import subprocess

from ansible_collections.provision.cluster.plugins.module_utils.common.machine import PROBE, machine_verdict, parse_identity


def test_probe_runs_under_sh_on_this_machine():
    out = subprocess.run(["sh", "-c", PROBE], capture_output=True, text=True, timeout=30, check=True).stdout
    ident = parse_identity(out)
    assert ident is not None, out
    boot_id = open("/proc/sys/kernel/random/boot_id").read().strip()
    assert ident["boot"].startswith(boot_id + "/") and ident["boot"].split("/")[1].isdigit()
    assert ident["release"].split()[0]


# what the probe printed on the lab's nodes (bookworm node without systemd, with machine-id written by
# `provision lab up`; the same node after a restart; a trixie node made under the same name)
BOOKWORM = ("machine_id=6c3e0b1c8f6d4d2a9e1f0a7b5c4d3e2f\nboot_id=0e0c6f7a-5b1d-4f7e-9d1c-2a3b4c5d6e7f\n"
            "init_start=4567\nrelease=debian 12\n")
RESTARTED = BOOKWORM.replace("init_start=4567", "init_start=9876")
TRIXIE = BOOKWORM.replace("release=debian 12", "release=debian 13")
OTHER_ID = BOOKWORM.replace("6c3e0b1c", "00000000")


def test_verdicts():
    cached = parse_identity(BOOKWORM)
    assert machine_verdict(parse_identity(BOOKWORM), cached) == "same"
    assert machine_verdict(parse_identity(RESTARTED), cached) == "rebooted"
    assert machine_verdict(parse_identity(TRIXIE), cached) == "other"
    assert machine_verdict(parse_identity(OTHER_ID), cached) == "other"
    assert machine_verdict(parse_identity(BOOKWORM), None) == "new"
    assert machine_verdict(None, cached) == "unknown"


def test_no_machine_id_still_tells_release_and_boot():
    bare = BOOKWORM.replace("machine_id=6c3e0b1c8f6d4d2a9e1f0a7b5c4d3e2f", "machine_id=")
    cached = parse_identity(bare)
    assert machine_verdict(parse_identity(bare), cached) == "same"
    assert machine_verdict(parse_identity(bare.replace("debian 12", "debian 11")), cached) == "other"


def test_not_the_probe():
    assert parse_identity("") is None
    assert parse_identity("sudo: a password is required\n") is None
    assert parse_identity("machine_id=\nboot_id=\ninit_start=\nrelease= \n") is None


def test_the_probe_tells_whether_the_cached_interpreter_is_still_there(tmp_path):
    """A venv removed, a Python upgraded in place: the same machine, but the interpreter its cached facts
    name is gone, and every module would fail on it. The path goes into the command quoted."""
    from ansible_collections.provision.cluster.plugins.module_utils.common.machine import interpreter_gone, probe

    here = tmp_path / "it's here" / "python3"
    here.parent.mkdir()
    here.write_text("#!/bin/sh\n")
    here.chmod(0o755)
    for path, gone in ((here, False), (tmp_path / "gone; touch pwned" / "python3", True)):
        out = subprocess.run(["sh", "-c", probe(str(path))], capture_output=True, text=True, timeout=30,
                             check=True, cwd=tmp_path).stdout
        assert parse_identity(out) == parse_identity(subprocess.run(["sh", "-c", PROBE], capture_output=True,
                                                                    text=True, check=True).stdout)
        assert interpreter_gone(out) is gone, out
    assert not (tmp_path / "pwned").exists()
    assert probe(None) == probe("") == PROBE and not interpreter_gone(PROBE)
    cached = parse_identity(BOOKWORM)
    assert machine_verdict(parse_identity(BOOKWORM), cached, True) == "other"
    assert machine_verdict(parse_identity(RESTARTED), cached, True) == "other"
    assert machine_verdict(parse_identity(BOOKWORM), None, True) == "new"
