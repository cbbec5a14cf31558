"""GET /v1/jobs/ID?wait_ms=N&while=STATE, a job's long poll: held while the
job stays in STATE, answered when it leaves it or at the deadline, refused
with the field's name when the query is wrong; `anvil shell` waits this
way."""
import threading
import time

from harness import ApiError, cluster, run_tests, wait_for


def test_a_long_poll_is_held_until_the_job_moves_or_the_deadline():
    with cluster(agents=1, gpus=1, name="jobwait") as c:
        busy = c.submit(["sleep", "30"], gpus=1)["id"]
        c.wait_job(busy, states=("running",), timeout=30)
        queued = c.submit(["true"], gpus=1)["id"]
        # the deadline: still pending after it, answered with the job
        t0 = time.monotonic()
        j = c.api("GET", "/v1/jobs/%d?wait_ms=400&while=pending" % queued)["job"]
        took = time.monotonic() - t0
        assert j["state"] == "pending" and took >= 0.35, (j["state"], took)
        # not in that state: answered at once
        t0 = time.monotonic()
        j = c.api("GET", "/v1/jobs/%d?wait_ms=5000&while=running" % queued)["job"]
        assert j["state"] == "pending" and time.monotonic() - t0 < 2, j
        # a move wakes it: the busy job is cancelled, the queued one runs
        got = {}

        def poll():
            got["t"] = time.monotonic()
            got["job"] = c.api("GET", "/v1/jobs/%d?wait_ms=20000&while=pending" % queued)["job"]
            got["took"] = time.monotonic() - got["t"]

        th = threading.Thread(target=poll)
        th.start()
        time.sleep(0.3)
        c.api("POST", "/v1/jobs/%d/cancel" % busy)
        th.join(30)
        assert got["job"]["state"] != "pending" and got["took"] < 10, got
        for q in ("wait_ms=x&while=pending", "wait_ms=100", "wait_ms=100&while=nope",
                  "wait_ms=999999&while=pending"):
            try:
                c.api("GET", "/v1/jobs/%d?%s" % (queued, q))
                raise AssertionError("accepted " + q)
            except ApiError as e:
                assert e.status == 400 and "wait_ms" in e.body["error"]["message"], e
        try:
            c.api("GET", "/v1/jobs/999?wait_ms=100&while=pending")
            raise AssertionError("found")
        except ApiError as e:
            assert e.status == 404, e
        # many held polls take no HTTP thread: the server still answers
        hold = c.submit(["sleep", "30"], gpus=1)["id"]
        c.wait_job(hold, states=("running",), timeout=30)
        held = []
        ths = [threading.Thread(target=lambda: held.append(c.api(
            "GET", "/v1/jobs/%d?wait_ms=1500&while=running" % hold)["job"]["state"]))
            for _ in range(8)]
        t0 = time.monotonic()
        for t in ths:
            t.start()
        time.sleep(0.2)
        assert c.api("GET", "/v1/jobs/%d" % queued)["job"]["id"] == queued
        assert time.monotonic() - t0 < 1.2
        for t in ths:
            t.join(10)
        assert held == ["running"] * 8 and time.monotonic() - t0 >= 1.4, held
        c.api("POST", "/v1/jobs/%d/cancel" % hold)


run_tests([test_a_long_poll_is_held_until_the_job_moves_or_the_deadline])
