"""`provision lab fault`: values checked before anything changes, and which faults count as active."""

from __future__ import annotations

import json
import struct

import helpers  # noqa: F401
import pytest
from click.testing import CliRunner

from provision import lab as lab_core
from provision.cli import cli
from provision.lab import delayd, faults


@pytest.mark.parametrize("rate,bits", [("100mbit", 100e6), ("1gbit", 1e9), ("500kbit", 500e3), ("10mbps", 80e6)])
def test_rates_as_tc_writes_them(rate, bits):
    assert faults.rate_bits(rate) == bits


@pytest.mark.parametrize("call,message", [
    (lambda: faults.rate_bits("fast"), "e.g. 100mbit"),
    (lambda: faults.delay_seconds("5"), "write it as 5ms"),
    (lambda: faults.delay_seconds("20s"), "at most 10s"),
    (lambda: faults.loss_fraction("150%"), "at most 100%"),
    (lambda: faults.check_mtu(100), "outside 576..65535"),
])
def test_bad_values_name_the_fix(call, message):
    with pytest.raises(lab_core.LabError, match=message):
        call()


def test_tbf_burst_holds_a_gso_packet():
    argv = faults._tbf(1e6)
    assert int(argv[argv.index("burst") + 1]) >= 64 * 1024


def test_active_faults_belong_to_the_same_container_run(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    rec = {"id": "abc", "started": 100, "rate": "100mbit", "rate_direction": "both", "delayer_pid": 1}
    (lab_core.lab_state_dir("x") / "faults.json").write_text(json.dumps({"node2": rec}))
    c = {"Labels": {lab_core.LABEL_INDEX: "2"}, "Id": "abc", "StartedAt": 100, "State": "running"}
    assert faults.active("x", [c]) == {"node2": {"rate": "100mbit", "rate_direction": "both"}}
    assert faults.active("x", [dict(c, StartedAt=200)]) == {}  # restarted: a new namespace
    assert faults.active("x", [dict(c, Id="other")]) == {}  # re-created
    assert faults.active("x", [dict(c, Id="other", State="paused")]) == {"node2": {"frozen": True}}


def test_fault_cli_needs_a_fault_and_a_real_node(monkeypatch):
    monkeypatch.setattr(lab_core, "list_containers", lambda name: [])
    result = CliRunner().invoke(cli, ["lab", "fault", "lab1", "node2", "--rate", "1mbit"])
    assert result.exit_code == 1 and "lab lab1 has no node2" in result.output
    result = CliRunner().invoke(cli, ["lab", "fault", "a", "b", "c"])
    assert result.exit_code == 2
    result = CliRunner().invoke(cli, ["lab", "fault", "node2", "--freeze", "--thaw"])
    assert result.exit_code == 2 and "contradict" in result.output


def test_delayd_speaks_nfqueue_messages():
    msg = delayd._message(delayd.NFQNL_MSG_VERDICT_BATCH, 7, delayd._attr(delayd.NFQA_VERDICT_HDR, b"\0\0\0\1\0\0\0\5"), seq=3)
    assert len(msg) == 16 + 4 + 12 and msg[4] == delayd.NFQNL_MSG_VERDICT_BATCH and msg[5] == delayd.NFNL_SUBSYS_QUEUE
    # a packet message as the kernel sends it: nlmsghdr, nfgenmsg, NFQA_PACKET_HDR(id=42)
    body = b"\x02\x00\x00\x07" + delayd._attr(delayd.NFQA_PACKET_HDR, b"\0\0\0\x2a\x08\x00\x03")
    packet = struct.pack("=IHHII", 16 + len(body), (3 << 8) | 0, 0, 0, 0) + body
    assert list(delayd.packet_ids(packet + packet)) == [42, 42]
