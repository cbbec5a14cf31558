"""The server on a full disk (docs/operations.md, "The server"): its state directory is
a small tmpfs of its own that the test fills. A change it cannot write is retried
every 50 ms and said in the log once in 10 seconds, counted on /metrics; a cancel or a
cordon it cannot write yet is answered 507 saying so, and reaches no agent until it is
written: the rank of a cancelled job keeps running while the disk is full, stops once
there is room, and its job ends cancelled, also across a kill -9 of the server."""
import os
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


UNSTORED = "accepted but not yet stored: the server's disk is full"


def alive(pid):
    return os.path.exists("/proc/%d" % pid)


def restart_server(c, ready=True):
    c.kill_server()
    c.start_server()  # same state dir, same port
    if ready:
        c.wait_ready(1)


def test_a_cancel_not_yet_stored_reaches_no_node_and_stays_a_cancel():
    with cluster(agents=1, gpus=2, name="fullcancel", state_tmpfs="4m") as c:
        j = c.submit(["sleep", "600"], gpus=1, grace_ms=500)["id"]
        pid = c.rank_pid(j)
        c.fill_state_disk()
        p = c.cli("cancel", str(j))
        assert p.returncode == 1 and UNSTORED in p.stderr, (p.returncode, p.stdout, p.stderr)
        assert "no node acts on it before then" in p.stderr, p.stderr
        time.sleep(2)  # many syncs and flushes: the rank is not stopped meanwhile
        assert alive(pid), "the rank was stopped by a cancel that was not stored"
        assert metric(c, "anvil_state_unwritten") == 1
        # a restart before it was written loses it on both sides: the job runs on
        c.kill_server()
        c.free_state_disk()
        c.start_server()
        c.wait_ready(1)
        time.sleep(1)  # the agent's reports are in
        assert alive(pid)
        job = c.job(j)
        assert job["state"] == "running", job
        # written, it takes effect and stays a cancel across a kill -9
        c.fill_state_disk()
        p = c.cli("cancel", str(j))
        assert p.returncode == 1 and UNSTORED in p.stderr, p.stderr
        time.sleep(1)
        assert alive(pid)
        c.free_state_disk()
        wait_for(lambda: not alive(pid), what="the rank stopped once the cancel was written")
        assert c.wait_job(j, timeout=20)["state"] == "cancelled"
        restart_server(c)
        time.sleep(1)
        job = c.job(j)
        assert job["state"] == "cancelled", job


def node_state(c):
    node = wait_for(lambda: next((n for n in c.nodes() if n["name"] == "node-1"), None),
                    what="node-1 listed")
    return node["state"]


def test_a_cordon_not_yet_stored_says_so_and_is_kept_once_written():
    with cluster(agents=1, gpus=2, name="fullcordon", state_tmpfs="4m") as c:
        c.fill_state_disk()
        p = c.cli("node", "cordon", "node-1")
        assert p.returncode == 1 and UNSTORED in p.stderr, (p.returncode, p.stdout, p.stderr)
        assert "if the server restarts first, it is lost" in p.stderr, p.stderr
        assert node_state(c) == "cordoned"  # held in memory meanwhile
        c.free_state_disk()
        wait_for(lambda: metric(c, "anvil_state_unwritten") == 0, what="the cordon written")
        restart_server(c, ready=False)
        assert node_state(c) == "cordoned"


run_tests([test_a_failing_flush_is_said_once_in_ten_seconds,
           test_a_cancel_not_yet_stored_reaches_no_node_and_stays_a_cancel,
           test_a_cordon_not_yet_stored_says_so_and_is_kept_once_written])
