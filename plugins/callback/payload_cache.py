# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
from __future__ import annotations

DOCUMENTATION = r"""
name: payload_cache
type: aggregate
short_description: Keep this collection's module payloads between runs
description:
  - ansible-core builds each module's payload (the module and the module_utils it imports, parsed and
    zipped) once per run and throws it away at the end. Building one of this collection's modules takes
    0.15-0.5 s of controller time, and a re-run of C(site.yml) or C(provision verify) builds the same
    11-15 payloads every time, one after the other.
  - This callback restores the payloads an earlier run built into the run's own payload cache before the
    first task, and keeps the ones this run built when it ends. They are kept under a key that covers every
    byte they are built from (ansible-core's version and payload code, its module_utils, the Python, and
    every module and module_util of this collection, by content), so a changed file is never served an old
    payload. Only this collection's modules are kept; ansible-core builds every other module as usual.
  - A problem with the cache never fails a run; it is shown with C(-vvv) and the run builds as usual.
    Payloads that another user could have written (the directory or a file not this user's alone, or a
    link) are not used, and a warning says so (they run on every node, as root where the play escalates).
version_added: "0.1.0"
author: provision developers (!UNKNOWN)
requirements:
  - enabled in callbacks_enabled (the repository's ansible.cfg and the provision CLI enable it)
options:
  cache_dir:
    description: Where the payloads are kept, one directory per key (mode 0700).
    type: path
    default: ~/.cache/provision/payloads
    env:
      - name: PROVISION_PAYLOAD_CACHE_DIR
    ini:
      - section: callback_payload_cache
        key: cache_dir
  keep:
    description: How many keys (versions of the code) are kept; the least recently used go first.
    type: int
    default: 4
    env:
      - name: PROVISION_PAYLOAD_CACHE_KEEP
    ini:
      - section: callback_payload_cache
        key: keep
"""

from pathlib import Path

from ansible import constants as C
from ansible.plugins.callback import CallbackBase

from ansible_collections.provision.cluster.plugins.plugin_utils import payload_cache


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "provision.cluster.payload_cache"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._key = None

    @staticmethod
    def _run_cache():
        # where ansible-core keeps this run's payloads (module_common: DEFAULT_LOCAL_TMP/ansiballz_cache);
        # the workers are forked from this process after the playbook starts, and share it
        return Path(C.DEFAULT_LOCAL_TMP) / "ansiballz_cache"

    def _store(self):
        return Path(self.get_option("cache_dir")).expanduser()

    def v2_playbook_on_start(self, playbook):
        try:
            self._key = self._key or payload_cache.fingerprint()
            names = payload_cache.restore(self._store(), self._key, self._run_cache())
            self._display.vvv(f"payload_cache: {len(names)} payload(s) restored from {self._store() / self._key}")
        except payload_cache.UntrustedCache as exc:
            self._display.warning(str(exc))
        except (OSError, ValueError) as exc:
            self._display.vvv(f"payload_cache: not used ({exc})")

    def v2_playbook_on_stats(self, stats):
        if not self._key:
            return
        try:
            # a file changed during the run: what was built may be either version, so keep nothing
            if payload_cache.fingerprint() != self._key:
                self._display.vvv("payload_cache: the collection changed during the run; nothing kept")
                return
            names = payload_cache.save(self._store(), self._key, self._run_cache(), int(self.get_option("keep")))
            self._display.vvv(f"payload_cache: {len(names)} payload(s) kept in {self._store() / self._key}")
        except (OSError, ValueError) as exc:
            self._display.vvv(f"payload_cache: nothing kept ({exc})")
