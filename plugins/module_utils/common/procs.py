# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Running a node's tools with a bound: what the read-only facts modules (gpu_facts,
gpu_health_info, fabric_health_info) share. Plain Python, no Ansible import."""

from __future__ import annotations

import subprocess


def run_bounded(argv, timeout):
    """(rc, stdout, stderr) of argv; rc 124 when it did not answer within timeout seconds, 127 when
    it could not be started (never raises: a hung nvidia-smi must not hang the check)."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return 124, "", "%s did not answer within %ss" % (argv[0], timeout)
    except OSError as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


def first_line(*texts):
    """The first non-empty line of the first text that has one, stripped ('' when none has)."""
    for text in texts:
        for line in (text or "").splitlines():
            if line.strip():
                return line.strip()
    return ""
