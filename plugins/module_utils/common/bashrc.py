# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""The managed environment block in ~/.bashrc and the ~/.deepspeed_env file (plain Python).

Why above the guard: Debian/Ubuntu's ~/.bashrc starts with "If not running interactively, don't do
anything" (`case $- in *i*) ;; *) return;; esac` or `[ -z "$PS1" ] && return`). `ssh node cmd`,
pdsh, mpirun and DeepSpeed's runner start a non-interactive bash that reads ~/.bashrc and returns
at that guard: anything appended at the end is never seen by them.

merge_env(facts, extra)      -> {"env", "path", "ld_library_path", "source", "conflicts", "stages"}
render_block(merged)         -> the block text (deterministic, values shell-quoted)
lost_exports(text, known)    -> the stages the block holds exports of that this run does not know
place_block(text, block)     -> (new_text, where)   user content outside the block kept byte for byte
find_guard(lines)            -> index of the first line of the first non-interactive guard, or None
update_deepspeed_env(text, env, previous_keys) -> new text (NAME=value lines; DeepSpeed reads no comments)
"""

from __future__ import annotations

import re
import shlex

BEGIN = "# BEGIN provision managed environment (shell_env)"
END = "# END provision managed environment (shell_env)"
DS_KEYS_PREFIX = "# ~/.deepspeed_env keys:"
# The stages whose exports the block holds (provision_env_<stage> facts that set something): a later run
# that does not know one of them (the stage left out by --tags, no cached facts) must not drop its lines.
STAGES_PREFIX = "# exported by:"
FACT_PREFIX = "provision_env_"

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# values DeepSpeed's runner can pass through `export NAME=value` without quoting
_DS_SAFE = re.compile(r"^[A-Za-z0-9_./:=,+@%^-]*$")


def _as_list(value):
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value]
    return [str(value)]


def merge_env(facts, extra=None):
    """facts: [(fact_name, {"env", "path", "ld_library_path", "source"})] or a {name: fact} dict.

    Facts are taken in the order of their names, the user's extra variables last; a variable set by
    two facts to different values keeps the later one and is reported in "conflicts".
    """
    items = sorted(facts.items()) if isinstance(facts, dict) else sorted(
        (tuple(f) for f in facts), key=lambda f: f[0])
    env, origin, conflicts = {}, {}, []
    path, ld_path, source = [], [], []

    def put(key, value, where):
        key = str(key)
        if not _NAME.match(key):
            raise ValueError("%s: %r is not a valid environment variable name" % (where, key))
        if key in ("PATH", "LD_LIBRARY_PATH"):
            raise ValueError("%s: set %s through the 'path'/'ld_library_path' lists, not env" % (where, key))
        value = "" if value is None else str(value)
        if key in env and env[key] != value:
            conflicts.append("%s: %s=%s (from %s) replaced by %s (from %s)" % (
                key, key, env[key], origin[key], value, where))
        env[key], origin[key] = value, where

    for name, fact in items:
        fact = fact or {}
        for key, value in sorted((fact.get("env") or {}).items()):
            put(key, value, name)
        for target, key in ((path, "path"), (ld_path, "ld_library_path"), (source, "source")):
            for item in _as_list(fact.get(key)):
                if item not in target:
                    target.append(item)
    for key, value in sorted((extra or {}).items()):
        put(key, value, "shell_env_extra_vars")
    stages = sorted({stage_of(name) for name, fact in items
                     if any((fact or {}).get(k) for k in ("env", "path", "ld_library_path", "source"))})
    return {"env": dict(sorted(env.items())), "path": path, "ld_library_path": ld_path,
            "source": source, "conflicts": conflicts, "stages": stages}


def stage_of(fact_name):
    """provision_env_python_env -> python_env."""
    name = str(fact_name)
    return name[len(FACT_PREFIX):] if name.startswith(FACT_PREFIX) else name


def common_env(envs):
    """The variables (name -> value) that every node sets to the same value."""
    envs = [e or {} for e in envs]
    if not envs:
        return {}
    first = envs[0]
    return {k: v for k, v in sorted(first.items()) if all(e.get(k) == v for e in envs[1:])}


def _prepend(var, item):
    quoted = shlex.quote(item)
    return 'case ":${%s:-}:" in *:%s:*) ;; *) export %s=%s"${%s:+:$%s}" ;; esac' % (
        var, quoted, var, quoted, var, var)


def render_block(merged, deepspeed_keys=None, stages=None):
    """The managed block, BEGIN..END lines included, newline-terminated. STAGES (a list): recorded in the
    block, for lost_exports() of a later run."""
    lines = [BEGIN,
             "# Managed by the provision.cluster.shell_env role: edit its variables, not these lines.",
             "# Above the non-interactive guard so that ssh/pdsh/mpirun/DeepSpeed see it too."]
    if stages is not None:
        lines.append("%s %s" % (STAGES_PREFIX, " ".join(sorted(set(stages))) or "-"))
    if deepspeed_keys is not None:
        lines.append("%s %s" % (DS_KEYS_PREFIX, " ".join(sorted(deepspeed_keys)) or "-"))
    for item in merged.get("source") or []:
        quoted = shlex.quote(item)
        lines.append("if [ -r %s ]; then . %s; fi" % (quoted, quoted))
    # prepended in reverse so that the first listed directory ends up first; no duplicates when
    # ~/.bashrc is read again by a nested shell
    for var, key in (("PATH", "path"), ("LD_LIBRARY_PATH", "ld_library_path")):
        for item in reversed(merged.get(key) or []):
            lines.append(_prepend(var, item))
    for key, value in sorted((merged.get("env") or {}).items()):
        lines.append("export %s=%s" % (key, shlex.quote(value)))
    lines.append(END)
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- guard detection

_COMMENT = re.compile(r"^\s*#")
_CASE = re.compile(r"""^\s*case\s+["']?\$-["']?\s+in\b""")
_ESAC = re.compile(r"\besac\b")
_IF = re.compile(r"^\s*if\s")
_FI = re.compile(r"(^|[;\s])fi\b")
_RETURN = re.compile(r"(^|[;&|\s(])return\b")
# a test of interactivity: $PS1 empty / unset, or $- lacking i
_INTERACTIVE_TEST = re.compile(
    r"""(\[\[?|\btest\b)[^\]]*(\$\{?PS1|["']?\$\{?-\}?["']?\s*(!?=|==)\s*["']?\*i\*)""")


def find_guard(lines):
    """Index of the line that starts the first 'return unless interactive' guard, or None.

    Forms handled: `case $- in *i*) ;; *) return;; esac` (one line or many), `[ -z "$PS1" ] && return`,
    `[ -n "$PS1" ] || return`, `[[ $- != *i* ]] && return`, `[[ $- == *i* ]] || return`,
    `test -z "$PS1" && return`, `if [ -z "$PS1" ]; then return; fi` (one line or many).
    """
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        if _COMMENT.match(line) or not line.strip():
            i += 1
            continue
        end = _ESAC if _CASE.match(line) else (_FI if _IF.match(line) and _INTERACTIVE_TEST.search(line) else None)
        if end is not None:
            # the compound command runs to its esac/fi (which may be on the same line)
            j = i
            while j < n and not end.search(lines[j] if j > i else line[len(line.split()[0]):]):
                j += 1
            if _RETURN.search("\n".join(l for l in lines[i:j + 1] if not _COMMENT.match(l))):
                return i
            i = j + 1
            continue
        if _INTERACTIVE_TEST.search(line) and _RETURN.search(line) and re.search(r"&&|\|\|", line):
            return i
        i += 1
    return None


def _leading_comments(lines, index):
    """Move the insertion point above the comment lines directly attached to the guard."""
    while index > 0 and _COMMENT.match(lines[index - 1]) and lines[index - 1].strip() not in (BEGIN, END):
        index -= 1
    return index


class MarkerError(ValueError):
    """The block's BEGIN/END lines do not pair: rewriting the file would drop the user's lines between
    a stray marker and ours. The message names the line (1-based) and the fix; the caller adds the file."""

    def __init__(self, line, message):
        ValueError.__init__(self, "line %d: %s" % (line, message))
        self.line = line


def split_block(text):
    """-> (text without the managed block, the block or None, line index it was at).

    MarkerError when the markers do not pair (a BEGIN without its END, an END alone, a second block):
    the lines between them may be the user's, so nothing is guessed."""
    lines = text.splitlines(keepends=True)
    begins = [i for i, line in enumerate(lines) if line.rstrip("\r\n") == BEGIN]
    ends = [i for i, line in enumerate(lines) if line.rstrip("\r\n") == END]
    if not begins and not ends:
        return text, None, None
    fix = "fix: remove the stray marker line (or add its partner) by hand, then re-run; nothing was changed"
    if len(begins) > 1:
        raise MarkerError(begins[1] + 1, "a second %r (the first is at line %d); %s" % (BEGIN, begins[0] + 1, fix))
    if len(ends) > 1:
        raise MarkerError(ends[1] + 1, "a second %r; %s" % (END, fix))
    if not ends:
        raise MarkerError(begins[0] + 1, "%r has no %r after it; %s" % (BEGIN, END, fix))
    if not begins:
        raise MarkerError(ends[0] + 1, "%r has no %r before it; %s" % (END, BEGIN, fix))
    start, stop = begins[0], ends[0]
    if stop < start:
        raise MarkerError(stop + 1, "%r comes before its %r (line %d); %s" % (END, BEGIN, start + 1, fix))
    return "".join(lines[:start] + lines[stop + 1:]), "".join(lines[start:stop + 1]), start


def place_block(text, block):
    """-> (new_text, where). The block goes above the first guard (or at the top when none).

    A block already above the guard with the same content stays where it is; otherwise it is
    removed and inserted again. Everything outside the block is kept byte for byte.
    """
    rest, old, at = split_block(text)
    rest_lines = rest.splitlines(keepends=True)
    guard = find_guard([l.rstrip("\r\n") for l in rest_lines])
    if old == block and at is not None and (guard is None or at <= guard):
        where = "kept at line %d" % (at + 1)
        return text, where
    if guard is None:
        index, where = 0, "top (no non-interactive guard)"
    else:
        index = _leading_comments([l.rstrip("\r\n") for l in rest_lines], guard)
        where = "above the non-interactive guard at line %d" % (guard + 1)
    if at is not None and (guard is None or at <= guard) and old is not None:
        index = at  # content changed but the place was fine: update in place
    if index > 0 and not rest_lines[index - 1].endswith("\n"):
        rest_lines[index - 1] += "\n"
    new = "".join(rest_lines[:index]) + block + "".join(rest_lines[index:])
    return new, where


def remove_block(text):
    return split_block(text)[0]


def deepspeed_keys_of(text):
    """The keys the previous block recorded as written to ~/.deepspeed_env."""
    _rest, block, _at = split_block(text)
    for line in (block or "").splitlines():
        if line.startswith(DS_KEYS_PREFIX):
            return [k for k in line[len(DS_KEYS_PREFIX):].split() if k != "-"]
    return []


def stages_of(text):
    """The stages the block in TEXT records as exporting into it; None when it records none (no block,
    or one written before blocks recorded them)."""
    _rest, block, _at = split_block(text)
    for line in (block or "").splitlines():
        if line.startswith(STAGES_PREFIX):
            return [k for k in line[len(STAGES_PREFIX):].split() if k != "-"]
    return None


def lost_exports(text, known):
    """The stages whose exports the block in TEXT holds and which this run does not know (KNOWN: the
    stages whose provision_env_<stage> fact is defined in this run, from the stage itself or the fact
    cache). Writing the block without them would drop their lines: the venv's PATH, the NCCL interface."""
    known = {stage_of(k) for k in known or []}
    return sorted(set(stages_of(text) or []) - known)


def deepspeed_safe(env):
    """-> (env DeepSpeed can export unquoted, [skipped names])."""
    ok, skipped = {}, []
    for key, value in sorted(env.items()):
        (ok.__setitem__(key, value) if _DS_SAFE.match(value) else skipped.append(key))
    return ok, skipped


def update_deepspeed_env(text, env, previous_keys=()):
    """NAME=value lines: ours set/updated, ours from last time removed, the user's kept in order.

    DeepSpeed splits every line at '=' (no comments, no blank lines), so the file holds nothing else.
    """
    ours = dict(env)
    drop = set(previous_keys) - set(ours)
    out, seen = [], set()
    for line in (text or "").splitlines():
        if not line.strip() or "=" not in line:
            continue
        key = line.split("=", 1)[0].strip()
        if key in drop or key in seen:
            continue
        if key in ours:
            out.append("%s=%s" % (key, ours[key]))
            seen.add(key)
        else:
            out.append(line)
    for key in sorted(ours):
        if key not in seen:
            out.append("%s=%s" % (key, ours[key]))
    return "".join(line + "\n" for line in out)
