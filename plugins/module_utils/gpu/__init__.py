# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""The accelerator hardware: GPU, driver, CUDA toolkit and NCCL facts (gpu), GPU health (gpu_health)
and the health of the RDMA fabric the GPUs talk over (fabric_health).
"""
