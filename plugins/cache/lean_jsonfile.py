# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""The jsonfile fact cache without the source positions of templated values, one directory per
inventory, private to its owner, without the environment."""
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
  - Facts belong to one machine of one cluster. The entries of one inventory live in a directory of
    their own under O(_uri), C(<inventory name>-<hash of the inventory sources>) (and, for the lab
    inventory, of the lab's name, C(PROVISION_LAB_NAME)), so two clusters that both have a C(node1)
    never read each other's facts. Which machine an entry was gathered on (machine-id, boot id, release) is
    the fact C(provision_machine), compared on every run by C(playbooks/identity.yml); a node that is
    another machine now has its entry dropped and is gathered again.
  - The cache is private (directories 0700, files 0600) and holds no environment; C(ansible_env),
    C(shell_env_extra_vars), C(__shell_env) and every fact or variable whose name looks like a secret
    (password, secret, token, api key, credential, private key) are left out of what is written, and out
    of what is read from entries written before.
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

import hashlib
import json
import os
import re
import stat
import tempfile

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


# Facts that hold the environment of a login or of the jobs (values users put secrets in): never on disk.
UNCACHED = frozenset(("ansible_env", "env", "shell_env_extra_vars", "__shell_env"))
SECRET = re.compile(r"passw(or)?d|secret|token|api_?key|credential|private_?key|auth_?key|access_?key", re.I)


def _secret_free(value, top=False):
    """value without the keys of UNCACHED (top level) and those that look like secrets (any level)."""
    if isinstance(value, dict):
        return {k: _secret_free(v) for k, v in value.items()
                if not (isinstance(k, str) and (SECRET.search(k) or (top and k in UNCACHED)))}
    if isinstance(value, list):
        return [_secret_free(v) for v in value]
    return value


def private_entry(entry):
    """A cache entry (lean_entry's shape) without the environment and secret-looking facts."""
    if not (isinstance(entry, dict) and isinstance(entry.get(PAYLOAD_KEY), str)):
        return _secret_free(entry, top=True) if isinstance(entry, dict) else entry
    try:
        payload = json.loads(entry[PAYLOAD_KEY])
    except ValueError:
        return entry
    if not isinstance(payload, dict):
        return entry
    return dict(entry, **{PAYLOAD_KEY: json.dumps(_secret_free(payload, top=True), separators=(",", ":"))})


def inventory_sources():
    """The inventory sources of this run (ansible-playbook -i, else ansible.cfg's), as absolute paths."""
    try:
        from ansible import context

        sources = (context.CLIARGS or {}).get("inventory")
    except ImportError:  # pragma: no cover
        sources = None
    if not sources:
        from ansible import constants as C

        sources = C.DEFAULT_HOST_LIST
    if isinstance(sources, str):
        sources = [sources]
    out = []
    for src in sources or []:
        src = str(src)
        out.append(src if "," in src else os.path.realpath(os.path.expanduser(src)))
    return out


def inventory_key(sources, lab=None):
    """The directory of one inventory's entries: a readable name and a hash of its sources (and lab)."""
    text = "\n".join(sources) + ("\nlab=%s" % lab if lab else "")
    digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    first = sources[0] if sources else "none"
    name = lab or (os.path.basename(first.rstrip("/")) if "," not in first else "hosts")
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:40] or "inventory"
    return "%s-%s" % (name, digest)


def _private_dir(path):
    """Make PATH (and missing parents) 0700; an existing directory of ours is made 0700 too."""
    os.makedirs(path, mode=0o700, exist_ok=True)
    st = os.stat(path)
    if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)


class CacheModule(JsonFileCacheModule):
    """jsonfile, storing and reading entries without Origin tags, per inventory, private, without the
    environment."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        base = self._cache_dir
        _private_dir(base)
        self._cache_dir = os.path.join(base, inventory_key(inventory_sources(), os.environ.get("PROVISION_LAB_NAME")))
        _private_dir(self._cache_dir)

    def set(self, key, value):
        value = private_entry(lean_entry(value))
        self._cache[key] = value
        cachefile = self._get_cache_file_name(key)
        # mkstemp makes the file 0600, and it stays so (the builtin plugin makes it 0644)
        handle, tmp = tempfile.mkstemp(dir=os.path.dirname(cachefile), prefix=".tmp-")
        try:
            with os.fdopen(handle, "w") as out:
                out.write(json.dumps(value))
            os.rename(tmp, cachefile)
        finally:
            try:
                os.unlink(tmp)
            except OSError:
                pass

    def _load(self, filepath):
        return private_entry(lean_entry(super()._load(filepath)))
