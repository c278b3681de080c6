"""Health on a timer without SLURM (issue 35), on a systemd lab node (`--init systemd`): the
health_timer role installs provision into a root-owned venv and a systemd timer that runs
`provision verify --local` every 15 s; a fault (a listener on the rendezvous port 29500) is seen
within one interval plus one run, the Prometheus textfile's check flips to fail and a journal line
names it; once the listener is gone the next run flips it back. A second run of the role changes
nothing; health_timer_enabled: false removes it all.

Every wait is bounded (WAIT_S); the measured times are printed for the closing note.
"""

from __future__ import annotations

import re
import time

import pytest
import bounds
from helpers import lab_name, node_exec, run_playbook

pytestmark = pytest.mark.lab

INTERVAL = 15
# one run of verify --local may take this long on the shared 2-core machine (45 s slurmd's limit is
# not ours here); the fault must show within one interval plus one run
RUN_TIMEOUT = int(bounds.scaled(150))
WAIT_S = INTERVAL + 2 * RUN_TIMEOUT
PROM = "/var/lib/prometheus/node-exporter/provision.prom"
CHECK = "port 29500 free"
LISTENER = ("import socket, time\ns = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            "s.bind(('0.0.0.0', 29500))\ns.listen(1)\ntime.sleep(900)\n")


def status_of(lab, check: str) -> tuple[dict[str, float], float | None]:
    """{status: value} of the check's series in the node's textfile, and the run's timestamp."""
    text = node_exec(lab.name, 1, f"cat {PROM} 2>/dev/null || true").stdout
    out = {}
    for m in re.finditer(r'^provision_check_status\{(.*)\} (\S+)$', text, re.M):
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1)))
        if labels.get("check") == check:
            out[labels["status"]] = float(m.group(2))
    ts = re.search(r"^provision_verify_last_run_timestamp_seconds (\S+)$", text, re.M)
    return out, float(ts.group(1)) if ts else None


def wait_for(lab, want: str, after: float) -> float:
    """Seconds until a run that started after `after` reports the check as `want` (bounded by WAIT_S)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        got, ts = status_of(lab, CHECK)
        if ts and ts > after and got.get(want) == 1:
            return time.time() - after
        time.sleep(3)
    got, ts = status_of(lab, CHECK)
    journal = node_exec(lab.name, 1, "journalctl -u provision-health --no-pager -n 40", check=False).stdout
    raise AssertionError(f"no run reported {CHECK} {want} within {WAIT_S} s (last: {got}, at {ts}):\n{journal}")


@pytest.fixture(scope="module")
def timer_lab(lab_factory, provision_wheels):
    lab = lab_factory(lab_name("timer"), nodes=1, options=["--init", "systemd"])
    lab.wheels = provision_wheels
    yield lab
    node_exec(lab.name, 1, "pkill -f 'bind..0.0.0.0., 29500' || true", check=False)


def role(lab, enabled: bool):
    return run_playbook("playbooks/health_timer.yml", lab_name=lab.name, timeout=bounds.STAGES, extra_vars={
        "health_timer_enabled": enabled, "health_timer_interval": INTERVAL, "health_timer_first_delay": 5,
        "health_timer_timeout": RUN_TIMEOUT, "health_timer_wheelhouse": str(lab.wheels),
        "health_timer_checks": ["ports"]})


def test_the_timer_sees_a_fault_within_one_interval_and_its_repair(timer_lab):
    lab = timer_lab
    t0 = time.monotonic()
    first = role(lab, True)
    assert first.rc == 0, first
    installed = time.monotonic() - t0
    # root's install, root's timer
    out = node_exec(lab.name, 1, "stat -c '%U %a' /usr/local/lib/provision-health /usr/local/sbin/provision-health; "
                                 "systemctl is-enabled provision-health.timer; systemctl is-active provision-health.timer").stdout
    assert out.split("\n")[:4] == ["root 755", "root 755", "enabled", "active"], out
    second = role(lab, True)
    assert second.rc == 0 and second.changed == 0, second

    start = time.time()
    healthy = wait_for(lab, "pass", start - INTERVAL)
    node_exec(lab.name, 1, f"cat > /tmp/listen.py <<'EOF'\n{LISTENER}EOF\n"
                           "nohup python3 /tmp/listen.py >/dev/null 2>&1 &")
    fault_at = time.time()
    seen = wait_for(lab, "fail", fault_at)
    journal = node_exec(lab.name, 1, f"journalctl -t provision-health --since @{int(fault_at)} --no-pager -o cat").stdout
    assert re.search(rf"^FAIL node1: {CHECK}: 29500 is held by", journal, re.M), journal
    errors = node_exec(lab.name, 1, f"journalctl -t provision-health --since @{int(fault_at)} -p err --no-pager -o cat").stdout
    assert f"FAIL node1: {CHECK}" in errors and "verify: FAILED" not in errors    # the failure line at priority err

    node_exec(lab.name, 1, "pkill -f /tmp/listen.py")
    repaired_at = time.time()
    back = wait_for(lab, "pass", repaired_at)
    print(f"health timer: role {installed:.0f} s; first healthy run after {healthy:.0f} s; fault seen after "
          f"{seen:.0f} s; repair seen after {back:.0f} s (interval {INTERVAL} s)")
    assert seen <= INTERVAL + RUN_TIMEOUT and back <= INTERVAL + RUN_TIMEOUT

    off = role(lab, False)
    assert off.rc == 0, off
    gone = node_exec(lab.name, 1, "ls /etc/systemd/system/provision-health.service /etc/systemd/system/provision-health.timer "
                                  f"{PROM} /usr/local/sbin/provision-health 2>&1; systemctl is-active provision-health.timer",
                     check=False).stdout
    assert gone.count("No such file") == 4 and "inactive" in gone, gone
