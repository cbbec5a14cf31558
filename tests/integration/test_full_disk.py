"""The server on a full disk (docs/operations.md, "The server"): its state directory is
a small tmpfs of its own that the test fills. A change it cannot write is retried
every 50 ms and said in the log once in 10 seconds, counted on /metrics; a cancel or a
cordon it cannot write yet is answered 507 saying so, and reaches no agent until it is
written: the rank of a cancelled job keeps running while the disk is full, stops once
there is room, and its job ends cancelled, also across a kill -9 of the server."""
import re
import time

from harness import ApiError, cluster, run_tests, wait_for


def flush_lines(c):
    return [ln for ln in log_lines(c) if "failed" in ln and ("sqlite" in ln or "flush" in ln)]


def log_lines(c):
    return open(c.logs + "/server.log", errors="replace").read().splitlines()


def metric(c, name):
    text = c.api("GET", "/metrics").decode()
    m = re.search(r"^%s (\d+)" % re.escape(name), text, re.M)
    return int(m.group(1)) if m else None


def test_a_failing_flush_is_said_once_in_ten_seconds():
    with cluster(agents=1, gpus=2, name="fulllog", state_tmpfs="4m") as c:
        c.fill_state_disk()
        # a change kept in memory: the housekeeping retries it every 50 ms
        try:
            c.api("POST", "/v1/nodes/node-1", {"state": "cordoned", "reason": "full"})
        except ApiError:
            pass
        wait_for(lambda: flush_lines(c), what="the first line of a failing flush")
        first, before = len(flush_lines(c)), log_lines(c)
        time.sleep(3)
        lines = flush_lines(c)
        assert len(lines) - first <= 1 and len(lines) <= 3, "\n".join(lines)
        # nor anything else once per try (an agent's sync fails too)
        assert len(log_lines(c)) - len(before) <= 2, "\n".join(log_lines(c)[len(before):])
        # the count goes on in /metrics
        failures = metric(c, "anvil_state_flush_failures_total")
        assert failures is not None and failures >= 30, failures
        assert metric(c, "anvil_state_unwritten") == 1
        c.free_state_disk()
        wait_for(lambda: metric(c, "anvil_state_unwritten") == 0, what="the change written")
        assert "state flush works again" in c.log("server.log")


run_tests([test_a_failing_flush_is_said_once_in_ten_seconds])
