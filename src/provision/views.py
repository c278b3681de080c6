"""What `provision verify` shows people, from its document (schema 1), at any cluster size.

The per-node view reads a cluster the way `sinfo -N -R` does: one row per node that has something
to say (state, its failing checks, the first cause), the healthy nodes folded into one line
(`ok  30 nodes: node[1-2,4-31]`) when there are many. The check x node grid, the SSH matrix and the
per-node versions table are drawn only when they fit the terminal (or, with `--grid`, in slices of
nodes that fit); otherwise their compact forms are shown. Nothing is cut to "…": text is wrapped
between words and between node ranges, never inside a node name or a check id.

The functions return rich `Text` lines (pure, tested at 8, 32 and 1,000 nodes, 80 and 200
columns); `render` prints them.
"""

from __future__ import annotations

import re
import textwrap
from bisect import bisect_left
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from rich.table import Table
from rich.text import Text

SEVERITY = {"fail": 3, "warn": 2, "pass": 1, "skip": 0}
# healthy nodes are folded into one line when there are more of them than this
FOLD_AT = 8
# nodes whose rows share the same warnings are folded when there are more of them than this
FOLD_WARN_AT = 8
# failure details shown under the tables (grouped); the rest: --json or provision report
MAX_FAILURE_GROUPS = 40
# per-node all-reduce rows shown in full up to this many nodes, then only the slow ones
MAX_SMOKE_ROWS = 16
STATE_STYLE = {"down": "bold red", "fail": "red", "slow": "red", "warn": "yellow", "ok": "green"}
GAP = "  "
_SEPARATORS = " .->:/"


def is_cluster_check(name: str) -> bool:
    """The all-reduce's own verdicts (busbw, expected, bad node search, baseline): about the cluster,
    recorded on the master node."""
    return name == "allreduce" or name.startswith("allreduce ")


def hostlist(names: Iterable[str]) -> str:
    """node1,node2,node3,node7 -> node[1-3,7] (as SLURM writes node lists)."""
    names = list(names)
    if not names:
        return ""
    try:
        import hostlist as _hl

        return _hl.collect_hostlist(names)
    except Exception:  # a name python-hostlist cannot fold: list them
        return ",".join(names)


def row_key(check: str, nodes: list[str]) -> str:
    """One grid row for the per-peer checks: 'ssh node1->node2' -> 'ssh *', 'nccl_net.reach.node2' -> 'nccl_net.reach *'."""
    return RowKeys(nodes)(check)


class RowKeys:
    """row_key for one node list, prepared once (a document's checks share it).

    A check id loses, from its end, every node name it ends with (and the separators before it),
    names tried longest first, pass after pass until none is left; it is an id of its own when it is a
    node name. Prepared: the names grouped by length, so that one id costs a lookup per distinct length
    instead of a scan of every name (the per-peer ids grow with N: N x N scans at fleet size)."""

    def __init__(self, nodes: Iterable[str]):
        order = sorted(nodes, key=len, reverse=True)
        self.empty = "" in order
        groups: dict[int, dict[str, list[int]]] = {}
        for pos, name in enumerate(order):
            groups.setdefault(len(name), {}).setdefault(name, []).append(pos)
        # longest first, as the names are tried; each name's places in that order
        self.groups = sorted(((n, g) for n, g in groups.items() if n), reverse=True)
        self.cache: dict[str, str] = {}

    def __call__(self, check: str) -> str:
        out = self.cache.get(check)
        if out is None:
            out = self.cache[check] = self._key(check)
        return out

    def _key(self, check: str) -> str:
        if self.empty:
            # the empty name ends every id: the id is stripped to nothing, which keeps the id as it is
            return check
        key = check
        stripped = True
        while stripped:
            stripped = False
            for length, names in self.groups:
                at = 0  # the next name of this length to try, in the order they are tried
                while len(key) >= length:
                    tail = key[-length:]
                    places = names.get(tail)
                    pos = bisect_left(places, at) if places else 0
                    if not places or pos == len(places) or key == tail:
                        break
                    key = key[:-length].rstrip(_SEPARATORS)
                    stripped = True
                    at = places[pos] + 1
        return f"{key} *" if key != check and key else check


# ---------------------------------------------------------------- the per-node summary

def node_summaries(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One entry per node, in inventory order: {node, state, failing [check ids], cause, fix,
    warnings [check ids]}. state: down (unreachable), fail, slow (named by the all-reduce's pair
    search or its link probe, no check of its own failed), warn, ok."""
    smoke = doc.get("allreduce") or {}
    named = _named_by_allreduce(smoke)
    by_node: dict[str, list[dict]] = {}
    for c in doc.get("checks") or []:
        if is_cluster_check(c.get("check", "")):
            continue
        by_node.setdefault(c.get("node", ""), []).append(c)
    out = []
    for n in doc.get("nodes") or []:
        name = n["name"]
        mine = by_node.get(name, [])
        fails = [c for c in mine if c.get("status") == "fail"]
        warns = [c for c in mine if c.get("status") == "warn"]
        entry = {"node": name, "failing": _unique(c["check"] for c in fails),
                 "warnings": _unique(c["check"] for c in warns), "cause": "", "fix": ""}
        if not n.get("reachable", True):
            entry["state"] = "down"
        elif fails:
            entry["state"] = "fail"
        elif name in named:
            entry["state"] = "slow"
        elif warns:
            entry["state"] = "warn"
        else:
            entry["state"] = "ok"
        first = (fails or warns or [None])[0]
        if first is not None and entry["state"] != "slow":
            entry["cause"], entry["fix"] = first.get("detail") or "", first.get("fix") or ""
        if name in named:
            entry["failing"] = entry["failing"] + [k for k in named[name] if k not in entry["failing"]]
            if not entry["cause"]:
                entry["cause"] = named[name][next(iter(named[name]))]
        out.append(entry)
    return out


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _named_by_allreduce(smoke: dict[str, Any]) -> dict[str, dict[str, str]]:
    """node -> {finding: cause} for the nodes the all-reduce named: the pair search's bad nodes and
    the sending end of each slow link."""
    named: dict[str, dict[str, str]] = {}
    if not smoke.get("ran"):
        return named
    iso = smoke.get("isolation") or {}
    details = {}
    for c in smoke.get("failures") or []:
        if c.get("check") == "bad_node":
            node = c.get("node") or str(c.get("detail", "")).split(":", 1)[0]
            details[node] = c.get("detail") or ""
    for node in iso.get("bad") or []:
        named.setdefault(str(node), {})["allreduce: bad node"] = details.get(str(node)) or iso.get("summary") or ""
    for lk in smoke.get("slow_links") or []:
        src, dst = str(lk.get("src")), str(lk.get("dst"))
        named.setdefault(src, {})[f"slow link {src}->{dst}"] = (
            f"link {src} -> {dst} carries {_gb(lk.get('gbps'))} GB/s with every link busy, far below the other links")
    return named


def _gb(value: Any) -> str:
    try:
        return f"{float(value):.3g}"
    except (TypeError, ValueError):
        return "?"


def cluster_summary(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The all-reduce's failed or warned verdicts, worst first: [{check, status, detail, fix}]."""
    out = [c for c in doc.get("checks") or [] if is_cluster_check(c.get("check", "")) and c.get("status") in
           ("fail", "warn")]
    return sorted(out, key=lambda c: -SEVERITY.get(c["status"], 3))


# ---------------------------------------------------------------- wrapping that never cuts a name

def pack(tokens: list[str], width: int, sep: str = ", ") -> list[str]:
    """Tokens joined by sep into lines of at most width; a token is never split (a longer one
    stands alone on its line)."""
    lines: list[str] = []
    cur = ""
    for i, tok in enumerate(tokens):
        piece = tok + (sep.rstrip() if i < len(tokens) - 1 else "")
        if not cur:
            cur = piece
        elif len(cur) + 1 + len(piece) <= width:
            cur += " " + piece
        else:
            lines.append(cur)
            cur = piece
    if cur:
        lines.append(cur)
    return lines or [""]


def wrap(text: str, width: int) -> list[str]:
    """Words into lines of at most width (a longer word stands alone, unbroken)."""
    return textwrap.wrap(text, max(width, 8), break_long_words=False, break_on_hyphens=False) or [""]


def hostlist_tokens(names: list[str]) -> list[str]:
    """A folded node list split where it may be wrapped: between ranges, inside brackets too
    (node[1-3,5] -> 'node[1-3,', '5]'), never inside a name or a range."""
    text = hostlist(names)
    tokens, cur, depth = [], "", 0
    for ch in text:
        cur += ch
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == ",":
            tokens.append(cur)
            cur = ""
    if cur:
        tokens.append(cur)
    return tokens


def _pack_joined(tokens: list[str], width: int) -> list[str]:
    """Tokens that carry their own separators (hostlist_tokens) into lines of at most width."""
    lines, cur = [], ""
    for tok in tokens:
        if cur and len(cur) + len(tok) > width:
            lines.append(cur)
            cur = tok
        else:
            cur += tok
    if cur:
        lines.append(cur)
    return lines or [""]


# ---------------------------------------------------------------- the per-node view

def per_node_lines(doc: dict[str, Any], width: int, fold_at: int = FOLD_AT) -> list[Text]:
    """The per-node view as lines of at most `width` columns (where words allow)."""
    rows = node_summaries(doc)
    shown = [r for r in rows if r["state"] in ("down", "fail", "slow")]
    ok = [r["node"] for r in rows if r["state"] == "ok"]
    warn = [r for r in rows if r["state"] == "warn"]
    folded_warn: list[tuple[list[str], dict]] = []
    groups: dict[tuple, list[dict]] = {}
    for r in warn:
        groups.setdefault((tuple(r["warnings"]), _normal(r["cause"], r["node"])), []).append(r)
    for members in groups.values():
        if len(members) > FOLD_WARN_AT:
            folded_warn.append(([m["node"] for m in members], members[0]))
        else:
            shown.extend(members)
    if len(ok) <= fold_at:
        shown.extend(r for r in rows if r["state"] == "ok")
        ok = []
    order = {r["node"]: i for i, r in enumerate(rows)}
    shown.sort(key=lambda r: order[r["node"]])
    cluster = cluster_summary(doc)

    names = [r["node"] for r in shown] + (["cluster"] if cluster else [])
    w_node = max([len(n) for n in names] + [4])
    w_state = 5
    ids = [i for r in shown for i in (r["failing"] or r["warnings"])] + [c["check"] for c in cluster]
    longest_id = max([len(i) for i in ids] + [len("failing checks")])
    rest = width - w_node - w_state - 2 * len(GAP)
    joined = max([len(", ".join(r["failing"] or r["warnings"])) for r in shown] + [len(c["check"]) for c in cluster]
                 + [len("failing checks")])
    w_checks = max(longest_id, min(joined, int(rest * 0.4)))
    w_cause = rest - w_checks - len(GAP)
    cause_below = w_cause < 24
    lines: list[Text] = []
    head = Text()
    head.append("node".ljust(w_node) + GAP + "state".ljust(w_state) + GAP + "failing checks".ljust(w_checks), style="bold")
    if not cause_below:
        head.append(GAP + "first cause", style="bold")
    lines.append(head)

    def add_row(name: str, state: str, checks: list[str], cause: str) -> None:
        left = pack(checks, w_checks) if checks else ["-"]
        right = wrap(cause, w_cause) if cause and not cause_below else []
        for i in range(max(len(left), len(right), 1)):
            line = Text()
            line.append((name if i == 0 else "").ljust(w_node), style="bold" if i == 0 else "")
            line.append(GAP)
            line.append((state if i == 0 else "").ljust(w_state), style=STATE_STYLE.get(state, ""))
            line.append(GAP)
            line.append((left[i] if i < len(left) else "").ljust(w_checks if right else 0))
            if i < len(right):
                line.append(GAP + right[i])
            lines.append(_rstrip(line))
        if cause and cause_below:
            for part in wrap(cause, width - 4):
                lines.append(Text("    " + part, style="dim"))

    for r in shown:
        add_row(r["node"], r["state"], r["failing"] or r["warnings"], r["cause"])
    for c in cluster:
        add_row("cluster", c["status"], [c["check"]], c.get("detail") or "")
    for members, sample in folded_warn:
        _folded(lines, "warn", members, width, w_node, w_state,
                f"{len(members)} nodes with the same warnings ({', '.join(sample['warnings'])})")
    if ok:
        _folded(lines, "ok", ok, width, w_node, w_state, f"{len(ok)} nodes, every check passed or skipped")
    return lines


def _folded(lines: list[Text], state: str, members: list[str], width: int, w_node: int, w_state: int,
            what: str) -> None:
    indent = w_node + len(GAP) + w_state + len(GAP)
    first = Text()
    first.append("".ljust(w_node) + GAP)
    first.append(state.ljust(w_state), style=STATE_STYLE[state])
    first.append(GAP + what + ":")
    lines.append(first)
    for part in _pack_joined(hostlist_tokens(members), max(width - indent, 20)):
        lines.append(Text(" " * indent + part))


def _rstrip(text: Text) -> Text:
    text.rstrip()
    return text


def _normal(text: str, node: str) -> str:
    """text with the node's name (as a word) as {node}, so that the same finding on many nodes reads alike."""
    if node and node not in (text or ""):
        return text or ""
    return _node_word(node).sub("{node}", text or "")


@lru_cache(maxsize=8192)
def _node_word(node: str) -> re.Pattern:
    """The node's name as a word (compiled once per node: re's own cache holds 512, a fleet has more)."""
    return re.compile(r"\b%s\b" % re.escape(node))


# ---------------------------------------------------------------- the grid (when it fits)

def grid_slices(doc: dict[str, Any], width: int) -> tuple[dict[str, dict[str, str]], list[list[str]]]:
    """The check x node cells (worst status per row key) and the node columns split into slices
    that each fit width (one slice: the whole grid fits)."""
    nodes = [n["name"] for n in doc.get("nodes") or []]
    keys = RowKeys(nodes)
    rows: dict[str, dict[str, str]] = {}
    for c in doc.get("checks") or []:
        cells = rows.setdefault(keys(c["check"]), {})
        old = cells.get(c["node"])
        if old is None or SEVERITY.get(c["status"], 3) > SEVERITY.get(old, 3):
            cells[c["node"]] = c["status"]
    first = max([len(k) for k in rows] + [len("check")]) + 4  # the row name, borders and padding
    slices: list[list[str]] = [[]]
    used = first
    for n in nodes:
        need = len(n) + 3
        if slices[-1] and used + need > width:
            slices.append([])
            used = first
        slices[-1].append(n)
        used += need
    return rows, slices


def matrix_fits(names: list[str], width: int) -> bool:
    first = max([len(n) for n in names] + [len("from \\ to")]) + 4
    return first + sum(len(n) + 3 for n in names) <= width


def versions_fit(versions: dict[str, Any], width: int) -> bool:
    nodes = list(versions.get("nodes") or {})
    first = max([len(f) for f in versions.get("fields") or []] + [1]) + 4
    cols = 0
    for n in nodes:
        vals = [len(str(versions["nodes"][n].get(f, "") or "-")) for f in versions.get("fields") or []]
        cols += max(vals + [len(n)]) + 3
    return first + cols <= width


def versions_lines(versions: dict[str, Any], width: int) -> list[Text]:
    """Each field once: its value on every node, or each value with the nodes that have it."""
    nodes = list(versions.get("nodes") or {})
    fields = versions.get("fields") or []
    differing = set(versions.get("differing") or [])
    w = max([len(f) for f in fields] + [5])
    lines = [Text(f"versions ({len(nodes)} nodes; {len(differing)} field(s) differ, in red)", style="bold")]
    for f in fields:
        values: dict[str, list[str]] = {}
        for n in nodes:
            values.setdefault(str(versions["nodes"][n].get(f, "") or "-"), []).append(n)
        if f not in differing:
            text = f"{next(iter(values), '-')} (all)"
            parts = wrap(text, width - w - 4)
        else:
            tokens = []
            for value, members in sorted(values.items(), key=lambda kv: -len(kv[1])):
                tokens.append(f"{value} on")
                tokens.extend(hostlist_tokens(members)[:-1])
                tokens.append(hostlist_tokens(members)[-1] + ";")
            parts = _pack_joined([t if t.endswith((",", "[")) else t + " " for t in tokens], width - w - 4)
        for i, part in enumerate(parts):
            line = Text("  ")
            line.append((f if i == 0 else "").ljust(w), style="red" if f in differing else "")
            line.append(GAP + part.rstrip(" ;"), style="red" if f in differing else "")
            lines.append(line)
    return lines


def mesh_lines(mesh: dict[str, Any], width: int, limit: int = MAX_FAILURE_GROUPS) -> list[Text]:
    """The SSH mesh without the matrix: how many logins worked, and each failed one."""
    total = ok = 0
    bad = []
    for src in mesh.get("nodes") or []:
        for dst, cell in (mesh["matrix"].get(src) or {}).items():
            total += 1
            if cell.get("ok"):
                ok += 1
            else:
                bad.append((src, dst, cell))
    head = Text("ssh mesh: ", style="bold")
    head.append(f"{ok} of {total} logins between {len(mesh.get('nodes') or [])} nodes worked",
                style="green" if ok == total else "red")
    lines = [head]
    for src, dst, cell in bad[:limit]:
        for i, part in enumerate(wrap(f"{src} -> {dst}: {cell.get('error') or 'failed'}: {cell.get('detail') or ''}",
                                      width - 4)):
            lines.append(Text(("  " if i == 0 else "    ") + part, style="red" if i == 0 else ""))
    if len(bad) > limit:
        lines.append(Text(f"  ... and {len(bad) - limit} more failed logins (--grid, --json or provision report)"))
    return lines


# ---------------------------------------------------------------- failures, grouped

def failure_groups(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Failed and warned checks, the same check with the same cause and fix on several nodes
    told once with their node list: [{status, check, nodes, detail, fix}], fails first."""
    groups: dict[tuple, dict[str, Any]] = {}
    members: dict[tuple, set[str]] = {}
    keys = RowKeys(n["name"] for n in doc.get("nodes") or [])
    for c in doc.get("checks") or []:
        if c.get("status") not in ("fail", "warn"):
            continue
        node = c.get("node", "")
        key = (c["status"], _normal(keys(c["check"]), node), _normal(c.get("detail", ""), node),
               _normal(c.get("fix", ""), node))
        g = groups.setdefault(key, {"status": c["status"], "check": c["check"], "nodes": [], "detail": c.get("detail", ""),
                                    "fix": c.get("fix", "")})
        seen = members.setdefault(key, set())
        if node not in seen:
            seen.add(node)
            g["nodes"].append(node)
    return sorted(groups.values(), key=lambda g: -SEVERITY.get(g["status"], 3))


def failure_lines(doc: dict[str, Any], width: int, limit: int = MAX_FAILURE_GROUPS) -> list[Text]:
    groups = failure_groups(doc)
    lines: list[Text] = []
    for g in groups[:limit]:
        colour = "red" if g["status"] == "fail" else "yellow"
        head = Text()
        head.append(g["status"].upper(), style=colour)
        if is_cluster_check(g["check"]):
            head.append(f" cluster: {g['check']}")
        elif len(g["nodes"]) == 1:
            head.append(f" {g['nodes'][0]}: {g['check']}")
        else:
            head.append(f" {g['check']} on {len(g['nodes'])} nodes: {hostlist(g['nodes'])} (cause and fix as on {g['nodes'][0]})")
        lines.append(head)
        for label, text in (("cause", g["detail"]), ("fix", g["fix"])):
            if not text:
                continue
            for i, part in enumerate(wrap(text, width - 11)):
                lines.append(Text(("    " + f"{label}:".ljust(7) if i == 0 else " " * 11) + part))
    if len(groups) > limit:
        more = sum(len(g["nodes"]) for g in groups[limit:])
        lines.append(Text(f"... and {len(groups) - limit} more failed or warned checks on {more} node(s): "
                          "provision verify --json, or provision report"))
    return lines


# ---------------------------------------------------------------- printing

def grid_table(rows: dict[str, dict[str, str]], nodes: list[str], title: str) -> Table:
    from provision.terminal import make_table

    mark = {"pass": "[green]✓[/green]", "fail": "[red]✗[/red]", "warn": "[yellow]![/yellow]", "skip": "[dim]-[/dim]"}
    table = make_table(title, ["check"] + nodes)
    for col in table.columns:
        col.no_wrap = True
    for name, cells in rows.items():
        table.add_row(name, *[mark[cells[n]] if n in cells else "" for n in nodes])
    return table
