"""Byte sizes (plugins/module_utils/common/sizes.py), as node_runtime and the all-reduce smoke test write them."""

from __future__ import annotations

import pytest

from ansible_collections.provision.cluster.plugins.module_utils.common import sizes


def test_sizes():
    assert sizes.parse_size("64m") == 64 * sizes.MIB
    assert sizes.parse_size("2GiB") == 2 * sizes.GIB
    assert sizes.parse_size("1073741824") == sizes.GIB
    with pytest.raises(ValueError):
        sizes.parse_size("lots")
    assert sizes.human(64 * sizes.MIB) == "64 MiB" and sizes.human(None) == "unlimited"
    assert sizes.docker_size(16 * sizes.GIB) == "16g" and sizes.docker_size(512 * sizes.MIB) == "512m"


def test_one_size_parser_for_shm_sizes_and_message_sizes():
    # node_runtime's spellings (docker/podman --shm-size) and the smoke test's (nccl-tests -b/-e)
    for spelling in ("64m", "64M", "64MiB", "64MB", "64mb", "65536k", "65536KiB"):
        assert sizes.parse_size(spelling) == 64 * sizes.MIB, spelling
    assert sizes.parse_size("1t") == sizes.TIB and sizes.parse_size(4096) == 4096
    with pytest.raises(ValueError, match="not a size"):
        sizes.parse_size("64 parsecs")
    # shown rounded for limits, exact for the all-reduce table's message sizes
    assert sizes.human(1536 * sizes.MIB) == "1.5 GiB" and sizes.human(1536 * sizes.MIB, exact=True) == "1536 MiB"
    assert sizes.human(1000, exact=True) == "1000 B" and sizes.human(64 * sizes.MIB, exact=True) == "64 MiB"
