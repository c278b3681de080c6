# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""What `provision verify` and `provision diagnose` are built on: the Check record (checks), the check
catalog (catalog), the cluster-wide consistency check (consistency), the verify document (verify_report),
the health timer's decisions (health_timer) and the mapping of failed-job log lines to causes (diagnose).
"""
