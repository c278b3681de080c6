# -*- coding: utf-8 -*-
# Copyright: provision developers
# Apache License 2.0
"""Controller-side helpers of the verify action plugins: variables with their roles' defaults,
the cluster plan, and running several read-only modules on one host at once."""
from __future__ import annotations

import copy
import os
import threading
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from ansible.errors import AnsibleConnectionFailure, AnsibleUndefinedVariable

from ansible_collections.provision.cluster.plugins.module_utils.verify import catalog as K
from ansible_collections.provision.cluster.plugins.module_utils.common.cluster_plan import (
    DEFAULTS, plan_from_hostvars, running_stages)
from ansible_collections.provision.cluster.plugins.module_utils.common.settings import ROLES as _ROLES, default, role_of

_DEFAULTS = {}
_DEFAULTS_LOCK = threading.Lock()
# Building a module's payload parses Python (ast), which is not safe in several threads at once;
# only the execution on the host runs in parallel.
BUILD_LOCK = threading.Lock()


def _load_templatable(loader, path):
    """A role defaults file as Ansible loads one: its strings are templates (ansible-core 2.19 marks
    strings from a file as data unless asked; older cores have no such mark and no keyword)."""
    try:
        return loader.load_from_file(path, trusted_as_template=True)
    except TypeError:
        return loader.load_from_file(path)


def role_defaults(loader, role):
    """roles/<role>/defaults/main.yml, loaded once per process (through Ansible's loader: templatable)."""
    with _DEFAULTS_LOCK:
        if role not in _DEFAULTS:
            path = os.path.join(_ROLES, role, "defaults", "main.yml")
            _DEFAULTS[role] = (_load_templatable(loader, path) or {}) if os.path.isfile(path) else {}
        return _DEFAULTS[role]


class Variables:
    """var(name): the host's variable, else its default (cluster_plan.DEFAULTS for the settings every stage
    shares, else its role's defaults), templated in the host's context."""

    def __init__(self, task_vars, templar, loader):
        self.task_vars = task_vars
        self.templar = templar
        self.loader = loader
        self._hosts = {}  # host -> its hostvars view, read once per action run
        self._raw = {}    # host -> its variables untemplated (hostdata)

    def __call__(self, name, default=None):
        if name in self.task_vars:
            value = self.task_vars[name]
        elif name in DEFAULTS:
            value = DEFAULTS[name]
        else:
            role = role_of(name)
            if not role or name not in role_defaults(self.loader, role):
                return default
            value = role_defaults(self.loader, role)[name]
        try:
            return self.templar.template(value)
        except AnsibleUndefinedVariable:
            return default

    def data(self, name, default=None):
        """This host's own variable as it was registered or set (a module's result, a fact holding one),
        untemplated: data, never a template (hostdata says what templating it would cost)."""
        value = self.task_vars.get(name)
        return default if value is None else value

    def hostvar(self, host, name, default=None):
        """Another host's variable (templated in its context), or default.

        hostvars[host] gathers every variable of that host (inventory, facts, registered results) each
        time it is asked for: the view is kept for the action's run, which reads several of a host's
        variables for every host of the play."""
        try:
            view = self._hosts.get(host)
            if view is None:
                view = self._hosts[host] = self.task_vars["hostvars"][host]
            value = view.get(name)
        except (KeyError, AnsibleUndefinedVariable):
            return default
        return default if value is None else value

    def hostdata(self, host, name, default=None):
        """What the plays registered on another host (a module's result, a fact holding one: data, never a
        template), read as it is. hostvar() templates the value, which walks all of it: about 8 ms for one
        node's verify results with ansible-core 2.19 (benchmarks/fleet.py --ansible), 33 s for the report
        of 4,096 nodes, and there is nothing in it to template."""
        raw = self._raw.get(host)
        if raw is None:
            hostvars = self.task_vars.get("hostvars") or {}
            try:
                raw = hostvars.raw_get(host) if hasattr(hostvars, "raw_get") else hostvars[host]
            except (KeyError, AnsibleUndefinedVariable):
                raw = {}
            raw = self._raw[host] = raw if isinstance(raw, Mapping) else {}
        value = raw.get(name)
        return default if value is None else value


def cluster_plan(var, hosts):
    """The cluster_plan fact (data set by preflight: read as it is, not templated, which would walk every node
    of it on every call), else computed here from the inventory (verify runs without preflight)."""
    plan = var.data("cluster_plan")
    if isinstance(plan, dict) and plan.get("nodes"):
        return plan
    group = var("cluster_group")
    members = (var("groups") or {}).get(group) or list(hosts)
    hostvars = {h: _HostView(var, h) for h in members}
    out = plan_from_hostvars(hostvars, members, master=var("cluster_master"),
                             master_addr=var("cluster_master_addr") or None,
                             master_port=var("cluster_master_port"), user=var("cluster_user"), group=group)
    return out["plan"]


class _HostView:
    """hostvars[h].get(name) for plan_from_hostvars."""

    def __init__(self, var, host):
        self.var, self.host = var, host

    def get(self, name, default=None):
        return self.var.hostvar(self.host, name, default)


def own_connection(action):
    """A copy of ACTION for one thread: its own connection, become plugin and shell.

    ansible-core keeps per-command state on those objects: `_low_level_execute_command` has the become
    plugin build a new success marker (`become.success`, `become._id`, sudo's `prompt`) for every
    command, and the ssh connection then waits for `self.become.success` in the output; the shell plugin
    holds the remote tmpdir (`_shell.tmpdir`, without pipelining) and `executable`. Several threads on
    one connection overwrite each other's marker, and the command whose marker was replaced waits until
    ssh's timeout: "Timeout (22s) waiting for privilege escalation prompt: BECOME-SUCCESS-...". Shallow
    copies share what is read-only (options, play context, the ssh ControlPersist master: one socket)
    and give each thread its own of what a command writes.
    """
    mine = copy.copy(action)
    conn = copy.copy(action._connection)
    if getattr(conn, "become", None) is not None:
        conn.become = copy.copy(conn.become)
    shell = getattr(conn, "_shell", None)
    if shell is not None:
        # a remote tmpdir made in a thread (no pipelining) is that thread's, removed by run_modules
        conn._shell = copy.copy(shell)
    mine._connection = conn
    return mine


def module_runner(action, task_vars, several=True):
    """-> one((name, module, args)) -> (name, result): runs one module on the action's host. A module that
    fails or cannot reach the host gives its own failed/unreachable result. With several (threads at
    once), each call runs on its own copy of the connection (own_connection) and removes the remote
    tmpdir it made."""
    def one(job):
        name, module, args = job
        mine = own_connection(action) if several else action
        before = mine._connection._shell.tmpdir if getattr(mine._connection, "_shell", None) else None
        try:
            res = mine._execute_module(module_name=module, module_args=dict(args), task_vars=task_vars,
                                       wrap_async=False)
        except AnsibleConnectionFailure as exc:
            res = {"unreachable": True, "msg": str(exc)}
        except Exception as exc:  # one broken check must not hide the others
            res = {"failed": True, "msg": "%s: %s" % (module, exc)}
        finally:
            made = mine._connection._shell.tmpdir if getattr(mine._connection, "_shell", None) else None
            if mine is not action and made and made != before:
                try:
                    mine._remove_tmp_path(made)
                except Exception:  # noqa: BLE001 - a leftover tmpdir is no reason to lose the result
                    pass
        res.pop("invocation", None)
        return name, res
    return one


def run_modules(action, jobs, task_vars, parallel=8):
    """Run [(name, module, args)] on the action's host at the same time -> {name: result} (module_runner)."""
    if not jobs:
        return {}
    one = module_runner(action, task_vars, several=len(jobs) > 1)
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(jobs)))) as pool:
        return dict(pool.map(one, jobs))


def run_entries(action, specs, ctx, task_vars, parallel=8):
    """Run catalog entries on the action's host, each as soon as what it reads is in; their results go into
    ctx.results -> the names of those derived (not run).

    An entry waits for the entries of this run it needs (`needs`: their results are its arguments) and for
    those its `derive` reads (`derive_from`); then it is derived when that decides it (not run: a node
    without a GPU has the gpu_health skips from the gpu check's reading), left out when its `when` says
    so, or started; up to `parallel` modules run at once. ctx.results is the results so far (it may hold
    results taken from elsewhere: those entries are not in specs)."""
    results = ctx.results
    todo = list(specs)
    pending = {s.name for s in todo}
    derived = []
    one = module_runner(action, task_vars, several=len(todo) > 1)
    force = False  # entries that wait on one another (the catalog has no such cycle): run as they are
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(todo) or 1))) as pool:
        running = {}
        while todo or running:
            started = False
            for spec in list(todo):
                if not force and any(n in pending and n != spec.name for n in (*spec.needs, *spec.derive_from)):
                    continue
                todo.remove(spec)
                started = True
                found = spec.derive(ctx) if spec.derive else None
                if found is not None:
                    results[spec.name] = found
                    derived.append(spec.name)
                    pending.discard(spec.name)
                elif spec.when is None or spec.when(ctx):
                    running[pool.submit(one, (spec.name, spec.module, spec.args(ctx)))] = spec.name
                else:
                    pending.discard(spec.name)
            if started:
                continue  # what was derived or left out may free other entries
            if not running:
                force = True
                continue
            done = wait(running, return_when=FIRST_COMPLETED).done
            for future in done:
                name, res = future.result()
                results[name] = res
                pending.discard(running.pop(future))
    return derived


def selection(names, smoke, in_site, task_vars):
    """(public checks to report, catalog entries to run): the catalog's selection; inside site.yml only
    those of the stages this run executes (--skip-tags python_env leaves `versions` out: nothing made
    the environment), dependencies included."""
    selected = K.select(names, smoke)
    running = None
    if in_site:
        running = running_stages("all", task_vars.get("ansible_run_tags"), task_vars.get("ansible_skip_tags"))
        selected = K.in_stages(selected, running)
    local = task_vars["verify_local"] if "verify_local" in task_vars else default("verify_local")
    local = K.as_bool(local)
    return selected, K.expand(selected, running, local=local)
