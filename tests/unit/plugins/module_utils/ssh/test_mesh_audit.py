# -*- coding: utf-8 -*-
"""provision verify's default SSH pattern: logins on a ring, every pair's keys compared in the files.

The keys are real ed25519 keys made with ssh-keygen for these tests (3 user keys, 3 host keys)."""
from __future__ import annotations

import helpers  # (puts collections/ on sys.path)
from ansible_collections.provision.cluster.plugins.module_utils.verify import catalog as K
from ansible_collections.provision.cluster.plugins.module_utils.ssh import mesh_audit as M
from ansible_collections.provision.cluster.plugins.module_utils.ssh.ssh_mesh import (authorized_keys_lines, etc_hosts_lines,
                                                                              merge_block, render_known_hosts,
                                                                              ssh_config_lines)

USER = {
    "node1": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOilZ5suk7KFaN78upwCK98be6AbBL5BjW1+ISVfhsjP root@node1",
    "node2": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII2/kvztv2uAVd+By1vEAxEtlH4yibx1IFH0342bRdV2 root@node2",
    "node3": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICuLgtdAHiImpILqmy1QTZMLpNQ4P56yfExgFcLuj6I2 root@node3",
}
HOST = {
    "node1": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDFsGF3RfmsjZGhc7WdDE2/vr65d3uFGUQXsydfiH2Ai",
    "node2": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBvOGtz/4b4AER1lHTSdWeG9XaeWxYI4LH7SEjNRuyV8",
    "node3": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINB5WkOOZJJs7SSfl5jZTI3aRq6n19xkaPJn/r3ePw2L",
}
NAMES = ["node1", "node2", "node3"]
ADDR = {n: "10.89.7.%d" % (11 + i) for i, n in enumerate(NAMES)}


def records(names=NAMES):
    return [{"name": n, "hostname": n, "address": ADDR[n], "port": 2222, "user": "root", "user_key": USER[n],
             "host_keys": [HOST[n]]} for n in names]


def files(on="node1", known=NAMES, authorized=NAMES):
    """A node's files as the ssh_mesh role writes them, for the nodes named."""
    kh, _ = render_known_hosts("", "cluster", records(known))
    ak = merge_block("", "cluster", authorized_keys_lines([USER[n] for n in authorized]))
    cfg = merge_block("", "cluster", ssh_config_lines(records(), "root", "~/.ssh/id_ed25519"))
    hosts = merge_block("127.0.0.1 localhost\n", "cluster", etc_hosts_lines(records()), position="start")
    return M.summarize([HOST[on]], USER[on], on, kh, ak, cfg, hosts, "cluster")


def peers():
    return [{"name": n, "address": ADDR[n], "identity": files(on=n)["identity"]} for n in NAMES]


def by_check(recs):
    return {r["check"].split(" on ")[0]: r for r in recs}


def test_ring_is_self_next_and_half_way_and_full_is_everyone():
    hosts = ["n%d" % i for i in range(1, 9)]
    assert M.ring_targets(hosts, "n1") == ["n1", "n2", "n5"]
    assert M.ring_targets(hosts, "n8") == ["n8", "n1", "n4"]
    assert M.ring_targets(["a", "b"], "b") == ["b", "a"]
    assert M.ring_targets(["a"], "a") == ["a"]
    assert M.ring_targets(hosts, "n3", full=True) == hosts
    # flat in N: three logins per node whatever the size
    assert {len(M.ring_targets(["x%d" % i for i in range(1000)], "x%d" % i)) for i in range(0, 1000, 37)} == {3}


def test_fingerprint_is_ssh_keygen_s():
    # ssh-keygen -lf /tmp/h1.pub
    assert M.fingerprint(HOST["node1"]).startswith("SHA256:") and len(M.fingerprint(HOST["node1"])) == 50
    assert M.fingerprint("not a key") is None


def test_a_healthy_mesh_passes_every_file_check():
    recs = by_check(M.audit("node1", files(), peers(), 2222, "root"))
    assert [r["status"] for r in recs.values()] == ["pass", "pass", "pass"], recs
    assert "all 3 nodes" in recs["authorized_keys"]["detail"]


def test_a_node_missing_from_known_hosts_is_caught_without_a_login():
    recs = by_check(M.audit("node1", files(known=["node1", "node2"]), peers(), 2222))
    kh = recs["known_hosts"]
    assert kh["status"] == "fail"
    assert "node3 under [node3]:2222" in kh["detail"] and "node3 under [10.89.7.13]:2222" in kh["detail"]
    assert "--tags ssh_mesh --limit node1" in kh["fix"]
    assert recs["authorized_keys"]["status"] == "pass"


def test_a_node_missing_from_authorized_keys_is_caught_without_a_login():
    recs = by_check(M.audit("node2", files(on="node2", authorized=["node1", "node2"]), peers(), 2222))
    ak = recs["authorized_keys"]
    assert ak["status"] == "fail" and ak["detail"].startswith("keys not authorized: node3 (SHA256:")
    assert recs["known_hosts"]["status"] == "pass"


def test_a_changed_host_key_is_named_with_both_fingerprints():
    others = peers()
    rebuilt = dict(others[2], identity=dict(others[2]["identity"], host_keys=[M.fingerprint(HOST["node1"])]))
    kh = by_check(M.audit("node1", files(), others[:2] + [rebuilt], 2222))["known_hosts"]
    assert kh["status"] == "fail" and M.fingerprint(HOST["node3"]) in kh["detail"]
    assert "the node's keys: %s" % M.fingerprint(HOST["node1"]) in kh["detail"]


def test_a_name_pointing_elsewhere_and_key_options_and_unknown_peers():
    s = files()
    s["ssh_config"]["node2"] = dict(s["ssh_config"]["node2"], hostname="10.89.7.99")
    s["hosts"]["node3"] = "10.89.7.11"
    s["authorized_keys"][M.fingerprint(USER["node2"])] = 'from="10.0.0.0/8"'
    others = peers()
    others[1] = dict(others[1], identity=None)  # node2 did not answer: left out, and said so
    recs = by_check(M.audit("node1", s, others, 2222))
    assert recs["ssh config"]["status"] == "fail"
    assert "node3 -> 10.89.7.11, expected 10.89.7.13" in recs["ssh config"]["detail"]
    assert "not compared for node2" in recs["authorized_keys"]["detail"]
    s = files()
    s["authorized_keys"][M.fingerprint(USER["node2"])] = 'from="10.0.0.0/8"'
    assert by_check(M.audit("node1", s, peers(), 2222))["authorized_keys options"]["status"] == "warn"


def test_parsers_read_options_hashed_lines_and_first_match():
    ak = M.parse_authorized_keys('# c\nfrom="10.0.0.1",no-pty %s\n%s\n' % (USER["node1"], USER["node2"]))
    assert ak == {M.fingerprint(USER["node1"]): 'from="10.0.0.1",no-pty', M.fingerprint(USER["node2"]): ""}
    kh = M.parse_known_hosts("|1|abc= %s\n@cert-authority * %s\nnode1,[node1]:2222 %s\n" % (
        HOST["node1"], HOST["node1"], HOST["node1"]))
    assert kh == {"node1": [M.fingerprint(HOST["node1"])], "[node1]:2222": [M.fingerprint(HOST["node1"])]}
    assert M.parse_hosts("10.0.0.1 a b # x\n10.0.0.2 a\n") == {"a": "10.0.0.1", "b": "10.0.0.1"}


def test_verify_logs_in_on_the_ring_by_default_and_everywhere_with_full():
    plan = {"nodes": [], "address_of": {}, "ssh_port": 2222, "user": "root"}
    hosts = ["n%d" % i for i in range(1, 33)]

    var = helpers.CheckVars   # the templated default of ssh_mesh_block_name (cluster_group) is given where it counts

    ring = K.Context("n5", plan, hosts, var({"ssh_mesh_block_name": "cluster"}))
    assert K.BY_NAME["mesh"].args(ring)["nodes"] == ["n5", "n6", "n21"]
    assert K.BY_NAME["mesh"].args(ring)["summary"] is True
    assert K.BY_NAME["mesh"].args(ring)["block_name"] == "cluster"
    named = K.Context("n5", plan, hosts, var({"ssh_mesh_block_name": "gpus"}))
    assert K.BY_NAME["mesh"].args(named)["block_name"] == "gpus"
    assert K.BY_NAME["pdsh"].args(ring)["targets"] == ["n5", "n6", "n21"]
    full = K.Context("n5", plan, hosts, var({"verify_matrix": "full"}))
    assert K.BY_NAME["mesh"].args(full)["nodes"] == hosts
    assert "targets" not in K.BY_NAME["pdsh"].args(full)
    assert "mesh_files" in K.expand(["mesh"]) and "mesh_files" in K.reported(["mesh"])


def test_the_file_comparison_runs_once_on_the_controller_for_every_node():
    data = {n: {"mesh": {"summary": files(on=n)}} for n in NAMES}
    data["node3"]["mesh"]["summary"] = files(on="node3", authorized=["node2", "node3"])
    plan = {"address_of": ADDR, "ssh_port": 2222, "user": "root"}
    cc = K.ClusterContext(NAMES, data, lambda name, default=None: default, plan=plan)
    recs, _ = K.BY_NAME["mesh_files"].cluster(cc)
    failed = [(r["node"], r["check"]) for r in recs if r["status"] == "fail"]
    assert failed == [("node3", "authorized_keys on node3")]
    assert len(recs) == 9 and {r["node"] for r in recs} == set(NAMES)
    # inside site.yml the mesh result is the stage's: no summary, nothing to compare
    cc = K.ClusterContext(NAMES, {n: {"mesh": {"row": []}} for n in NAMES}, None, plan=plan)
    assert K.BY_NAME["mesh_files"].cluster(cc) == ([], {})


def test_same_files_have_the_same_digest_whatever_the_node():
    # node1 and node2 hold the same files (the role writes the same blocks everywhere); their own keys differ
    one, two = files(on="node1"), files(on="node2")
    assert one["identity"] != two["identity"] and one["digest"] == two["digest"] == M.files_digest(one)
    assert files(on="node3", authorized=["node2", "node3"])["digest"] != one["digest"]
    assert files(on="node1", known=["node1", "node2"])["digest"] != one["digest"]


def test_audit_all_is_audit_of_each_node_comparing_equal_files_once(monkeypatch):
    summaries = {n: files(on=n) for n in NAMES}
    summaries["node3"] = files(on="node3", authorized=["node2", "node3"])
    bare = dict(files(on="node2"))
    bare.pop("digest")  # a summary of an older module: compared on its own
    summaries["node4"] = bare
    every = peers()
    expected = {n: M.audit(n, s, every, 2222, "root") for n, s in summaries.items()}
    calls = []
    real = M.findings
    monkeypatch.setattr(M, "findings", lambda summary, exp: calls.append(summary) or real(summary, exp))
    assert M.audit_all(summaries, every, 2222, "root") == expected
    # node1 and node2 share their files; node3's differ; node4 has no digest
    assert len(calls) == 3
    assert [r["status"] for r in expected["node3"]] == ["fail", "pass", "pass"]
    assert expected["node4"][0]["check"] == "authorized_keys on node4"
