#!/usr/bin/env python3
"""Rewrite the generated blocks of the docs from their sources, so that no table is a hand copy.

- docs/verify.md, block `checks`: the check table, from `provision verify --list-checks --json`
  (the check catalog, plugins/module_utils/verify/catalog.py);
- docs/variables.md, block `variables`: every role variable with its default and meaning, from
  each role's meta/argument_specs.yml and defaults/main.yml (cluster_plan.DEFAULTS for the settings every
  stage shares).

A block sits between `<!-- generated: NAME ... -->` and `<!-- end generated: NAME -->`; the text
around it is written by hand. tests/unit/test_docs.py fails when a committed block differs from
what this script writes.

Usage: python scripts/gen_docs.py           rewrite the blocks
       python scripts/gen_docs.py --check   exit 1 naming the blocks that are out of date
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def _cell(text: str) -> str:
    """Text for one Markdown table cell (one line, pipes escaped)."""
    return " ".join(str(text).split()).replace("|", "\\|")


def check_list() -> dict:
    """The document `provision verify --list-checks --json` prints, from this checkout."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO / "src"), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "provision", "verify", "--list-checks", "--json"], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"provision verify --list-checks --json failed ({proc.returncode}): {proc.stderr[-500:]}")
    return json.loads(proc.stdout)


def checks_table(doc: dict | None = None) -> str:
    doc = doc or check_list()
    rows = ["| `--only` | what it covers | read-only module (on each node) | stage | runs | `--local` |",
            "| --- | --- | --- | --- | --- | --- |"]
    for c in doc["checks"]:
        how = ", ".join(f"`{m.rsplit('.', 1)[-1]}`" for m in c["modules"])
        if c["controller"]:
            how = (how + "; " if how else "") + "compared on the controller"
        if c["phase"] == "smoke":
            how = "the `allreduce_smoke` role"
        elif not how:
            how = "Ansible's connection (`ping`)"
        runs = "always" if c["always"] else "by default" if c["default"] else f"with `--{c['name']}`" \
            if c["name"] == "smoke" else "when named"
        local = "by default" if c["local_default"] else "when named" if c["local"] else "no"
        stage = f"`{c['stage']}`" if c["stage"] else "-"
        rows.append(f"| `{c['name']}` | {_cell(c['summary'])} | {how} | {stage} | {runs} | {local} |")
    return "\n".join(rows) + "\n"


_MARKUP = [(re.compile(r"[CVO]\(([^)]*)\)"), r"`\1`"), (re.compile(r"I\(([^)]*)\)"), r"*\1*"),
           (re.compile(r"B\(([^)]*)\)"), r"**\1**"), (re.compile(r"U\(([^)]*)\)"), r"\1"),
           (re.compile(r"L\(([^,)]*),\s*([^)]*)\)"), r"[\1](\2)"), (re.compile(r"M\(([^)]*)\)"), r"`\1`")]


def _doc_text(description) -> str:
    parts = description if isinstance(description, list) else [description or ""]
    text = " ".join(str(p).strip() for p in parts)
    for pattern, repl in _MARKUP:
        text = pattern.sub(repl, text)
    return _cell(text)


def _default(value, present: bool) -> str:
    if not present or value is None:
        return "unset"
    if isinstance(value, str):
        return f"`{_cell(value)}`" if value else '`""`'
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, (int, float)):
        return f"`{value}`"
    flow = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return f"`{_cell(flow)}`"


def shared_defaults() -> dict:
    """cluster_plan.DEFAULTS: the defaults of the settings every stage shares, written there only (plain
    Python, loaded from its file)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "_cluster_plan", REPO / "plugins" / "module_utils" / "common" / "cluster_plan.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return dict(module.DEFAULTS)


def variables_tables(roles_dir: Path | None = None) -> str:
    roles_dir = roles_dir or REPO / "roles"
    shared = shared_defaults()
    out = []
    for role in sorted(p for p in roles_dir.iterdir() if (p / "meta" / "argument_specs.yml").is_file()):
        specs = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
        defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text()) or {} \
            if (role / "defaults" / "main.yml").is_file() else {}
        main = specs.get("main") or next(iter(specs.values()))
        out.append(f"### {role.name}\n")
        out.append(f"{_doc_text(main.get('short_description', ''))} "
                   f"([roles/{role.name}/README.md](../roles/{role.name}/README.md))\n")
        out.append("| variable | default | meaning |")
        out.append("| --- | --- | --- |")
        seen = set()
        for entry, spec in specs.items():
            for name, opt in (spec.get("options") or {}).items():
                if name in seen:
                    continue
                seen.add(name)
                if name in defaults:
                    default = _default(defaults[name], True)
                elif name in shared:
                    default = _default(shared[name], True)
                else:
                    default = _default(opt.get("default"), "default" in opt)
                meaning = _doc_text(opt.get("description"))
                if entry != "main":
                    meaning = f"(`tasks_from: {entry}`) {meaning}"
                out.append(f"| `{name}` | {default} | {meaning} |")
        out.append("")
    return "\n".join(out)


BLOCKS = {
    "checks": (REPO / "docs" / "verify.md", checks_table),
    "variables": (REPO / "docs" / "variables.md", variables_tables),
}


def block_pattern(name: str) -> re.Pattern:
    return re.compile(r"(<!-- generated: %s\b[^>]*-->\n)(.*?)(<!-- end generated: %s -->)" % (name, name), re.S)


def rewrite(text: str, name: str, body: str) -> str:
    pattern = block_pattern(name)
    if not pattern.search(text):
        raise SystemExit(f"no `<!-- generated: {name} -->` ... `<!-- end generated: {name} -->` block")
    return pattern.sub(lambda m: m.group(1) + body + m.group(3), text, count=1)


def outdated() -> list[str]:
    """'FILE (block NAME)' for each generated block whose committed text differs from the generated one."""
    stale = []
    for name, (path, make) in BLOCKS.items():
        text = path.read_text()
        if rewrite(text, name, make()) != text:
            stale.append(f"{path.relative_to(REPO)} (block {name})")
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say which blocks are out of date (exit 1)")
    args = parser.parse_args(argv)
    if args.check:
        stale = outdated()
        for line in stale:
            print(f"out of date: {line}; run python scripts/gen_docs.py", file=sys.stderr)
        return 1 if stale else 0
    for name, (path, make) in BLOCKS.items():
        text = path.read_text()
        new = rewrite(text, name, make())
        if new != text:
            path.write_text(new)
            print(f"rewrote {path.relative_to(REPO)} (block {name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
