"""The health timer's decisions (plugins/module_utils/verify/health_timer.py): the schedule for systemd and
cron, the wrapper's command line, the directories whose owners are checked; and the role's templates
rendered by Ansible's own template engine with the role's defaults."""

from __future__ import annotations

import shlex
import subprocess
import sys

import pytest

import helpers
from ansible_collections.provision.cluster.plugins.module_utils.verify import health_timer as H


@pytest.mark.parametrize("interval, systemd, cron, minutes", [
    (300, "300s", "*/5 * * * *", 5),
    (30, "30s", "*/1 * * * *", 1),          # cron cannot do less than a minute
    (420, "420s", "*/10 * * * *", 10),      # 7 minutes does not divide an hour: the next step that does
    (3600, "3600s", "0 */1 * * *", 60),
    (5 * 3600, "18000s", "0 */6 * * *", 360),
    (86400, "86400s", "0 0 * * *", 1440),
])
def test_schedule(interval, systemd, cron, minutes):
    s = H.schedule(interval)
    assert (s["systemd"], s["cron"], s["cron_minutes"]) == (systemd, cron, minutes)
    assert s["timeout"] == min(600, int(interval * 0.9)) or interval < 12


@pytest.mark.parametrize("bad", [5, "soon", 2 * 86400])
def test_schedule_refuses_intervals_it_cannot_keep(bad):
    with pytest.raises(ValueError, match="health_timer_interval"):
        H.schedule(bad)


def test_timeout_given_or_from_the_interval():
    assert H.schedule(60)["timeout"] == 54
    assert H.schedule(60, 45)["timeout"] == 45
    assert H.schedule(3600)["timeout"] == 600


def test_command_is_verify_local_brief_with_the_textfile_and_quoted():
    argv = H.command("/usr/local/lib/provision-health/bin/provision", "node1", "/var/lib/prometheus/node-exporter/provision.prom",
                     checks=["runtime", "ports"], extra_vars={"node_runtime_shm_min": "8g", "x": "it's"}, timeout=45)
    assert argv[:4] == ["/usr/local/lib/provision-health/bin/provision", "verify", "--local", "--brief"]
    assert argv[argv.index("--prometheus") + 1].endswith("provision.prom") and argv.count("--only") == 2
    line = H.shell_line(argv)
    assert shlex.split(line) == argv            # /bin/sh reads back exactly these words


def test_parents_from_root():
    assert H.parents("/usr/local/lib/provision-health") == ["/", "/usr", "/usr/local", "/usr/local/lib",
                                                            "/usr/local/lib/provision-health"]
    for bad in ("relative/path", "/opt/../home/user"):
        with pytest.raises(ValueError):
            H.parents(bad)


def test_role_templates_render_with_the_defaults(tmp_path):
    """The wrapper (sh -n), the systemd units and the cron line, as Ansible renders them."""
    play = tmp_path / "render.yml"
    play.write_text(f"""
- hosts: localhost
  gather_facts: false
  vars_files:
    - "{helpers.REPO}/roles/health_timer/defaults/main.yml"
    - "{helpers.REPO}/roles/health_timer/vars/main.yml"
  tasks:
    - name: Render
      ansible.builtin.template:
        src: "{helpers.REPO}/roles/health_timer/templates/{{{{ item }}}}.j2"
        dest: "{tmp_path}/{{{{ item }}}}"
        mode: "0644"
      loop: [provision-health.sh, provision-health.service, provision-health.timer, provision-health.cron]
      vars:
        health_timer_interval: 120
        health_timer_checks: [runtime, ports]
        health_timer_extra_vars: {{node_runtime_min_nofile: 1024}}
        health_timer_node_name: node1
""")
    proc = subprocess.run([helpers.tool("ansible-playbook"), str(play), "-i", "localhost,", "-c", "local",
                           "-e", f"ansible_python_interpreter={sys.executable}"],
                          capture_output=True, text=True, env=helpers.ansible_env(), cwd=helpers.REPO, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    wrapper = (tmp_path / "provision-health.sh").read_text()
    assert subprocess.run(["sh", "-n", str(tmp_path / "provision-health.sh")]).returncode == 0
    exec_line = next(ln for ln in wrapper.splitlines() if ln.startswith("exec "))
    argv = shlex.split(exec_line)[1:]
    assert argv[:4] == ["/usr/local/lib/provision-health/bin/provision", "verify", "--local", "--brief"]
    assert argv[argv.index("--node-name") + 1] == "node1" and argv[argv.index("--timeout") + 1] == "108"
    assert argv[argv.index("-e") + 1] == '{"node_runtime_min_nofile":1024}'
    assert "OnUnitActiveSec=120s" in (tmp_path / "provision-health.timer").read_text()
    assert "ExecStart=/usr/local/sbin/provision-health" in (tmp_path / "provision-health.service").read_text()
    cron = (tmp_path / "provision-health.cron").read_text()
    assert "*/2 * * * * root flock -n /run/provision-health.lock /usr/local/sbin/provision-health" in cron
