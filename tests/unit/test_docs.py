"""The README and docs/: generated tables match their sources, every relative link resolves inside the
repository, every code block parses, and the README stays a front door (length, the variables it owes)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from helpers import REPO

README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
PAGES = [README] + DOCS
RUNNABLE_KINDS = {"lab"}  # <!-- runnable: lab -->: tests/integration/test_readme.py runs the block on a 2-node lab

FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)[^\n]*$")
MARKER = re.compile(r"^<!--\s*runnable:\s*([\w-]+)\s*-->\s*$")


def gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", REPO / "scripts" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def blocks(path: Path) -> list[dict]:
    """The fenced code blocks of a Markdown file: {lang, code, line, marker} (marker: the runnable kind
    of the HTML comment right before the block, else None)."""
    out, lines = [], path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang, start = m.group(2), m.group(3).lower(), i
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        prev = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        marker = MARKER.match(prev.strip())
        out.append({"lang": lang, "code": "\n".join(lines[start + 1:j]) + "\n", "line": start + 1,
                    "marker": marker.group(1) if marker else None})
        i = j + 1
    return out


def prose(path: Path) -> str:
    """The file without its fenced code blocks (links and headings live outside them)."""
    out, fence = [], None
    for line in path.read_text().splitlines():
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(2)
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            continue
        out.append(line)
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(path).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def links(path: Path) -> list[str]:
    text = re.sub(r"`[^`\n]*`", "", prose(path))  # code spans are not links
    return LINK.findall(text)


def test_slug_is_githubs():
    assert slug("`--json` (schema 1, stable)") == "--json-schema-1-stable"
    assert slug("3. site.yml, 4. verify, 5. launch") == "3-siteyml-4-verify-5-launch"
    assert slug("As SLURM's node health check: `--local --slurm-drain`") == \
        "as-slurms-node-health-check---local---slurm-drain"


def test_generated_blocks_match_their_sources():
    stale = gen_docs().outdated()
    assert not stale, f"out of date: {stale}; run python scripts/gen_docs.py"


def test_the_check_table_is_the_catalog():
    """Every public check (provision verify --list-checks) has its row in docs/verify.md, in order."""
    from provision import verify as core

    text = (REPO / "docs" / "verify.md").read_text()
    rows = re.findall(r"^\| `([a-z_]+)` \|", text.split("<!-- generated: checks")[1], re.M)
    assert rows == list(core.checks())
    assert "consistency" in rows


def test_every_role_variable_is_documented():
    text = (REPO / "docs" / "variables.md").read_text()
    for role in sorted((REPO / "roles").iterdir()):
        specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
        for spec in specs.values():
            for name in spec.get("options") or {}:
                assert f"| `{name}` |" in text, (role.name, name)


# the names matching cluster_* in the code that are not inventory variables: the plan fact and functions
# filter names and arguments of ours that look like variables
NOT_INVENTORY = {"cluster_plan", "cluster_gpu_counts", "cluster_link", "cluster_link_layers", "cluster_port_rates",
                 "cluster_env", "cluster_env_script"}


def test_readme_lists_every_cluster_wide_variable():
    from ansible_collections.provision.cluster.plugins.module_utils.common import cluster_plan

    used = set()
    for folder in ("roles", "playbooks", "plugins", "inventory"):
        for path in (REPO / folder).rglob("*"):
            if path.is_file() and path.suffix in (".yml", ".yaml", ".py", ".j2", ".md"):
                used.update(re.findall(r"\bcluster_[a-z_]+\b", path.read_text(errors="replace")))
    wanted = (used - NOT_INVENTORY) | set(cluster_plan.DEFAULTS) | {"gpu_health_expected_gpus"}
    table = README.read_text().split("## Inventory variables")[1].split("\n## ")[0]
    listed = set(re.findall(r"^\| `([a-z_]+)` \|", table, re.M))
    assert wanted <= listed, sorted(wanted - listed)
    for name, default in cluster_plan.DEFAULTS.items():
        row = next(ln for ln in table.splitlines() if ln.startswith(f"| `{name}` |"))
        assert (f"`{default}`" if default != "" else "first host") in row, row


def test_readme_is_a_front_door():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, len(lines)
    assert lines[3].startswith("bash scripts/quickstart.sh") and lines[4].startswith("bash scripts/test.sh")
    top = " ".join(" ".join(lines[:30]).split())  # the first screen, lines joined
    for left_out in ("NVIDIA driver", "MOFED", "fabric manager", "DCGM", "scheduler"):
        assert left_out in top, left_out
    # no history in the reference: no commit hashes, no "was X" figures
    assert not re.search(r"\b[0-9a-f]{7}\b", README.read_text()), "a commit hash in the README"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve_inside_the_repository(page):
    for target in links(page):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert REPO in dest.parents or dest == REPO, f"{page.name}: {target} leaves the repository"
        assert dest.exists(), f"{page.name}: {target} does not exist"
        if anchor and dest.suffix == ".md":
            assert anchor in anchors(dest), f"{page.name}: {target}: no heading #{anchor} in {dest.name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_reference_to_files_a_clone_does_not_have(page):
    outside = ("../" + "shared", "/work/" + "shared")   # in two parts: this file must not name them either
    assert not [o for o in outside if o in page.read_text()]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_code_blocks_parse(page):
    for block in blocks(page):
        where = f"{page.name}:{block['line']}"
        if block["lang"] in ("bash", "sh", "shell"):
            proc = subprocess.run(["bash", "-n"], input=block["code"], capture_output=True, text=True, timeout=30)
            assert proc.returncode == 0, f"{where}: {proc.stderr}"
        elif block["lang"] in ("yaml", "yml"):
            list(yaml.safe_load_all(block["code"]))


def test_runnable_markers_precede_a_block():
    for page in PAGES:
        text = page.read_text().splitlines()
        for i, line in enumerate(text):
            m = MARKER.match(line.strip())
            if not m:
                continue
            assert m.group(1) in RUNNABLE_KINDS, f"{page.name}:{i + 1}: unknown runnable kind {m.group(1)}"
            following = next(ln for ln in text[i + 1:] if ln.strip())
            assert FENCE.match(following), f"{page.name}:{i + 1}: the marker is not followed by a code block"
    runnable = [b for b in blocks(README) if b["marker"] == "lab"]
    assert runnable and all(b["lang"] == "bash" for b in runnable)
    assert any("provision lab down" in b["code"] for b in runnable), "a runnable lab block must take its lab down"


def _text_fields(doc, where=""):
    """(where, value) of every description and short_description in a plugin's DOCUMENTATION."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key in ("description", "short_description"):
                for item in value if isinstance(value, list) else [value]:
                    yield f"{where}.{key}", item
            else:
                yield from _text_fields(value, f"{where}.{key}")
    elif isinstance(doc, list):
        for i, item in enumerate(doc):
            yield from _text_fields(item, f"{where}[{i}]")


@pytest.mark.parametrize("path", sorted((REPO / "plugins" / "filter").glob("*.yml")), ids=lambda p: p.name)
def test_filter_documentation_is_text_where_ansible_doc_wants_text(path):
    """A plain YAML line with ": " in it is a mapping, not a sentence: ansible-doc then fails on the whole
    collection ("expected str instance, AnsibleMapping found"; sbatch_script.yml, 2026-11-27)."""
    doc = yaml.safe_load(path.read_text())["DOCUMENTATION"]
    bad = [where for where, value in _text_fields(doc) if not isinstance(value, str)]
    assert not bad, f"{path.name}: not text at {bad} (quote the line, or reword the ': ')"


def _python_docs(path):
    """The DOCUMENTATION, EXAMPLES and RETURN strings of a plugin file (a doc fragment's: each of its
    class's fragments, read as DOCUMENTATION), read without importing it."""
    import ast

    fragment = path.parent.name == "doc_fragments"
    out = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name) and (target.id in ("DOCUMENTATION", "EXAMPLES", "RETURN")
                                                     or fragment and target.id.isupper()):
                    out[target.id] = node.value.value
    return out


PLUGIN_FILES = sorted(p for p in (REPO / "plugins").glob("*/*.py") if "DOCUMENTATION" in p.read_text())


@pytest.mark.parametrize("path", PLUGIN_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_plugin_documentation_parses_and_is_text_where_ansible_doc_wants_text(path):
    """What ansible-doc (the matrix's doc cell, late in CI) and ansible-lint refuse, in a second: a
    description line with ': ' in it is a mapping (wheelhouse.py, 2026-12-02)."""
    docs = _python_docs(path)
    assert "DOCUMENTATION" in docs, path
    for name, text in docs.items():
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise AssertionError(f"{path.name}: {name} is not YAML: {exc}") from None
        if name == "DOCUMENTATION" or path.parent.name == "doc_fragments":
            bad = [where for where, value in _text_fields(data) if not isinstance(value, str)]
            assert not bad, f"{path.name}: not text at {bad} (quote the line, or reword the ': ')"
