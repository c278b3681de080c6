# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""The url_host filter (documented in url_host.yml): an address as the host part of a URL."""

from __future__ import annotations

from ansible_collections.provision.cluster.plugins.module_utils.common.cluster_plan import url_host


class FilterModule:
    def filters(self):
        return {"url_host": url_host}
