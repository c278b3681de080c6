# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""What every stage shares: the cluster plan and the settings' defaults (cluster_plan, settings), files
and processes on the node (files, procs, spawn, users, launch), what a node is (node_facts, machine,
limits, sizes), the shell environment (bashrc, shell_env_check), the Python environment and toolchain
(python_env, gcc) and scheduler node lists (nodelist).
"""
