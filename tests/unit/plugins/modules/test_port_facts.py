"""port_facts as Ansible runs it on the controller itself: it reads the real /proc."""

from __future__ import annotations

import socket

import helpers


def test_port_facts_module_on_a_loopback_listener():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        status, res = helpers.adhoc("port_facts", {"ports": [port], "expect": "free"}, "--check")
    assert "SUCCESS" in status and res["changed"] is False
    (rep,) = res["ports"]
    assert rep["listening"] and rep["summary"].startswith(f"{port} is held by pid ")
    assert res["failed_checks"] and res["failed_checks"][0]["fix"].startswith("stop it: kill ")
    assert port in res["listening"]
