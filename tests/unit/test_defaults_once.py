"""A default is written once (issue 32).

The settings every stage shares have their defaults in cluster_plan.DEFAULTS; a role's own settings
(verify's included: roles/verify) in roles/<role>/defaults/main.yml. Everything else reads them from
there (the provision.cluster.setting lookup, plugin_utils/verify.py Variables, module_utils/common/settings.py).
These tests fail when a default is restated: a shared literal in code, a `| default(literal)` of a
setting, a Python fallback `var("setting") or literal`, an argument spec whose default differs from
the defaults file, or a check that verify runs with other bounds than its stage.
"""

from __future__ import annotations

import ast
import re

import helpers  # (puts collections/ on sys.path)
import pytest
import yaml
from ansible_collections.provision.cluster.plugins.module_utils.verify import catalog as K
from ansible_collections.provision.cluster.plugins.module_utils.common import cluster_plan, settings

REPO = helpers.REPO
CODE = ("plugins", "src", "roles", "playbooks", "site.yml")
HOME = REPO / "plugins" / "module_utils" / "common" / "cluster_plan.py"
# the shared literals whose only home is cluster_plan.DEFAULTS
SHARED = {"sshd_port": 2222, "cluster_master_port": 29500}
# Python strings that are documentation, not code: a module's or plugin's DOCUMENTATION/EXAMPLES/RETURN
DOC_NAMES = {"DOCUMENTATION", "EXAMPLES", "RETURN"}
# YAML keys whose values are prose
PROSE = {"description", "short_description", "msg", "fail_msg", "success_msg", "name"}


def _files(*suffixes):
    for top in CODE:
        path = REPO / top
        found = [path] if path.is_file() else sorted(path.rglob("*"))
        for f in found:
            if f.is_file() and f.suffix in suffixes and "__pycache__" not in f.parts:
                yield f


def _doc_strings(tree):
    """ids of the string constants that are documentation (docstrings, DOCUMENTATION/EXAMPLES/RETURN)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in DOC_NAMES for t in node.targets):
            out.add(id(node.value))
    return out


def _python_restatements(path, values):
    """(line, text) of each int literal in VALUES, and each code string holding one, in a Python file."""
    tree = ast.parse(path.read_text(), str(path))
    docs = _doc_strings(tree)
    words = re.compile(r"(?<![\d.])(%s)(?![\d.])" % "|".join(str(v) for v in values))
    hits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in docs:
            continue
        if isinstance(node.value, int) and not isinstance(node.value, bool) and node.value in values:
            hits.append((node.lineno, repr(node.value)))
        elif isinstance(node.value, str) and words.search(node.value):
            hits.append((node.lineno, node.value[:80]))
    return hits


def _yaml_restatements(data, values, key=None):
    words = re.compile(r"(?<![\d.])(%s)(?![\d.])" % "|".join(str(v) for v in values))
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _yaml_restatements(v, values, k)
    elif isinstance(data, list):
        for v in data:
            yield from _yaml_restatements(v, values, key)
    elif key in PROSE:
        return
    elif isinstance(data, int) and not isinstance(data, bool) and data in values:
        yield "%s: %s" % (key, data)
    elif isinstance(data, str) and words.search(data):
        yield "%s: %s" % (key, data[:80])


def shared_restatements():
    values = set(SHARED.values())
    found = []
    for path in _files(".py"):
        if path == HOME:
            continue
        found += ["%s:%d %s" % (path.relative_to(REPO), line, text) for line, text in _python_restatements(path, values)]
    for path in _files(".yml", ".yaml"):
        if path.parts[len(REPO.parts)] == "plugins":
            continue  # the filters' documentation (plugins/filter/*.yml)
        found += ["%s %s" % (path.relative_to(REPO), hit)
                  for hit in _yaml_restatements(yaml.safe_load(path.read_text()), values)]
    for path in _files(".j2"):
        text = re.sub(r"\{#.*?#\}", "", path.read_text(), flags=re.S)
        found += ["%s %s" % (path.relative_to(REPO), m.group(0)) for m in re.finditer(r"\b(2222|29500)\b", text)]
    return found


def test_the_shared_ports_are_written_in_cluster_plan_defaults_only():
    assert {k: cluster_plan.DEFAULTS[k] for k in SHARED} == SHARED
    assert shared_restatements() == []


def test_the_scan_finds_a_restated_port(tmp_path):
    """The scan is not blind: a literal fallback like the catalog's old one is found."""
    sample = tmp_path / "sample.py"
    sample.write_text('DOCUMENTATION = "port: 2222"\n\ndef f(plan):\n    """default 2222"""\n'
                      '    return int(plan.get("ssh_port") or 2222), "sshd -p 29500"\n')
    assert [line for line, _ in _python_restatements(sample, {2222, 29500})] == [5, 5]
    assert list(_yaml_restatements({"description": "2222", "default": 2222, "x": "{{ p | default(29500) }}"},
                                   {2222, 29500})) == ["default: 2222", "x: {{ p | default(29500) }}"]


def _settings_names():
    names = set(cluster_plan.DEFAULTS)
    for role in (REPO / "roles").iterdir():
        names.update(settings.role_defaults(role.name))
    return names


def jinja_restatements():
    """`setting | default(literal)` in the roles and playbooks, for a setting that has a home."""
    names = _settings_names()
    pattern = re.compile(r"\b([a-z][a-z0-9_]*)\s*\|\s*default\(\s*([^)]*)\)")
    found = []
    for path in _files(".yml", ".yaml", ".j2"):
        if path.parts[len(REPO.parts)] == "plugins":
            continue
        for m in pattern.finditer(path.read_text()):
            name, arg = m.group(1), m.group(2).strip()
            # default('') / default(omit): "unset" (the reader applies the default), no value restated
            if name in names and re.sub(r",\s*true$", "", arg) not in ("omit", "''", '""', "none"):
                found.append("%s: %s" % (path.relative_to(REPO), m.group(0)))
    return found


def test_no_setting_is_read_with_a_literal_default_in_jinja():
    assert jinja_restatements() == []


def python_fallbacks():
    """`var("setting") or literal` / `.get("setting", literal)` in Python, for a setting that has a home."""
    names = _settings_names()
    found = []

    def setting_call(node):
        return (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                and node.args[0].value in names)

    for path in _files(".py"):
        if path == HOME:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
                calls = [v for v in node.values if setting_call(v) or (isinstance(v, ast.Call) and v.args
                                                                       and setting_call(v.args[0]))]
                if calls and isinstance(node.values[-1], ast.Constant) and node.values[-1].value not in (None, ""):
                    found.append("%s:%d" % (path.relative_to(REPO), node.lineno))
            elif setting_call(node) and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) \
                    and node.args[1].value not in (None, ""):
                found.append("%s:%d" % (path.relative_to(REPO), node.lineno))
    return found


def test_no_setting_is_read_with_a_literal_fallback_in_python():
    assert python_fallbacks() == []


@pytest.mark.parametrize("role", sorted(p.name for p in (REPO / "roles").iterdir()))
def test_an_argument_spec_default_is_the_defaults_file_value(role):
    """A spec may show a default (ansible-doc renders it), equal to where it is written; a shared setting's
    spec shows none (its home is cluster_plan.DEFAULTS; docs/variables.md reads it there)."""
    specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    defaults = settings.role_defaults(role)
    for spec in specs.values():
        for name, opt in (spec.get("options") or {}).items():
            if "default" not in opt:
                continue
            assert name not in cluster_plan.DEFAULTS, f"{role}: {name} restates cluster_plan.DEFAULTS"
            assert name in defaults, f"{role}: {name} has a spec default but none in defaults/main.yml"
            assert opt["default"] == defaults[name], (role, name, opt["default"], defaults[name])


def test_every_verify_setting_has_a_spec_and_one_default():
    specs = yaml.safe_load((REPO / "roles/verify/meta/argument_specs.yml").read_text())["argument_specs"]["main"]
    used = set()
    for path in list(_files(".py", ".yml", ".yaml")):
        used.update(re.findall(r"\bverify_(?:" + "|".join(
            ("smoke", "select", "matrix", "reach_timeout", "node_timeout", "fail_on_error", "reuse_stage_results",
             "dcgm", "counter_interval", "versions_timeout", "python", "packages", "local", "baseline",
             "save_baseline", "baseline_tolerance", "baseline_link_tolerance")) + r")\b", path.read_text()))
    assert used <= set(specs["options"]), sorted(used - set(specs["options"]))
    defaults = settings.role_defaults("verify")
    assert set(defaults) <= set(specs["options"])


# ---------------------------------------------------------------- verify runs a check with its stage's bounds

RoleVar = helpers.CheckVars


PLAN = {"address_of": {"n1": "10.0.0.1", "n2": "10.0.0.2"}, "master": "n1", "master_port": 29500,
        "ssh_port": 2222, "user": "train"}


def test_verify_runs_the_mesh_pdsh_and_nccl_checks_with_the_roles_bounds():
    ctx = K.Context("n1", PLAN, ["n1", "n2"], RoleVar())
    mesh, pdsh, nccl = (K.BY_NAME[n].args(ctx) for n in ("mesh", "pdsh", "nccl"))
    role = settings.role_defaults
    assert (mesh["connect_timeout"], mesh["timeout"]) == (role("ssh_mesh")["ssh_mesh_check_connect_timeout"],
                                                          role("ssh_mesh")["ssh_mesh_check_timeout"])
    assert (pdsh["connect_timeout"], pdsh["command_timeout"]) == (role("pdsh")["pdsh_connect_timeout"],
                                                                  role("pdsh")["pdsh_command_timeout"])
    assert nccl["probe_timeout"] == role("nccl_net")["nccl_net_probe_timeout"]
    assert mesh["key_file"] == role("ssh_mesh")["ssh_mesh_key_file"]


def test_an_extra_var_reaches_verify_s_check_through_the_resolver_verify_uses():
    """-e pdsh_connect_timeout=30 (the README's advice for 32 nodes) reaches verify's pdsh check: the
    verify_node action builds a check's arguments with plugin_utils/verify.py's Variables."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    from ansible_collections.provision.cluster.plugins.plugin_utils.verify import Variables

    task_vars = {"pdsh_connect_timeout": "30", "ssh_mesh_check_timeout": 90, "cluster_plan": PLAN}
    loader = DataLoader()
    var = Variables(task_vars, Templar(loader=loader, variables=task_vars), loader)
    ctx = K.Context("n1", PLAN, ["n1", "n2"], var)
    assert K.BY_NAME["pdsh"].args(ctx)["connect_timeout"] == 30
    assert K.BY_NAME["pdsh"].args(ctx)["command_timeout"] == settings.default("pdsh_command_timeout")
    assert var("ssh_mesh_check_timeout") == 90   # what the mesh check's args read (test above)
    assert var("cluster_group") == cluster_plan.DEFAULTS["cluster_group"]
    assert var("verify_matrix") == settings.default("verify_matrix") == "ring"


def test_one_list_of_ssh_connections():
    assert cluster_plan.is_ssh_connection(None) and cluster_plan.is_ssh_connection("ansible.builtin.paramiko_ssh")
    assert not cluster_plan.is_ssh_connection("podman")
    from provision import bootstrap

    assert bootstrap.SSH_CONNECTIONS == set(cluster_plan.SSH_CONNECTIONS)
    lists = []
    for path in _files(".py", ".yml"):
        lists += ["%s" % path.relative_to(REPO) for _ in re.finditer(r"['\"]smart['\"]", path.read_text())]
    assert lists == ["plugins/module_utils/common/cluster_plan.py"], lists
