"""A clone with nothing beside it runs everything: no tracked file reads or links a folder outside the
repository (the project's shared notes and fixtures sit beside CI's clone, not beside a user's)."""

from __future__ import annotations

import subprocess

from helpers import FIXTURES, REPO

OUTSIDE = "../" + "shared"  # spelled in two parts so that this file does not match itself


def tracked_text_files():
    names = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.split(b"\0")
    for name in filter(None, names):
        path = REPO / name.decode()
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if b"\0" not in data[:4096]:
                yield path, data.decode(errors="replace")


def test_no_tracked_file_reaches_outside_the_repository():
    hits = [f"{path.relative_to(REPO)}:{n}" for path, text in tracked_text_files()
            for n, line in enumerate(text.splitlines(), 1) if OUTSIDE in line]
    assert not hits, f"these lines name {OUTSIDE}, which a user's clone does not have: {hits}"


def test_the_captures_the_tests_read_are_in_the_repository():
    for folder in ("h100-node", "h100-node/net", "h100-node/failures", "seed-ib"):
        assert (FIXTURES / folder / "README.md").is_file(), f"{folder} lacks its provenance README"
    assert (FIXTURES / "h100-node" / "nvidia-smi-q.xml").stat().st_size > 10_000
