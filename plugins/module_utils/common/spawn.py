# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Two things modules do that AnsibleModule has no helper for.

- start_process: a process that must outlive the module's wait (the all-reduce supervisor, started
  detached; the background load of the GPU health check; sshd on a node without an init system).
  AnsibleModule.run_command always waits for the command to end.
- home_path: a path that names another user's home (C(~user/...)), e.g. the cluster user's
  ~/.deepspeed_env, or a launcher's program; an option of type path would expand it the same way,
  but these values are list items or defaults computed in the module.
"""

from __future__ import annotations

import os
import subprocess


def start_process(argv, **kwargs):
    """subprocess.Popen(argv, **kwargs), returned to the caller, who owns the process."""
    return subprocess.Popen(argv, **kwargs)  # pylint: disable=consider-using-with


def home_path(path):
    """`path` with a leading ~ or ~user expanded (unchanged when that user does not exist)."""
    return os.path.expanduser(path)
