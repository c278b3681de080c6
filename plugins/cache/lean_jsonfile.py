# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""The jsonfile fact cache without the source positions of templated values."""
from __future__ import annotations

DOCUMENTATION = r"""
name: lean_jsonfile
short_description: JSON files per host, without the playbook positions of templated values
description:
  - The builtin P(ansible.builtin.jsonfile#cache) cache (one JSON file per host), except that values
    are stored without their C(Origin) tags, the playbook file, line and column a value was templated
    at, which ansible-core only uses in error messages.
  - Why (measured) - ansible-core 2.19 decodes a host's whole cache entry every time it computes that
    host's variables, which is at least once per host and task, and every C(hostvars[host]) read.
    Each C(Origin) tag costs about 0.1 ms to decode; the facts this collection caches carry about
    thirty, so a host's entry took 3.8 ms to decode instead of 0.4 ms, about 5 s of the controller's
    time in an 8-node C(site.yml) re-run.
  - Every other tag (vault-encrypted values, trust as a template) is kept as ansible-core wrote it;
    values that were only wrapped for their position are stored as plain JSON.
  - Entries the builtin jsonfile plugin wrote (the same file names and format) are read too, and
    lose their positions when read.
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
options:
  _uri:
    required: true
    description: Directory the cache files are kept in.
    env:
      - name: ANSIBLE_CACHE_PLUGIN_CONNECTION
    ini:
      - key: fact_caching_connection
        section: defaults
    type: path
  _prefix:
    description: Prefix of the cache file names.
    env:
      - name: ANSIBLE_CACHE_PLUGIN_PREFIX
    ini:
      - key: fact_caching_prefix
        section: defaults
  _timeout:
    default: 86400
    description: Seconds a host's entry stays valid.
    env:
      - name: ANSIBLE_CACHE_PLUGIN_TIMEOUT
    ini:
      - key: fact_caching_timeout
        section: defaults
    type: integer
"""

import json

from ansible.plugins.cache.jsonfile import CacheModule as JsonFileCacheModule

# The key ansible-core's cache layer keeps its encoded payload under (ansible-core >= 2.19).
PAYLOAD_KEY = "__payload__"
TYPE_KEY = "__ansible_type"
# Tagged wrappers whose plain JSON value decodes to the same value without the wrapper.
_PLAIN_WHEN_UNTAGGED = frozenset(("_AnsibleTaggedStr", "_AnsibleTaggedInt", "_AnsibleTaggedFloat",
                                  "_AnsibleTaggedList", "_AnsibleTaggedDict"))


def strip_origins(value):
    """The JSON structure of ansible-core's cache encoding, without Origin tags.

    A tagged value is encoded as {"__ansible_type": "_AnsibleTagged<type>", "value": ..., "tags": [...]}.
    Origin tags are dropped; a str/int/float/list/dict wrapper left without tags becomes its plain value.
    Anything else (other tags, other wrapped types, unknown shapes) is kept as it is.
    """
    if isinstance(value, list):
        return [strip_origins(item) for item in value]
    if not isinstance(value, dict):
        return value
    kind = value.get(TYPE_KEY)
    if (isinstance(kind, str) and kind.startswith("_AnsibleTagged") and set(value) == {TYPE_KEY, "value", "tags"}
            and isinstance(value["tags"], list)):
        tags = [tag for tag in value["tags"] if not (isinstance(tag, dict) and tag.get(TYPE_KEY) == "Origin")]
        inner = strip_origins(value["value"])
        if not tags and kind in _PLAIN_WHEN_UNTAGGED:
            return inner
        return {TYPE_KEY: kind, "value": inner, "tags": tags if kind in _PLAIN_WHEN_UNTAGGED else value["tags"]}
    return {key: strip_origins(item) for key, item in value.items()}


def lean_entry(entry):
    """A cache entry as ansible-core's cache layer hands it to the plugin, without Origin tags."""
    if not (isinstance(entry, dict) and isinstance(entry.get(PAYLOAD_KEY), str)):
        return entry
    try:
        payload = json.loads(entry[PAYLOAD_KEY])
    except ValueError:
        return entry
    return dict(entry, **{PAYLOAD_KEY: json.dumps(strip_origins(payload), separators=(",", ":"))})


class CacheModule(JsonFileCacheModule):
    """jsonfile, storing and reading entries without Origin tags."""

    def set(self, key, value):
        super().set(key, lean_entry(value))

    def _load(self, filepath):
        return lean_entry(super()._load(filepath))
