"""Every changelog fragment is what antsibull-changelog reads: YAML, a mapping of the sections
changelogs/config.yaml names (plus `trivial`), each a list of entries of text. A fragment that does not
load fails here in a second, not in CI's ansible-lint step (a `word): word` line in a plain scalar did)."""

from __future__ import annotations

import pytest
import yaml

from helpers import REPO

FRAGMENTS = sorted((REPO / "changelogs" / "fragments").glob("*.y*ml"))


SECTIONS = {name for name, _title in yaml.safe_load((REPO / "changelogs" / "config.yaml").read_text())["sections"]} | {"trivial"}


def test_there_are_fragments():
    assert FRAGMENTS


@pytest.mark.parametrize("path", FRAGMENTS, ids=lambda p: p.name)
def test_fragment_loads_and_names_known_sections(path):
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict) and data, f"{path.name}: not a mapping of sections"
    unknown = set(data) - SECTIONS
    assert not unknown, f"{path.name}: unknown sections {sorted(unknown)} (changelogs/config.yaml)"
    for section, entries in data.items():
        assert isinstance(entries, list) and entries, f"{path.name}: {section} is not a list of entries"
        assert all(isinstance(e, str) and e.strip() for e in entries), f"{path.name}: {section} has an entry that is not text"
