"""provision.launch (the core of `provision launch`) without Ansible: the start/poll/stop loop driven by
a play whose results are given, so that each branch (success, a failed node, a node that never
started, an unreachable node during the poll) is checked in milliseconds. The end-to-end runs through
Ansible are in test_launch.py."""

from __future__ import annotations

import copy

import pytest

from provision import launch as core


class ScriptedPlay(core.Play):
    """A Play whose run() answers from a list of results per action, and records what it was asked."""

    def __init__(self, answers: dict[str, list[dict]], launch_on: str = "all"):
        super().__init__(None, "cluster", "RUN", {}, extra={"launch_on": launch_on})
        self.answers = {k: list(v) for k, v in answers.items()}
        self.calls: list[tuple[str, dict]] = []

    def run(self, action, timeout, **variables):
        self.calls.append((action, copy.deepcopy(variables)))  # as sent: run_job updates its dicts
        return self.answers[action].pop(0) if self.answers.get(action) else {}


def job(play, hosts=("n1", "n2"), timeout=60.0):
    lines, said = [], []
    out = core.Output(list(hosts), lines.append)
    code = core.run_job(play, list(hosts), "torchrun-c10d.sh", ["train.py"], None, timeout, 0.0, out, said.append)
    return code, lines, said


def started(*hosts):
    return {h: {"action": "provision.cluster.launch_job", "started": True} for h in hosts}


def test_success_everywhere_streams_whole_lines_and_exits_0():
    play = ScriptedPlay({"start": [started("n1", "n2")], "poll": [
        {"n1": {"output": "hello\npart", "offset": 10, "running": True},
         "n2": {"output": "n2 done\n", "offset": 8, "running": False, "exit_status": 0}},
        {"n1": {"output": "ial\n", "offset": 14, "running": False, "exit_status": 0}}]})
    code, lines, said = job(play)
    assert code == core.EXIT_OK
    assert lines == ["[n1] hello", "[n2] n2 done", "[n1] partial"]
    assert said == ["run RUN (n1, n2)", "run RUN succeeded on 2 node(s)"]
    # the second poll asks only for the node still running, from its offset
    assert play.calls[2] == ("poll", {"launch_offsets": {"n1": 10, "n2": 8}, "launch_wait": 0.0,
                                      "launch_poll_hosts": ["n1"]})


def test_a_failed_node_stops_the_others_and_exits_1():
    play = ScriptedPlay({"start": [started("n1", "n2")], "poll": [
        {"n1": {"output": "", "offset": 0, "running": True},
         "n2": {"output": "boom\n", "offset": 5, "running": False, "exit_status": 7}}]})
    code, _lines, said = job(play)
    assert code == core.EXIT_FAILED
    assert said[1:] == ["n2 failed (exit 7); stopping n1", "n1: stopped"]
    assert play.calls[-1] == ("stop", {"launch_poll_hosts": ["n1"]})


def test_a_node_that_did_not_start_stops_the_started_ones():
    play = ScriptedPlay({"start": [dict(started("n1"), n2={"failed": True, "msg": "run the launchers stage first\nmore"})]})
    code, _lines, said = job(play)
    assert code == core.EXIT_FAILED
    assert said[1:] == ["n2: run the launchers stage first"]
    assert [c[0] for c in play.calls] == ["start", "stop"] and play.calls[1][1] == {"launch_poll_hosts": ["n1"]}


def test_nothing_started_and_no_answer_to_the_poll():
    code, _lines, said = job(ScriptedPlay({"start": [{}]}))
    assert code == core.EXIT_FAILED and said[1:] == ["n1: not started", "n2: not started"]
    play = ScriptedPlay({"start": [started("n1")], "poll": [{}]})
    code, _lines, said = job(play, hosts=("n1",))
    assert code == core.EXIT_FAILED and said[1:] == ["n1: no answer to the poll", "failed on n1 (exit -1)"]


def test_master_only_launchers_say_so():
    play = ScriptedPlay({"start": [started("n1")], "poll": [{"n1": {"output": "", "running": False, "exit_status": 0}}]},
                        launch_on="master")
    code, _lines, said = job(play)
    assert code == core.EXIT_OK and said == ["run RUN (master only)", "run RUN succeeded on 1 node(s)"]


def test_extra_vars_are_key_value():
    assert core.parse_extra_vars(["a=1", "b=x=y", "c="]) == {"a": "1", "b": "x=y", "c": ""}
    with pytest.raises(ValueError, match="-e wants KEY=VALUE, got 'novalue'"):
        core.parse_extra_vars(["a=1", "novalue"])
    with pytest.raises(ValueError):
        core.parse_extra_vars(["=1"])
