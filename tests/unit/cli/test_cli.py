"""The CLI surface: help, exit codes, lab argument handling (no podman needed)."""

from __future__ import annotations

import json

import helpers  # noqa: F401
import pytest
from click.testing import CliRunner

from provision import lab as lab_core
from provision.cli import cli


def test_help_lists_the_commands():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name in ("lab", "setup"):
        assert name in result.output


def test_lab_help():
    result = CliRunner().invoke(cli, ["lab", "up", "--help"])
    assert result.exit_code == 0
    assert "--nodes" in result.output and "--image" in result.output


def test_bad_node_option_is_a_usage_error():
    result = CliRunner().invoke(cli, ["lab", "up", "--node-option", "bogus"])
    assert result.exit_code == 2
    assert "--node-option must look like" in result.output


def test_too_many_nodes_is_refused_before_touching_podman(monkeypatch):
    monkeypatch.setattr(lab_core, "setup_host", lambda **kw: pytest.fail("must not set up the host"))
    result = CliRunner().invoke(cli, ["lab", "up", "--nodes", str(lab_core.MAX_NODES + 1)])
    assert result.exit_code == 1
    assert f"--nodes must be between 1 and {lab_core.MAX_NODES}" in result.output


def test_lab_status_json_when_down(monkeypatch):
    monkeypatch.setattr(lab_core, "list_containers", lambda name: [])
    monkeypatch.setattr(lab_core, "list_networks", lambda name: [])
    result = CliRunner().invoke(cli, ["lab", "status", "--name", "nothing", "--json"])
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc == {"schema": 1, "lab": "nothing", "networks": [], "nodes": [], "up": False}


def test_image_tag_changes_with_the_recipe(monkeypatch):
    before = lab_core.image_tag("full")
    assert before == lab_core.image_tag("full")
    assert lab_core.image_tag("minimal") != before
    monkeypatch.setitem(lab_core.FLAVOURS, "full", lab_core.FLAVOURS["full"] + ["vim"])
    assert lab_core.image_tag("full") != before


def test_minimal_flavour_has_no_iproute2():
    assert "iproute2" in lab_core.FLAVOURS["full"]
    assert "iproute2" not in lab_core.FLAVOURS["minimal"]


def test_subnet_index_avoids_subnets_in_use(monkeypatch):
    nets = [{"name": "other", "subnets": [{"subnet": f"10.89.{lab_core._preferred_index('mine')}.0/24"}]},
            {"name": "mine-old", "subnets": [{"subnet": "10.90.5.16/28"}]}]
    monkeypatch.setattr(lab_core, "_networks", lambda: nets)
    k = lab_core.subnet_index("mine")
    assert k != lab_core._preferred_index("mine") and 1 < k < 255
    nets.append({"name": "mine", "subnets": [{"subnet": "10.89.42.0/24"}]})
    assert lab_core.subnet_index("mine") == 42  # a lab keeps its network's subnet
    assert lab_core.node_addresses(42, 3) == ("10.89.42.13", "10.90.42.50")


def test_containers_conf_detection(tmp_path):
    conf = tmp_path / "containers.conf"
    assert not lab_core._containers_conf_ok(conf)
    conf.write_text(lab_core.CONTAINERS_CONF)
    assert lab_core._containers_conf_ok(conf)


def test_bare_and_another_image_contradict():
    result = CliRunner().invoke(cli, ["lab", "up", "--bare", "--image", "minimal"])
    assert result.exit_code == 2
    assert "--bare and --image minimal contradict" in result.output


def test_site_passes_the_become_password_options_to_ansible_playbook(monkeypatch, tmp_path):
    """`provision site -K` is ansible-playbook -K: it asks for the sudo password itself (not echoed); a
    --become-password-file is checked (yours, 0600) and handed on."""
    from click.testing import CliRunner

    from provision.cli import cli
    from provision.commands import site

    seen = {}
    monkeypatch.setattr(site, "run", lambda argv, env, timeout: seen.update(argv=argv) or 0)
    result = CliRunner().invoke(cli, ["site", "-i", str(tmp_path), "-K"])
    assert result.exit_code == 0, result.output
    assert seen["argv"][-1:] == ["--ask-become-pass"]
    pw = tmp_path / "pw"
    pw.write_text("secret\n")
    pw.chmod(0o600)
    result = CliRunner().invoke(cli, ["site", "-i", str(tmp_path), "--become-password-file", str(pw), "-f", "3"])
    assert result.exit_code == 0, result.output
    assert seen["argv"][-2:] == ["--become-password-file", str(pw)] and "--forks" in seen["argv"]
    pw.chmod(0o644)
    result = CliRunner().invoke(cli, ["site", "-i", str(tmp_path), "--become-password-file", str(pw)])
    assert result.exit_code == 2 and "chmod 600" in result.output
