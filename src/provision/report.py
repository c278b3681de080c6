"""`provision report`: one self-contained HTML page from a `provision verify --json` document and
the cluster's saved baselines.

The page needs nothing at view time (no network, no library): its CSS, its few lines of JavaScript
(filter, sort, the cell details) and its SVG plots are inline, the plots drawn here in Python. It
holds the per-node summary, the node x check table with every cause and fix, the all-reduce table
and busbw against message size with the expected figure and the baseline, a heat map of the link
probe (src -> dst, slow links marked), the bad node search, and busbw over the saved baselines.

Bad input is told in one line (ReportError, exit 2): a file that is not JSON or was cut short, JSON
that is not a verify document or a baseline, a baseline directory without baselines, a baseline of
another node set.
"""

from __future__ import annotations

import html
import json
import math
import time
from pathlib import Path
from typing import Any

from provision import views

SCHEMA = 1


class ReportError(Exception):
    """Input the report cannot use (exit 2), told in one line."""


# ---------------------------------------------------------------- input

def _read_json(path: str, what: str, text: str | None = None) -> Any:
    name = "standard input" if path == "-" else path
    if text is None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ReportError(f"{name}: no such file") from None
        except IsADirectoryError:
            raise ReportError(f"{name}: is a directory, not {what}") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ReportError(f"{name}: cannot read it: {getattr(exc, 'strerror', None) or exc}") from None
    if not text.strip():
        raise ReportError(f"{name}: is empty, not {what}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        why = "it ends early: a truncated file?" if _unclosed(text) else "not valid JSON"
        raise ReportError(f"{name}: {why} ({exc.msg}: line {exc.lineno} column {exc.colno}); "
                          f"expected {what}") from None


def _unclosed(text: str) -> bool:
    """True when the text opens an object, array or string it never closes: a file cut short."""
    depth, in_string, escape = 0, False, False
    for ch in text:
        if in_string:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
    return in_string or depth > 0


def load_document(path: str, text: str | None = None) -> dict[str, Any]:
    """A `provision verify --json` document (schema 1), checked for the fields the report reads."""
    what = "a provision verify --json document"
    doc = _read_json(path, what, text)
    name = "standard input" if path == "-" else path
    if not isinstance(doc, dict) or "checks" not in doc or "nodes" not in doc:
        kind = type(doc).__name__ if not isinstance(doc, dict) else "an object with " + (
            ", ".join(sorted(doc)[:5]) or "no field")
        raise ReportError(f"{name}: not {what} (found {kind}; it has no nodes and checks)")
    if doc.get("schema") != SCHEMA:
        raise ReportError(f"{name}: verify document of schema {doc.get('schema')!r}; this provision reads schema {SCHEMA}")
    bad = [k for k, t in (("nodes", list), ("checks", list)) if not isinstance(doc.get(k), t)]
    if bad or not all(isinstance(n, dict) and "name" in n for n in doc["nodes"]) or not all(
            isinstance(c, dict) and {"node", "check", "status"} <= set(c) for c in doc["checks"]):
        raise ReportError(f"{name}: not {what} (its nodes or checks are not the records verify writes)")
    doc.setdefault("summary", {s: sum(c["status"] == s for c in doc["checks"]) for s in ("pass", "fail", "warn", "skip")})
    for key in ("mesh", "versions", "allreduce"):
        if not isinstance(doc.get(key), dict):
            doc[key] = {"ran": False}
    return doc


def _baseline_nodes(baseline: dict[str, Any]) -> set[str]:
    return set(((baseline.get("context") or {}).get("nodes") or {}))


def load_baseline(path: Path) -> dict[str, Any]:
    what = "a provision baseline (provision verify --smoke --save-baseline)"
    data = _read_json(str(path), what)
    if not isinstance(data, dict) or not isinstance(data.get("samples"), list) or "context" not in data:
        raise ReportError(f"{path}: not {what}")
    if data.get("schema") != SCHEMA:
        raise ReportError(f"{path}: baseline of schema {data.get('schema')!r}; this provision reads schema {SCHEMA}")
    return dict(data, path=str(path))


def load_baselines(doc: dict[str, Any], given: list[str], default: str | None = None) -> tuple[list[dict], list[str]]:
    """The baselines to draw (each with its path) and warnings. given: files or directories (every
    *.json in a directory); without any, `default` (the baseline the verify run used) when it exists.
    A baseline of another node set is an error when given as a file; in a directory it is left out
    with a warning, and an error when no baseline of this node set is left."""
    nodes = {n["name"] for n in doc["nodes"]}
    found: list[dict] = []
    warnings: list[str] = []
    sources = list(given) or ([default] if default and Path(default).is_file() else [])
    for src in sources:
        path = Path(src).expanduser()
        if path.is_dir():
            files = sorted(p for p in path.glob("*.json") if p.is_file())
            if not files:
                raise ReportError(f"{path}: no baseline (*.json) in this directory; save one with "
                                  "provision verify --smoke --save-baseline (or give the baseline file)")
            mine = []
            for f in files:
                b = load_baseline(f)
                other = _other_nodes(b, nodes)
                if other:
                    warnings.append(f"{f}: left out: a baseline of another node set ({other})")
                else:
                    mine.append(b)
            if not mine:
                raise ReportError(f"{path}: no baseline of this document's {len(nodes)} nodes in it "
                                  f"({len(files)} of another node set); give this cluster's baseline")
            found += mine
        elif path.exists() or given:
            if not path.exists():
                raise ReportError(f"{path}: no such file or directory")
            b = load_baseline(path)
            other = _other_nodes(b, nodes)
            if other:
                raise ReportError(f"{path}: a baseline of another node set ({other}); give the baseline "
                                  "of the cluster this document checked")
            found.append(b)
    return found, warnings


def _other_nodes(baseline: dict[str, Any], nodes: set[str]) -> str:
    """'' when the baseline is of these nodes (or does not say), else what differs, in a few words."""
    theirs = _baseline_nodes(baseline)
    if not theirs or theirs == nodes:
        return ""
    return (f"{views.hostlist(sorted(theirs))} then, {views.hostlist(sorted(nodes))} in the document")


def history(baselines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every saved run of the baselines, oldest first, each once: [{saved_at, rows {bytes: busbw}}]."""
    seen: dict[float, dict] = {}
    for b in baselines:
        for s in b.get("samples") or []:
            if isinstance(s, dict) and s.get("saved_at") is not None:
                rows = {int(k): v for k, v in (s.get("rows") or {}).items() if v is not None}
                seen[float(s["saved_at"])] = {"saved_at": float(s["saved_at"]), "rows": rows, "source": b["path"]}
    return [seen[k] for k in sorted(seen)]


# ---------------------------------------------------------------- small helpers

def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def human_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.3g} {unit}"
    return f"{int(n)} B"


def _f(value: Any) -> float | None:
    try:
        return None if value is None or isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return None


def fmt(value: Any, digits: int = 3) -> str:
    v = _f(value)
    return "-" if v is None else f"{v:.{digits}g}"


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / count
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks, v = [], start
    while v <= hi + step * 0.5 and len(ticks) < 20:
        ticks.append(round(v, 10))
        v += step
    return ticks


# ---------------------------------------------------------------- SVG plots

def line_plot(plot_id: str, series: list[dict[str, Any]], *, x_labels: dict[float, str], x_title: str, y_title: str,
              hlines: list[dict[str, Any]] = (), width: int = 720, height: int = 340) -> str:
    """An SVG line plot. series: [{name, cls, points [(x, y, tooltip)]}] (x already on the plot's
    scale, e.g. log2 of the size); hlines: [{y, label, cls}]. Every point is a <circle class="pt">
    with a <title>."""
    left, right, top, bottom = 64, 170, 16, 48
    xs = [p[0] for s in series for p in s["points"]] + list(x_labels)
    ys = [p[1] for s in series for p in s["points"]] + [h["y"] for h in hlines if h.get("y") is not None]
    if not xs or not ys:
        return f'<p class="empty" id="{plot_id}">no data to plot</p>'
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    ticks = nice_ticks(0.0, max(ys) * 1.08 or 1.0)
    y1 = ticks[-1]
    pw, ph = width - left - right, height - top - bottom

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def sy(y: float) -> float:
        return top + ph - (y / y1) * ph

    out = [f'<svg id="{plot_id}" class="plot" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
           f'role="img" aria-label="{esc(y_title)} against {esc(x_title)}">']
    for t in ticks:
        out.append(f'<line class="grid" x1="{left}" x2="{left + pw}" y1="{sy(t):.1f}" y2="{sy(t):.1f}"/>'
                   f'<text class="tick" x="{left - 6}" y="{sy(t) + 4:.1f}" text-anchor="end">{t:g}</text>')
    for x, label in sorted(x_labels.items()):
        out.append(f'<line class="grid v" x1="{sx(x):.1f}" x2="{sx(x):.1f}" y1="{top}" y2="{top + ph}"/>'
                   f'<text class="tick" x="{sx(x):.1f}" y="{top + ph + 16}" text-anchor="middle">{esc(label)}</text>')
    out.append(f'<line class="axis" x1="{left}" x2="{left}" y1="{top}" y2="{top + ph}"/>'
               f'<line class="axis" x1="{left}" x2="{left + pw}" y1="{top + ph}" y2="{top + ph}"/>')
    out.append(f'<text class="title" x="{left + pw / 2:.0f}" y="{height - 6}" text-anchor="middle">{esc(x_title)}</text>'
               f'<text class="title" transform="translate(14 {top + ph / 2:.0f}) rotate(-90)" '
               f'text-anchor="middle">{esc(y_title)}</text>')
    legend_y = top + 8
    for h in hlines:
        if h.get("y") is None:
            continue
        out.append(f'<line class="hline {h["cls"]}" x1="{left}" x2="{left + pw}" y1="{sy(h["y"]):.1f}" '
                   f'y2="{sy(h["y"]):.1f}"><title>{esc(h["label"])}: {h["y"]:.3g}</title></line>')
        out.append(f'<line class="hline {h["cls"]}" x1="{left + pw + 10}" x2="{left + pw + 30}" y1="{legend_y}" '
                   f'y2="{legend_y}"/><text class="legend" x="{left + pw + 34}" y="{legend_y + 4}">{esc(h["label"])}</text>')
        legend_y += 18
    for s in series:
        pts = sorted(s["points"])
        if not pts:
            continue
        path = " ".join(f"{'M' if i == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for i, (x, y, _t) in enumerate(pts))
        out.append(f'<path class="series {s["cls"]}" d="{path}"/>')
        for x, y, tip in pts:
            out.append(f'<circle class="pt {s["cls"]}" cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3.5" data-y="{y:.6g}">'
                       f'<title>{esc(tip)}</title></circle>')
        out.append(f'<line class="series {s["cls"]}" x1="{left + pw + 10}" x2="{left + pw + 30}" y1="{legend_y}" '
                   f'y2="{legend_y}"/><text class="legend" x="{left + pw + 34}" y="{legend_y + 4}">{esc(s["name"])}</text>')
        legend_y += 18
    out.append("</svg>")
    return "".join(out)


_VIRIDIS = [(68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37)]


def colour(fraction: float) -> str:
    """A viridis-like colour for 0..1 (dark: slow, yellow: fast)."""
    f = min(max(fraction, 0.0), 1.0) * (len(_VIRIDIS) - 1)
    i = min(int(f), len(_VIRIDIS) - 2)
    a, b = _VIRIDIS[i], _VIRIDIS[i + 1]
    t = f - i
    return "#%02x%02x%02x" % tuple(round(a[k] + (b[k] - a[k]) * t) for k in range(3))


def heat_map(nodes: list[str], links: list[dict[str, Any]], slow: set[tuple[str, str]],
             baseline: dict[tuple[str, str], float]) -> str:
    """src (rows) x dst (columns) of the link probe, coloured by the ring figure (every link busy);
    a slow link has a red frame. Only measured links are drawn."""
    cells = [(lk, _f(lk.get("ring_gbps")) if _f(lk.get("ring_gbps")) is not None else _f(lk.get("one_way_gbps")))
             for lk in links]
    cells = [(lk, v) for lk, v in cells if v is not None]
    if not cells:
        return '<p class="empty" id="heatmap">the link probe measured no link</p>'
    names = list(nodes) + sorted({str(lk.get(k)) for lk, _v in cells for k in ("src", "dst")} - set(nodes))
    index = {n: i for i, n in enumerate(names)}
    n = len(names)
    cell = max(3, min(28, 640 // max(n, 1)))
    labels = n <= 64
    margin = (max(len(x) for x in names) * 7 + 30) if labels else 40
    size = margin + n * cell + 10
    top = 30
    height = max(size, margin + 200) + top
    vmax = max(v for _lk, v in cells) or 1.0
    out = [f'<svg id="heatmap" class="heat" viewBox="0 0 {size + 150} {height}" width="{size + 150}" '
           f'height="{height}" role="img" aria-label="link probe matrix">']
    out.append(f'<text class="title" x="{margin}" y="14">to (dst) \u2192</text>'
               f'<text class="title" transform="translate(12 {top + margin}) rotate(90)">from (src) \u2192</text>')
    if labels:
        for name, i in index.items():
            x = margin + i * cell + cell / 2
            out.append(f'<text class="tick" transform="translate({x:.1f} {top + margin - 4}) rotate(-60)">{esc(name)}</text>'
                       f'<text class="tick" x="{margin - 4}" y="{top + margin + i * cell + cell * 0.7:.1f}" '
                       f'text-anchor="end">{esc(name)}</text>')
    out.append(f'<rect class="frame" x="{margin}" y="{top + margin}" width="{n * cell}" height="{n * cell}"/>')
    for lk, v in cells:
        src, dst = str(lk.get("src")), str(lk.get("dst"))
        is_slow = (src, dst) in slow
        ref = baseline.get((src, dst))
        tip = (f"{src} -> {dst}: {v:.3g} GB/s with every link busy"
               + (f", {fmt(lk.get('one_way_gbps'))} GB/s alone" if lk.get("one_way_gbps") is not None else "")
               + (f"; baseline {ref:.3g} GB/s" if ref else "") + ("; SLOW: far below the other links" if is_slow else ""))
        x, y = margin + index[dst] * cell, top + margin + index[src] * cell
        out.append(f'<rect class="cell{" slow" if is_slow else ""}" x="{x}" y="{y}" width="{cell}" height="{cell}" '
                   f'fill="{colour(v / vmax)}" data-src="{esc(src)}" data-dst="{esc(dst)}" data-gbps="{v:.6g}">'
                   f'<title>{esc(tip)}</title></rect>')
    lx = size + 20
    for i in range(11):
        out.append(f'<rect x="{lx}" y="{top + margin + (10 - i) * 14}" width="16" height="14" fill="{colour(i / 10)}"/>')
    out.append(f'<text class="tick" x="{lx + 22}" y="{top + margin + 10}">{vmax:.3g} GB/s</text>'
               f'<text class="tick" x="{lx + 22}" y="{top + margin + 154}">0</text>'
               f'<rect class="legend-slow" x="{lx}" y="{top + margin + 176}" width="16" height="14" fill="none"/>'
               f'<text class="tick" x="{lx + 22}" y="{top + margin + 187}">slow link</text>')
    out.append("</svg>")
    return "".join(out)


# ---------------------------------------------------------------- the page's sections

MARK = {"pass": "\u2713", "fail": "\u2717", "warn": "!", "skip": "\u2013"}


def _summary_section(doc: dict[str, Any], title: str) -> str:
    s = doc.get("summary") or {}
    state = "ok" if doc.get("ok") else "failed"
    nodes = doc["nodes"]
    down = sum(1 for n in nodes if not n.get("reachable", True))
    return (f'<header><h1>{esc(title)}</h1><p class="verdict {state}">{"OK" if doc.get("ok") else "FAILED"}</p>'
            f'<p>{len(nodes)} node(s){f", {down} down" if down else ""}: {s.get("pass", 0)} passed, '
            f'{s.get("fail", 0)} failed, {s.get("warn", 0)} warnings, {s.get("skip", 0)} skipped'
            f'{" in %s s" % esc(doc["duration_s"]) if doc.get("duration_s") is not None else ""}; inventory '
            f'<code>{esc(doc.get("inventory") or doc.get("local") or "-")}</code>'
            f'{"; limit <code>%s</code>" % esc(doc["limit"]) if doc.get("limit") else ""}; checks: '
            f'{esc(", ".join(doc.get("selected") or []))}</p></header>')


def _nodes_section(doc: dict[str, Any]) -> str:
    rows = views.node_summaries(doc)
    problems = [r for r in rows if r["state"] != "ok"]
    only = len(rows) > 32
    out = ['<section id="nodes"><h2>Nodes</h2>',
           f'<p>{len(rows) - len(problems)} of {len(rows)} node(s) healthy'
           + (f': {esc(views.hostlist([r["node"] for r in rows if r["state"] == "ok"]))}' if rows else "") + '.</p>',
           '<div class="controls"><label><input type="checkbox" class="only-problems" data-target="node-table"'
           f'{" checked" if only else ""}> only nodes with a problem</label> '
           '<input type="search" class="node-search" data-target="node-table" placeholder="node name"></div>',
           '<table id="node-table" class="sortable"><thead><tr><th>node</th><th>state</th><th>failing checks</th>'
           '<th>first cause</th><th>fix</th></tr></thead><tbody>']
    for r in rows:
        hide = ' hidden' if only and r["state"] == "ok" else ""
        out.append(f'<tr class="st-{r["state"]}" data-node="{esc(r["node"])}" data-state="{r["state"]}"{hide}>'
                   f'<td class="node">{esc(r["node"])}</td><td class="state">{r["state"]}</td>'
                   f'<td>{esc(", ".join(r["failing"] or r["warnings"])) or "-"}</td><td>{esc(r["cause"])}</td>'
                   f'<td>{esc(r["fix"])}</td></tr>')
    out.append("</tbody></table>")
    cluster = views.cluster_summary(doc)
    if cluster:
        out.append('<h3>The cluster (all-reduce verdicts)</h3><ul class="findings">')
        for c in cluster:
            out.append(f'<li class="st-{c["status"]}"><b>{esc(c["status"].upper())} {esc(c["check"])}</b>: '
                       f'{esc(c.get("detail"))}{"<br><i>fix:</i> " + esc(c["fix"]) if c.get("fix") else ""}</li>')
        out.append("</ul>")
    out.append("</section>")
    return "".join(out)


def column_key(check: str, nodes: list[str]) -> str:
    """A column of the node x check table: every node name in the check id as *, so that the per-peer
    checks share one ('ssh node1->node2' -> 'ssh *->*', 'link a->b baseline' -> 'link *->* baseline')."""
    if not nodes:
        return check
    pattern = _node_pattern(tuple(nodes))
    return pattern.sub("*", check)


_PATTERNS: dict[tuple[str, ...], Any] = {}


def _node_pattern(nodes: tuple[str, ...]):
    """Any node name as a whole word, the longest name that fits first. The names are one trie (a
    regex that shares their common prefixes) rather than an alternation of every name, which re tries
    one name after the other at every position of every check id: N names per character."""
    if nodes not in _PATTERNS:
        import re

        _PATTERNS.clear()
        _PATTERNS[nodes] = re.compile(r"(?<!\w)(?:%s)(?!\w)" % _trie_regex(nodes))
    return _PATTERNS[nodes]


def _trie_regex(names) -> str:
    """A regex matching exactly the given strings, trying the longer of two that both fit first (as an
    alternation of them sorted longest first does, backtracking to a shorter one when what follows
    does not fit)."""
    import re

    end = object()
    trie: dict = {}
    for name in names:
        node = trie
        for ch in name:
            node = node.setdefault(ch, {})
        node[end] = True

    def build(node: dict) -> str:
        branches = [re.escape(ch) + build(child) for ch, child in node.items() if ch is not end]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:%s)" % "|".join(branches)
        return "(?:%s)?" % body if end in node else body

    return build(trie)


def _checks_section(doc: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """The node x check table; details of every cell that is not a plain pass go to the page's
    JSON (shown when the cell is clicked)."""
    names = [n["name"] for n in doc["nodes"]]
    pattern = _node_pattern(tuple(names)) if names else None
    keys: dict[str, None] = {}
    cells: dict[tuple[str, str], list[dict]] = {}
    for c in doc["checks"]:
        key = pattern.sub("*", c["check"]) if pattern else c["check"]
        keys.setdefault(key)
        cells.setdefault((c["node"], key), []).append(c)
    details: list[dict[str, Any]] = []
    only = len(names) > 32
    out = ['<section id="checks"><h2>Checks: node \u00d7 check</h2>',
           '<p>\u2713 pass, \u2717 fail, ! warning, \u2013 skipped (never counted as passed); * a cell per peer, the worst '
           'shown. Click a cell for every cause and fix; hover for the first.</p>',
           '<div class="controls"><label><input type="checkbox" class="only-problems" data-target="check-table"'
           f'{" checked" if only else ""}> only nodes with a problem</label> '
           '<input type="search" class="node-search" data-target="check-table" placeholder="node name"></div>',
           '<div class="scroll"><table id="check-table" class="grid"><thead><tr><th class="node">node</th>']
    out += [f'<th class="rot" title="{esc(k)}"><span>{esc(k)}</span></th>' for k in keys]
    out.append("</tr></thead><tbody>")
    for node in names + sorted({c["node"] for c in doc["checks"]} - set(names)):
        row = []
        node_worst = "pass"
        for key in keys:
            group = cells.get((node, key)) or []
            if not group:
                row.append('<td class="none"></td>')
                continue
            worst = max(group, key=lambda c: views.SEVERITY.get(c["status"], 3))["status"]
            if views.SEVERITY.get(worst, 3) > views.SEVERITY[node_worst]:
                node_worst = worst
            tip = "; ".join(f'{c["check"]}: {c["status"]}: {c.get("detail") or ""}' for c in group[:3])
            tip += f" (+{len(group) - 3} more)" if len(group) > 3 else ""
            idx = ""
            if worst != "pass" or len(group) > 1:
                details.append({"node": node, "key": key, "checks": [{k: c.get(k, "") for k in
                                                                     ("check", "status", "detail", "fix")} for c in group]})
                idx = f' data-d="{len(details) - 1}"'
            row.append(f'<td class="c {worst}" title="{esc(tip)}"{idx}>{MARK.get(worst, "?")}</td>')
        hide = ' hidden' if only and node_worst in ("pass", "skip") else ""
        out.append(f'<tr data-node="{esc(node)}" data-state="{"ok" if node_worst in ("pass", "skip") else node_worst}"'
                   f'{hide}><td class="node">{esc(node)}</td>{"".join(row)}</tr>')
    out.append('</tbody></table></div><div id="cell-detail" class="detail" hidden></div>')
    groups = views.failure_groups(doc)
    if groups:
        out.append('<h3>Every failure and warning, with its cause and fix</h3><ol class="failures">')
        for g in groups:
            who = (esc(g["nodes"][0]) if len(g["nodes"]) == 1 else
                   f'{len(g["nodes"])} nodes: {esc(views.hostlist(g["nodes"]))} (as on {esc(g["nodes"][0])})')
            out.append(f'<li class="st-{g["status"]}"><b>{g["status"].upper()} {esc(g["check"])}</b> on {who}'
                       f'<div><i>cause:</i> {esc(g["detail"])}</div>'
                       + (f'<div><i>fix:</i> <code>{esc(g["fix"])}</code></div>' if g["fix"] else "") + "</li>")
        out.append("</ol>")
    out.append("</section>")
    return "".join(out), details


def _allreduce_section(doc: dict[str, Any], baselines: list[dict[str, Any]]) -> str:
    smoke = doc.get("allreduce") or {}
    if not smoke.get("ran"):
        return ('<section id="allreduce"><h2>All-reduce</h2><p class="empty">not run: <code>provision verify '
                '--smoke --json</code> measures it</p></section>')
    rows = [r for r in smoke.get("rows") or [] if r.get("bytes")]
    base_rows = {int(r["bytes"]): r.get("busbw") for r in (baselines[-1].get("rows") if baselines else []) or []
                 if r.get("bytes")}
    head = ", ".join(f"{k} {esc(smoke[k])}" for k in ("status", "backend", "world_size", "nodes", "master", "correct")
                     if smoke.get(k) is not None)
    out = ['<section id="allreduce"><h2>All-reduce</h2>', f"<p>{head}</p>"]
    exp = smoke.get("expected") or {}
    if exp.get("detail"):
        out.append(f'<p class="st-{esc(exp.get("status"))}"><i>expected:</i> {esc(exp["detail"])}</p>')
    out.append('<table id="allreduce-table" class="num"><thead><tr><th>size</th><th>bytes</th><th>time (\u00b5s)</th>'
               '<th>algbw (GB/s)</th><th>busbw (GB/s)</th><th>baseline busbw</th><th>vs baseline</th></tr></thead><tbody>')
    for r in rows:
        ref = _f(base_rows.get(int(r["bytes"])))
        got = _f(r.get("busbw"))
        delta = f"{100 * (got / ref - 1):+.0f}%" if ref and got is not None else "-"
        out.append(f'<tr><td>{human_bytes(r["bytes"])}</td><td>{r["bytes"]}</td><td>{_f(r.get("time_us")) or 0:.1f}</td>'
                   f'<td>{fmt(r.get("algbw"))}</td><td>{fmt(r.get("busbw"))}</td><td>{fmt(ref)}</td><td>{delta}</td></tr>')
    out.append("</tbody></table>")
    sizes = sorted({int(r["bytes"]) for r in rows} | set(base_rows))
    x_labels = {math.log2(b): human_bytes(b) for b in sizes}
    if len(x_labels) > 12:
        x_labels = {k: v for i, (k, v) in enumerate(sorted(x_labels.items())) if i % 2 == 0}
    series = [{"name": "this run", "cls": "run", "points": [
        (math.log2(r["bytes"]), float(r["busbw"]), f'{human_bytes(r["bytes"])}: busbw {r["busbw"]} GB/s')
        for r in rows if _f(r.get("busbw")) is not None]}]
    if base_rows:
        series.append({"name": "baseline (median)", "cls": "base", "points": [
            (math.log2(b), float(v), f"{human_bytes(b)}: baseline busbw {v:.3g} GB/s")
            for b, v in base_rows.items() if _f(v) is not None]})
    expected = _f(smoke.get("expected_busbw_gbps"))
    hlines = [{"y": expected, "label": "expected", "cls": "expected"}] if expected else []
    out.append('<figure><figcaption>busbw against message size (log scale)</figcaption>'
               + line_plot("busbw-plot", series, x_labels=x_labels, x_title="message size", y_title="busbw (GB/s)",
                           hlines=hlines) + "</figure>")
    base = smoke.get("baseline") or {}
    if base.get("path"):
        state = ("compared" if base.get("comparable") else
                 "not comparable: " + "; ".join(base.get("differences") or []) if base.get("comparable") is False
                 else "; ".join(base.get("differences") or []) or "-")
        out.append(f'<p><i>baseline</i> <code>{esc(base["path"])}</code>: {esc(state)}</p>')
    iso = smoke.get("isolation") or {}
    if iso.get("rounds"):
        out.append('<h3>Bad node search (pairs)</h3><table id="pairs-table"><thead><tr><th>round</th><th>pair</th>'
                   '<th>outcome</th></tr></thead><tbody>')
        for i, rnd in enumerate(iso["rounds"], 1):
            for pair, outcome in zip(rnd.get("pairs") or [], rnd.get("outcome") or []):
                bad = not str(outcome).startswith("ok") or any(p in (iso.get("bad") or []) for p in pair)
                out.append(f'<tr class="{"st-fail" if bad else ""}"><td>{i}</td><td>{esc(" + ".join(pair))}</td>'
                           f'<td>{esc(outcome)}</td></tr>')
        out.append("</tbody></table>")
    if iso.get("summary"):
        out.append(f'<p><i>verdict:</i> {esc(iso["summary"])}</p>')
    out.append("</section>")
    return "".join(out)


def _links_section(doc: dict[str, Any], baselines: list[dict[str, Any]]) -> str:
    smoke = doc.get("allreduce") or {}
    links = smoke.get("links") or []
    if not smoke.get("ran") or not links:
        return ""
    slow = {(str(lk.get("src")), str(lk.get("dst"))) for lk in smoke.get("slow_links") or []}
    base = {(str(lk.get("src")), str(lk.get("dst"))): _f(lk.get("gbps"))
            for lk in (baselines[-1].get("links") if baselines else []) or []}
    nodes = [n["name"] for n in doc["nodes"]]
    out = ['<section id="links"><h2>Links: the TCP probe</h2>',
           "<p>Each measured link, src (row) to dst (column), coloured by its figure while every node sends to the "
           "next at once (the all-reduce's own traffic); a red frame marks a link far below the others "
           f"({len(slow)} slow). Hover a cell for its figures and the baseline.</p>",
           heat_map(nodes, links, slow, {k: v for k, v in base.items() if v})]
    if slow:
        out.append('<table id="slow-links"><thead><tr><th>slow link</th><th>GB/s (ring)</th><th>baseline</th></tr>'
                   "</thead><tbody>")
        for lk in smoke.get("slow_links") or []:
            key = (str(lk.get("src")), str(lk.get("dst")))
            out.append(f'<tr class="st-fail"><td>{esc(key[0])} \u2192 {esc(key[1])}</td><td>{fmt(lk.get("gbps"))}</td>'
                       f"<td>{fmt(base.get(key))}</td></tr>")
        out.append("</tbody></table>")
    out.append("</section>")
    return "".join(out)


def _history_section(doc: dict[str, Any], baselines: list[dict[str, Any]], warnings: list[str]) -> str:
    out = ['<section id="history"><h2>busbw over the saved baselines</h2>']
    for w in warnings:
        out.append(f'<p class="st-warn">{esc(w)}</p>')
    runs = history(baselines)
    if not runs:
        out.append('<p class="empty">no saved baseline: <code>provision verify --smoke --save-baseline</code> keeps '
                   "one (each save on the same cluster adds a run); give it with <code>--baseline FILE|DIR</code></p>"
                   "</section>")
        return "".join(out)
    sizes = sorted({b for r in runs for b in r["rows"]})
    big = [b for b in sizes if b >= 16 << 20] or sizes[-1:]
    t0 = runs[0]["saved_at"]
    span = max(runs[-1]["saved_at"] - t0, 1.0)
    day = span > 2 * 86400
    x_labels = {}
    for r in runs if len(runs) <= 8 else runs[:: max(1, len(runs) // 8)]:
        x_labels[(r["saved_at"] - t0) / 3600] = time.strftime("%m-%d" if day else "%m-%d %H:%M", time.localtime(r["saved_at"]))
    series = []
    for i, b in enumerate(big[-3:]):
        series.append({"name": human_bytes(b), "cls": f"h{i}", "points": [
            ((r["saved_at"] - t0) / 3600, float(r["rows"][b]),
             f'{time.strftime("%Y-%m-%d %H:%M", time.localtime(r["saved_at"]))}: {human_bytes(b)} busbw '
             f'{r["rows"][b]:.3g} GB/s') for r in runs if r["rows"].get(b) is not None]})
    smoke = doc.get("allreduce") or {}
    now = _f(smoke.get("busbw_gbps")) if smoke.get("ran") else None
    hlines = [{"y": now, "label": "this run", "cls": "run"}] if now else []
    out.append(f"<p>{len(runs)} saved run(s) in {len(baselines)} baseline file(s) "
               f"({esc(', '.join(b['path'] for b in baselines))}), at the bandwidth-bound sizes.</p>")
    out.append('<figure><figcaption>busbw of each saved run (hours since the first)</figcaption>'
               + line_plot("history-plot", series, x_labels=x_labels, x_title="saved at", y_title="busbw (GB/s)",
                           hlines=hlines) + "</figure>")
    out.append('<table id="history-table" class="num"><thead><tr><th>saved at</th>'
               + "".join(f"<th>{human_bytes(b)}</th>" for b in sizes) + "</tr></thead><tbody>")
    for r in runs:
        out.append(f'<tr><td>{time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["saved_at"]))}</td>'
                   + "".join(f"<td>{fmt(r['rows'].get(b))}</td>" for b in sizes) + "</tr>")
    out.append("</tbody></table></section>")
    return "".join(out)


def _mesh_versions_section(doc: dict[str, Any]) -> str:
    out = []
    mesh = doc.get("mesh") or {}
    if mesh.get("ran"):
        total = sum(len(r) for r in (mesh.get("matrix") or {}).values())
        bad = [(s, d, c) for s, r in (mesh.get("matrix") or {}).items() for d, c in r.items() if not c.get("ok")]
        out.append(f'<section id="mesh"><h2>SSH mesh</h2><p>{total - len(bad)} of {total} logins worked.</p>')
        if bad:
            out.append('<table><thead><tr><th>from</th><th>to</th><th>error</th><th>ssh said</th></tr></thead><tbody>')
            out += [f'<tr class="st-fail"><td>{esc(s)}</td><td>{esc(d)}</td><td>{esc(c.get("error"))}</td>'
                    f'<td>{esc(c.get("detail"))}</td></tr>' for s, d, c in bad]
            out.append("</tbody></table>")
        out.append("</section>")
    versions = doc.get("versions") or {}
    if versions.get("ran"):
        nodes = list(versions.get("nodes") or {})
        differing = versions.get("differing") or []
        out.append(f'<section id="versions"><h2>Versions</h2><p>{len(differing)} of {len(versions.get("fields") or [])}'
                   f' field(s) differ between the {len(nodes)} nodes.</p><table><thead><tr><th>field</th><th>value</th>'
                   "<th>nodes</th></tr></thead><tbody>")
        for f in versions.get("fields") or []:
            values: dict[str, list[str]] = {}
            for n in nodes:
                values.setdefault(str(versions["nodes"][n].get(f, "") or "-"), []).append(n)
            for value, members in sorted(values.items(), key=lambda kv: -len(kv[1])):
                cls = ' class="st-fail"' if f in differing else ""
                out.append(f"<tr{cls}><td>{esc(f)}</td><td>{esc(value)}</td><td>"
                           f'{"all" if len(values) == 1 else esc(views.hostlist(members))}</td></tr>')
        out.append("</tbody></table></section>")
    return "".join(out)


CSS = """
:root{--fail:#c62828;--warn:#b26a00;--ok:#2e7d32;--skip:#757575;--line:#ddd}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1400px;padding:16px 24px;color:#222}
h1{font-size:22px;margin:0 0 4px}h2{font-size:18px;border-bottom:1px solid var(--line);padding-bottom:4px;margin-top:32px}
h3{font-size:15px}code{font:12px/1.3 ui-monospace,Menlo,Consolas,monospace;background:#f4f4f4;padding:1px 3px}
.verdict{display:inline-block;font-weight:700;padding:2px 10px;border-radius:4px;color:#fff}
.verdict.ok{background:var(--ok)}.verdict.failed{background:var(--fail)}
table{border-collapse:collapse;margin:8px 0}th,td{border:1px solid var(--line);padding:3px 6px;text-align:left;vertical-align:top}
th{background:#fafafa;cursor:pointer}table.num td{text-align:right;font-variant-numeric:tabular-nums}
tr.st-fail td.state,tr.st-down td.state,tr.st-slow td.state,.st-fail>b{color:var(--fail);font-weight:700}
tr.st-warn td.state,.st-warn>b,p.st-warn{color:var(--warn)}tr.st-ok td.state{color:var(--ok)}
td.node{font-family:ui-monospace,Menlo,Consolas,monospace;white-space:nowrap}
.scroll{overflow:auto;max-height:80vh;border:1px solid var(--line)}
table.grid{margin:0}table.grid td.c{text-align:center;cursor:pointer;min-width:18px;padding:2px}
table.grid td.pass{color:var(--ok)}table.grid td.fail{background:#fde0e0;color:var(--fail);font-weight:700}
table.grid td.warn{background:#fff3d6;color:var(--warn)}table.grid td.skip{color:var(--skip)}
table.grid thead th{position:sticky;top:0;z-index:1}table.grid td.node{position:sticky;left:0;background:#fff}
th.rot{white-space:nowrap;vertical-align:bottom;padding:4px 2px;text-align:center}
th.rot span{writing-mode:vertical-rl;transform:rotate(180deg);font-weight:400;font-size:12px}
.controls{margin:6px 0}.detail{border:1px solid var(--line);background:#fcfcfc;padding:8px;margin:8px 0}
.empty{color:var(--skip)}ol.failures li,ul.findings li{margin-bottom:6px}
svg .grid{stroke:#eee}svg .axis{stroke:#555}svg .tick,svg .legend{font-size:11px;fill:#444}svg .title{font-size:12px;fill:#222}
svg .series{fill:none;stroke-width:2}svg .run{stroke:#1565c0;fill:#1565c0}svg .base{stroke:#8e24aa;fill:#8e24aa;stroke-dasharray:5 3}
svg path.series.base{fill:none}svg path.series.run{fill:none}svg circle.base{fill:#8e24aa}
svg .hline{stroke-width:1.5;stroke-dasharray:6 4}svg .expected{stroke:var(--ok)}svg .hline.run{stroke:#1565c0}
svg .h0{stroke:#00897b;fill:#00897b}svg .h1{stroke:#f4511e;fill:#f4511e}svg .h2{stroke:#3949ab;fill:#3949ab}
svg path.h0,svg path.h1,svg path.h2{fill:none}
svg.heat .frame{fill:#f7f7f7;stroke:#ccc}svg.heat .cell{stroke:#fff;stroke-width:.5}svg.heat .cell.slow,svg.heat .legend-slow{stroke:var(--fail);stroke-width:3}
figure{margin:8px 0}figcaption{font-weight:600;margin-bottom:4px}
"""

JS = r"""
(function () {
  "use strict";
  function applyFilters(id) {
    var table = document.getElementById(id);
    if (!table) { return; }
    var only = document.querySelector('.only-problems[data-target="' + id + '"]');
    var search = document.querySelector('.node-search[data-target="' + id + '"]');
    var text = search ? search.value.trim().toLowerCase() : "";
    var shown = 0;
    table.querySelectorAll("tbody tr").forEach(function (tr) {
      var hide = (only && only.checked && tr.dataset.state === "ok") ||
                 (text && tr.dataset.node.toLowerCase().indexOf(text) < 0);
      tr.hidden = !!hide;
      if (!hide) { shown += 1; }
    });
    table.dataset.shown = String(shown);
  }
  document.querySelectorAll(".only-problems, .node-search").forEach(function (el) {
    el.addEventListener("input", function () { applyFilters(el.dataset.target); });
    el.addEventListener("change", function () { applyFilters(el.dataset.target); });
    applyFilters(el.dataset.target);
  });
  document.querySelectorAll("table.sortable th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var body = th.closest("table").tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var dir = th.dataset.dir === "asc" ? -1 : 1;
      th.dataset.dir = dir === 1 ? "asc" : "desc";
      rows.sort(function (a, b) {
        return dir * a.cells[col].textContent.localeCompare(b.cells[col].textContent, undefined, {numeric: true});
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
  var details = JSON.parse(document.getElementById("cell-details").textContent);
  var panel = document.getElementById("cell-detail");
  var grid = document.getElementById("check-table");
  if (grid && panel) {
    grid.addEventListener("click", function (ev) {
      var td = ev.target.closest("td.c");
      if (!td || td.dataset.d === undefined) { return; }
      var d = details[Number(td.dataset.d)];
      panel.textContent = "";
      var h = document.createElement("h3");
      h.textContent = d.node + ": " + d.key;
      panel.appendChild(h);
      d.checks.forEach(function (c) {
        var p = document.createElement("p");
        p.className = "st-" + c.status;
        var b = document.createElement("b");
        b.textContent = c.status.toUpperCase() + " " + c.check;
        p.appendChild(b);
        p.appendChild(document.createTextNode(": " + c.detail + (c.fix ? "  fix: " + c.fix : "")));
        panel.appendChild(p);
      });
      panel.hidden = false;
    });
  }
  document.body.dataset.ready = "1";
}());
"""


def render_html(doc: dict[str, Any], baselines: list[dict[str, Any]] = (), warnings: list[str] = (),
                title: str = "provision verify report") -> str:
    """The whole page, self-contained."""
    baselines = list(baselines)
    checks_html, details = _checks_section(doc)
    blob = json.dumps(details, separators=(",", ":")).replace("</", "<\\/").replace("<!--", "<\\!--")
    generated = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    return "".join([
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "script-src 'unsafe-inline'; img-src data:\">",
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
        _summary_section(doc, title),
        '<nav><a href="#nodes">nodes</a> \u00b7 <a href="#checks">checks</a> \u00b7 <a href="#allreduce">all-reduce</a>'
        ' \u00b7 <a href="#links">links</a> \u00b7 <a href="#history">history</a></nav>',
        _nodes_section(doc),
        checks_html,
        _allreduce_section(doc, baselines),
        _links_section(doc, baselines),
        _history_section(doc, baselines, list(warnings)),
        _mesh_versions_section(doc),
        f'<footer><p class="empty">made by provision report at {esc(generated)}</p></footer>',
        f'<script type="application/json" id="cell-details">{blob}</script>',
        f"<script>{JS}</script></body></html>\n",
    ])


def build(document: str, *, baselines: list[str] = (), title: str | None = None,
          stdin_text: str | None = None) -> tuple[str, dict[str, Any], list[str]]:
    """Read the inputs and make the page -> (html, document, warnings); ReportError on bad input."""
    doc = load_document(document, stdin_text)
    default = ((doc.get("allreduce") or {}).get("baseline") or {}).get("path")
    found, warnings = load_baselines(doc, list(baselines), default)
    page = render_html(doc, found, warnings, title or "provision verify report")
    return page, doc, warnings
