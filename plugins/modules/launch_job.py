#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
module: launch_job
short_description: Start, poll or stop one node's part of a training job (used by provision launch)
description:
  - C(state=started) starts O(argv) detached in its own session, output (stdout and stderr) into
    C(RUNS_DIR/RUN_ID/out.log), exit status into C(RUNS_DIR/RUN_ID/rc) when it ends.
  - C(state=polled) returns the output written since O(offset), waiting at most O(wait) seconds
    for new output or the end of the job, and the exit status once it ended.
  - C(state=stopped) sends SIGTERM to the job's process group, SIGKILL after O(grace) seconds.
  - C(provision launch) drives this module through C(playbooks/launch.yml); it never opens its own
    SSH connections.
options:
  run_id:
    description: Name of the run (a directory name under O(runs_dir)).
    type: str
    required: true
  state:
    description: What to do.
    type: str
    choices: [started, polled, stopped]
    default: polled
  argv:
    description: The command (argv list) for C(state=started); C(~) / C(~user) in the first item is expanded.
    type: list
    elements: str
  chdir:
    description: Working directory of the command (default the user's home).
    type: path
  env:
    description: Extra environment variables of the command.
    type: dict
    default: {}
  runs_dir:
    description: Where runs are kept (C(~) expanded on the node).
    type: path
    default: ~/.provision/launch/runs
  offset:
    description: Byte offset in the log already seen (C(state=polled)).
    type: int
    default: 0
  wait:
    description: Seconds to wait for new output or the end of the job (C(state=polled)).
    type: float
    default: 0
  grace:
    description: Seconds between SIGTERM and SIGKILL (C(state=stopped)).
    type: float
    default: 5
author: provision developers (!UNKNOWN)
extends_documentation_fragment: [provision.cluster.attributes]
attributes:
  check_mode:
    support: partial
    details: C(state=polled) runs (it only reads); C(started) and C(stopped) are skipped and report no change.
  diff_mode:
    support: none
"""

EXAMPLES = r"""
- name: Start the job
  provision.cluster.launch_job:
    run_id: "20260101-120000-ab12"
    state: started
    argv: ["/root/.provision/launch/torchrun-c10d.sh", "train.py"]
"""

RETURN = r"""
output:
  description: Output since O(offset) (state=polled).
  returned: when state is polled
  type: str
offset:
  description: Offset to pass to the next poll.
  returned: when state is polled
  type: int
running:
  description: Whether the job is still running.
  returned: when state is polled
  type: bool
exit_status:
  description: Exit status of the command once it ended (-1 when killed without status), else null.
  returned: when state is polled
  type: int
pid:
  description: Process id (session leader) of the started job.
  returned: when state is started
  type: int
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.provision.cluster.plugins.module_utils.common.launch import poll_job, start_job, stop_job
from ansible_collections.provision.cluster.plugins.module_utils.common.spawn import home_path


def main():
    module = AnsibleModule(
        argument_spec=dict(
            run_id=dict(type="str", required=True),
            state=dict(type="str", choices=["started", "polled", "stopped"], default="polled"),
            argv=dict(type="list", elements="str"),
            chdir=dict(type="path"),
            env=dict(type="dict", default={}),
            runs_dir=dict(type="path", default="~/.provision/launch/runs"),
            offset=dict(type="int", default=0),
            wait=dict(type="float", default=0),
            grace=dict(type="float", default=5),
        ),
        required_if=[("state", "started", ["argv"])],
        supports_check_mode=True,
    )
    p = module.params
    try:
        if p["state"] == "polled":
            module.exit_json(changed=False, **poll_job(p["runs_dir"], p["run_id"], p["offset"], p["wait"]))
        if module.check_mode:
            module.exit_json(changed=False, skipped=True, msg="check mode: nothing started or stopped")
        if p["state"] == "started":
            env = {k: str(v) for k, v in p["env"].items()}
            argv = [home_path(p["argv"][0])] + p["argv"][1:]
            if "/" in argv[0] and not os.access(argv[0], os.X_OK):
                module.fail_json(msg="%s is missing or not executable: run the launchers stage first "
                                     "(ansible-playbook site.yml -i INVENTORY --tags launchers)" % argv[0])
            result = start_job(p["runs_dir"], p["run_id"], argv, p["chdir"], env)
            module.exit_json(changed=True, **result)
        module.exit_json(changed=stop_job(p["runs_dir"], p["run_id"], p["grace"]))
    except (OSError, ValueError) as exc:
        module.fail_json(msg="launch_job %s %s: %s" % (p["state"], p["run_id"], exc))


if __name__ == "__main__":
    main()
