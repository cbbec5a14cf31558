#!/usr/bin/env python3
"""A session's warnings and its queue's idle timeout, through the real
server, agent, holder and CLI on a real terminal: the warning before the
time limit (live, in the log, in a later attach's scrollback), an idle
session warned then stopped with the reason, a busy one left running until
its GPU idles. Times are short: the server warns --session-warning 5s ahead,
the agent samples its simulated GPUs every 200 ms and syncs at least every
second."""
import re
import time

from harness import cluster, run_tests, wait_for

PROMPT = "anvil-prompt\\$ "
BASH = ["--", "bash", "--norc", "--noprofile"]
ENV = {"PS1": "anvil-prompt$ ", "TERM": "xterm"}
SERVER = ["--session-warning", "5s"]
AGENT = ["--wait-ms", "1000", "--gpu-sample-ms", "200"]


def session_job(c):
    return [j for j in c.api("GET", "/v1/jobs")["jobs"] if j["session"]][0]


def notices(c, jid):
    events = c.api("GET", "/v1/events?limit=100&job=%d" % jid)["events"]
    return [e["message"] for e in events if e["kind"] == "job.notice"]


def test_time_limit_warning_on_the_terminal_in_the_log_and_on_attach():
    with cluster(agents=1, gpus=1, name="notice-limit", server_args=SERVER,
                 agent_args=AGENT) as c:
        with c.term("shell", "--time", "12s", "--grace", "1s", *BASH, env=ENV) as t:
            t.expect(PROMPT, 60)
            jid = session_job(c)["id"]
            # live: the holder's NOTICE frame, printed by the CLI on a line of its own
            m = t.expect(r"\r\nanvil: this session ends in (\d+) s: its time limit \(12s\) "
                         r"is reached at \d\d:\d\d UTC\r\n", 30)
            assert 1 <= int(m.group(1)) <= 5, m.group(0)
            assert len(notices(c, jid)) == 1, notices(c, jid)
            # a client attaching now finds it in the scrollback
            with c.term("attach", str(jid), env=ENV) as late:
                late.expect("anvil: this session ends in \\d+ s: its time limit", 20)
            status = t.wait(40)
            assert status == 129, (status, t.seen)
            assert t.seen.count(b"this session ends in") == 1, t.seen  # delivered once
        done = c.wait_job(jid, timeout=30)
        assert done["state"] == "failed" and done["reason"] == "stopped at its time limit", done
        log = c.cli("logs", str(jid)).stdout
        assert re.search(r"anvil: this session ends in \d+ s: its time limit \(12s\)", log), log
        assert len(notices(c, jid)) == 1


def test_idle_session_is_warned_then_stopped_and_batch_jobs_are_not():
    with cluster(agents=1, gpus=2, name="notice-idle", server_args=SERVER,
                 agent_args=AGENT) as c:
        c.cli("queue", "set", "interactive", "--idle-timeout", "8s", check=True)
        ls = c.cli("queue", "ls", check=True).stdout
        assert re.search(r"interactive .* 8s ", ls), ls
        batch = c.submit(["sleep", "1000"], gpus=1, queue="interactive")
        c.wait_job(batch["id"], states=("running",))
        with c.term("shell", "--queue", "interactive", *BASH, env=ENV) as t:
            t.expect(PROMPT, 60)
            jid = session_job(c)["id"]
            wait_for(lambda: c.job(jid)["attempts"][-1]["ranks"][0].get("gpu_idle_ms", -1) >= 0,
                     what="the rank's gpu_idle_ms")
            t.expect(r"\r\nanvil: this session ends in \d+ s unless its GPUs are used: they "
                     r"have been idle for \d+s, and queue interactive ends sessions idle for 8s"
                     r"\r\n", 30)
            status = t.wait(40)
            assert status == 129, (status, t.seen)
            assert b"its GPUs were idle for 8s (queue interactive's idle_timeout)" in t.seen, \
                t.seen
        done = c.wait_job(jid, timeout=30)
        want = "stopped: its GPUs were idle for 8s (queue interactive's idle_timeout)"
        assert done["state"] == "failed" and done["reason"] == want, done
        assert done["attempts"][-1]["end_reason"] == want, done
        log = c.cli("logs", str(jid)).stdout
        assert "anvil: this session ends in" in log and "unless its GPUs are used" in log, log
        kinds = [e["kind"] for e in c.api("GET", "/v1/events?job=%d" % jid)["events"]]
        assert "job.notice" in kinds and "job.idle_timeout" in kinds, kinds
        # the batch job on the same queue, as idle, runs on
        assert c.job(batch["id"])["state"] == "running"


def test_busy_session_runs_on_until_its_gpu_idles():
    with cluster(agents=1, gpus=1, name="notice-busy", server_args=SERVER,
                 agent_args=AGENT) as c:
        c.cli("queue", "set", "interactive", "--idle-timeout", "6s", check=True)
        c.api("POST", "/v1/nodes/node-1/faults", {"gpu": 0, "kind": "load", "util_pct": 90})
        with c.term("shell", "--queue", "interactive", *BASH, env=ENV) as t:
            t.expect(PROMPT, 60)
            jid = session_job(c)["id"]
            wait_for(lambda: c.job(jid)["attempts"][-1]["ranks"][0].get("gpu_idle_ms") == 0,
                     what="the rank's GPU reported busy")
            time.sleep(10)  # longer than the timeout: busy, so nothing happens
            t.send("echo still-$((20+22))\r")
            t.expect("still-42")
            assert b"this session ends" not in t.seen, t.seen
            assert c.job(jid)["state"] == "running"
            assert notices(c, jid) == []
            # idle from now on: warned, then stopped
            idle_from = time.time()
            c.api("POST", "/v1/nodes/node-1/faults", {"gpu": 0, "kind": "load", "util_pct": 0})
            t.expect("this session ends in \\d+ s unless its GPUs are used", 30)
            status = t.wait(40)
            assert status == 129, (status, t.seen)
            assert time.time() - idle_from >= 5.5, time.time() - idle_from
        done = c.wait_job(jid, timeout=30)
        assert done["reason"] == \
            "stopped: its GPUs were idle for 6s (queue interactive's idle_timeout)", done


run_tests([
    test_time_limit_warning_on_the_terminal_in_the_log_and_on_attach,
    test_idle_session_is_warned_then_stopped_and_batch_jobs_are_not,
    test_busy_session_runs_on_until_its_gpu_idles,
])
