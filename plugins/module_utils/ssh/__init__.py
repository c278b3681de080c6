# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Reaching the nodes and the SSH fabric between them: sshd decisions (sshd), the managed keys,
known_hosts, ssh_config and ssh error classes (ssh_mesh, known_hosts), the landing check (landing), the
ring audit of the mesh (mesh_audit), pdsh output (pdsh) and privilege escalation failures (become).
"""
