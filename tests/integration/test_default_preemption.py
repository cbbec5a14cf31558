"""Preemption and quotas at the settings a user meets: no preemption flags
(one test shortens the minimum runtime, as docs/scheduling.md shows, so
that it does not wait five minutes). Quota reclaim is a guarantee; a
higher-priority job stops an equal one once its minimum runtime has
passed; a one-GPU job does not stop a gang that has just checkpointed; and
`anvil why` says which of these holds a job back, by whom and until when."""
import re
import time

from harness import cluster, run_tests, wait_for

# A victim that ignores SIGTERM takes its whole grace to stop, so that the
# waiting job's reason can be read while it does.
STUBBORN = ["sh", "-c", "trap '' TERM; sleep 600"]


def state(c, jid):
    return c.job(jid)["state"]


def why(c, jid):
    return c.cli("why", str(jid), check=True).stdout


def test_quota_reclaim_at_default_settings():
    """The issue's case: a=1, b=1 on one 2-GPU node; a runs two jobs (one
    borrowed); b's one job gets its GPU back within the victim's grace plus
    a cycle, and `why` says whose GPU it reclaims."""
    with cluster(agents=1, gpus=2, name="reclaimdef") as c:
        c.cli("queue", "set", "research", "--borrowing", "yes", "--quota", "a=1",
              "--quota", "b=1", check=True)
        a = [c.submit(STUBBORN, gpus=1, queue="research", team="a", grace_ms=3000)["id"]
             for _ in range(2)]
        wait_for(lambda: all(state(c, j) == "running" for j in a), what="a runs two jobs")
        borrowed = [j for j in a if c.job(j)["attempts"][0]["borrowed"]]
        assert len(borrowed) == 1, [c.job(j) for j in a]
        t0 = time.time()
        b = c.submit(["sleep", "30"], gpus=1, queue="research", team="b")["id"]
        text = wait_for(lambda: (lambda w: w if "reclaim" in w else None)(why(c, b)),
                        timeout=5, what="why names the reclaim")
        assert "borrowed by team a" in text and "job %d" % borrowed[0] in text, text
        assert "lower-priority" not in text, text
        # the victim's grace (3 s) plus a cycle (1 s), with slack for a loaded CI machine;
        # before reclaim was a guarantee it took the victim's 5-minute minimum runtime
        wait_for(lambda: state(c, b) == "running", timeout=3 + 7, what="b running")
        took = time.time() - t0
        assert took < 3 + 7, took
        victim = c.job(borrowed[0])
        assert victim["attempts"][0]["state"] == "preempted", victim
        assert victim["attempts"][0]["preempted_for"] == b, victim
        other = [j for j in a if j != borrowed[0]][0]
        assert state(c, other) == "running", c.job(other)  # within a's quota: kept
        for j in a + [b]:
            c.cli("cancel", str(j))


def test_equal_size_priority_preemption_after_the_minimum_runtime():
    """Same size, higher priority: the running job is stopped once its
    minimum runtime (here 4 s) has passed, however long it has run, and
    until then `why` says when."""
    with cluster(agents=1, gpus=2, name="equals",
                 server_args=["--preempt-min-runtime", "4s"]) as c:
        low = c.submit(["sleep", "600"], gpus=2)["id"]
        wait_for(lambda: state(c, low) == "running", what="low running")
        hi = c.submit(["sleep", "60"], gpus=2, priority=50)["id"]
        text = wait_for(lambda: (lambda w: w if "minimum runtime" in w else None)(why(c, hi)),
                        timeout=5, what="why says when")
        assert "job %d (lower priority) holds 2 GPUs" % low in text, text
        assert re.search(r"may be preempted at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", text), text
        # the estimate is the end of the minimum runtime, not low's time limit (24 h)
        est = re.search(r"estimated start in (\S+)", text)
        assert est and "h" not in est.group(1) and "d" not in est.group(1), text
        wait_for(lambda: state(c, hi) == "running", timeout=15, what="hi preempts low")
        j = c.job(low)
        assert j["attempts"][0]["state"] == "preempted" and j["state"] == "pending", j
        start = j["attempts"][0]["start_time_ms"]
        end = j["attempts"][0]["end_time_ms"]
        assert end - start >= 4000, j  # not before its minimum runtime
        c.cli("cancel", str(hi), check=True)
        wait_for(lambda: state(c, low) == "running", what="low back on its GPUs")
        assert len(c.job(low)["attempts"]) == 2
        c.cli("cancel", str(low), check=True)


def test_one_gpu_does_not_stop_a_gang_that_just_checkpointed():
    """The loss limit: a one-GPU job of higher priority does not stop an
    8-GPU gang for its one GPU, and `why` says so."""
    with cluster(agents=2, gpus=4, name="gangkeep",
                 server_args=["--preempt-min-runtime", "1s"]) as c:
        gang = c.submit(["sh", "-c", 'echo w > "$ANVIL_CHECKPOINT_DIR/step-1"; sleep 600'],
                        gpus=4, nodes=2, checkpointing=True)["id"]
        wait_for(lambda: state(c, gang) == "running", what="gang running")
        wait_for(lambda: c.job(gang)["attempts"][0].get("checkpoint_time_ms"),
                 what="the gang's checkpoint")
        hi = c.submit(["true"], gpus=1, priority=50)["id"]
        text = wait_for(lambda: (lambda w: w if "loss limit" in w else None)(why(c, hi)),
                        timeout=5, what="why names the loss limit")
        assert "job %d (lower priority) holds 8 GPUs" % gang in text, text
        assert "would stop 8 GPUs of work for the 1 it asks for" in text, text
        time.sleep(2.5)  # past the minimum runtime, several cycles
        assert state(c, gang) == "running" and state(c, hi) == "pending", (c.job(gang),
                                                                            c.job(hi))
        # a job of the gang's size does stop it (ahead of the small one, whose
        # reservation of the gang's GPUs it would otherwise have to respect)
        big = c.submit(["true"], gpus=4, nodes=2, priority=60)["id"]
        assert c.wait_job(big, timeout=30)["state"] == "succeeded"
        c.cli("cancel", str(gang), check=True)
        c.cli("cancel", str(hi), check=True)


run_tests([test_quota_reclaim_at_default_settings,
           test_equal_size_priority_preemption_after_the_minimum_runtime,
           test_one_gpu_does_not_stop_a_gang_that_just_checkpointed])
