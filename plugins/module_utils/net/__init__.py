# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""The network as the kernel shows it: interfaces, routes, RDMA devices and the NCCL network
decision made from them (netinfo), and who listens on or holds a TCP port (ports).
"""
