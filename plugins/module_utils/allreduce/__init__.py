# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""The all-reduce smoke test: the worker that runs on the nodes (allreduce_worker), the logic
that plans, reads and reports a run (allreduce_smoke), the busbw the hardware should give (bandwidth),
the cluster's own known-good figures (baseline) and the search for the bad node by pairs (isolation).
"""
