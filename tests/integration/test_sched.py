"""The scheduler through the real server: queue priorities and preemption,
team quotas with borrowing and reclaim, `anvil why`, topology-aware gangs,
constraints, cordoned nodes, time limits, and run-time queue changes
recorded as events."""
import json
import os
import time

from harness import ApiError, cluster, run_tests, wait_for


# Preemption guards off: these tests' victims are seconds old.
FAST_PREEMPT = ["--preempt-min-runtime", "0s", "--preempt-loss-pct", "0"]


def state(c, jid):
    return c.job(jid)["state"]


def running(c, jids):
    return [j for j in jids if state(c, j) == "running"]


def test_quota_blocks_and_why_explains():
    with cluster(agents=1, gpus=4, name="quota") as c:
        c.api("POST", "/v1/queues", {"name": "research", "borrowing": False,
                                     "quotas": {"vision": 2, "nlp": 2}})
        ids = [c.submit(["sleep", "30"], gpus=1, queue="research", team="vision")["id"]
               for _ in range(3)]
        wait_for(lambda: len(running(c, ids)) == 2, what="two of three running")
        time.sleep(0.3)
        waiting = [j for j in ids if state(c, j) == "pending"]
        assert len(waiting) == 1, [c.job(j) for j in ids]
        why = c.cli("why", str(waiting[0]), check=True).stdout
        assert "quota" in why and "2/2" in why, why
        # another team is not blocked by vision's quota: the queue keeps moving
        other = c.submit(["true"], gpus=1, queue="research", team="nlp")
        assert c.wait_job(other["id"])["state"] == "succeeded"
        ls = c.cli("queue", "ls", check=True).stdout
        assert "research" in ls and "vision 2/2" in ls, ls
        # raising the quota at run time lets the waiting job start
        c.cli("queue", "set", "research", "--quota", "vision=3", check=True)
        wait_for(lambda: state(c, waiting[0]) == "running", what="quota raised")
        events = c.api("GET", "/v1/events?limit=50")["events"]
        assert any(e["kind"] == "queue.changed" and "research" in e["message"] for e in events)


def test_why_estimates_a_job_far_back():
    """The dry run at the end of each cycle estimates the first 1,024 waiting
    jobs; `anvil why` on one further back runs a cycle that reaches it."""
    with cluster(agents=1, gpus=1, name="estimate") as c:
        blocker = c.submit(["sleep", "120"], gpus=1, time_limit_ms=3600_000)["id"]
        wait_for(lambda: state(c, blocker) == "running", what="blocker running")
        ids = [c.submit(["true"], gpus=1, time_limit_ms=60_000)["id"] for _ in range(1100)]
        far = ids[1059]  # 1,060th in line: past the usual window of 1,024
        near = ids[9]
        wait_for(lambda: c.job(near).get("est_start_time_ms"), what="estimates of the first")
        assert c.job(far).get("est_start_time_ms") is None, c.job(far)
        job = c.api("GET", "/v1/jobs/%d/why" % far)["job"]
        est = job.get("est_start_time_ms")
        assert est, job
        # the blocker ends within the hour; each of the 1,059 ahead then runs
        # to its one-minute limit
        near_est = c.job(near)["est_start_time_ms"]
        assert abs(est - near_est - 1050 * 60_000) < 5_000, (est, near_est)
        why = c.cli("why", str(ids[-1]), check=True).stdout
        assert "estimated start in" in why and "unknown" not in why, why
        with_json = json.loads(c.cli("why", "--json", str(far), check=True).stdout)
        assert with_json["job"]["est_start_time_ms"], with_json
        c.cli("cancel", str(blocker), check=True)

def test_priority_preempts_lower_and_requeues_it():
    with cluster(agents=1, gpus=2, name="preempt", server_args=FAST_PREEMPT) as c:
        c.api("POST", "/v1/queues", {"name": "urgent", "priority": 100})
        low = [c.submit(["sleep", "60"], gpus=1, grace_ms=500)["id"] for _ in range(2)]
        wait_for(lambda: len(running(c, low)) == 2, what="low jobs running")
        hi = c.submit(["sh", "-c", "echo urgent"], gpus=1, queue="urgent")["id"]
        done = c.wait_job(hi, timeout=30)
        assert done["state"] == "succeeded", done
        jobs = [c.job(j) for j in low]
        preempted = [j for j in jobs if any(a["state"] == "preempted" for a in j["attempts"])]
        assert len(preempted) == 1, jobs
        p = preempted[0]
        assert p["attempts"][0]["preempted_for"] == hi
        # requeued, and started again once the urgent job left
        wait_for(lambda: state(c, p["id"]) == "running" and len(c.job(p["id"])["attempts"]) == 2,
                 what="preempted job restarted as attempt 2")


def test_borrowed_quota_is_reclaimed():
    with cluster(agents=1, gpus=4, name="reclaim", server_args=FAST_PREEMPT) as c:
        c.api("POST", "/v1/queues", {"name": "shared", "borrowing": True,
                                     "quotas": {"a": 2, "b": 2}})
        bs = [c.submit(["sleep", "60"], gpus=1, queue="shared", team="b", grace_ms=500)["id"]
              for _ in range(4)]
        wait_for(lambda: len(running(c, bs)) == 4, what="b borrows a's idle quota")
        borrowed = [j for j in bs if c.job(j)["attempts"][0]["borrowed"]]
        assert len(borrowed) == 2, [c.job(j) for j in bs]
        a = c.submit(["sh", "-c", "echo mine"], gpus=1, queue="shared", team="a")["id"]
        assert c.wait_job(a, timeout=30)["state"] == "succeeded"
        jobs = [c.job(j) for j in bs]
        victims = [j for j in jobs if j["attempts"][0]["state"] == "preempted"]
        assert len(victims) == 1 and victims[0]["attempts"][0]["borrowed"], jobs


def test_borrower_stops_lower_queue_work():
    """A job larger than its team's quota runs on borrowed quota, and may stop
    a lower queue's work to get its GPUs (but never reclaims)."""
    with cluster(agents=1, gpus=4, name="borrowpre", server_args=FAST_PREEMPT) as c:
        c.api("POST", "/v1/queues", {"name": "shared", "priority": 10, "borrowing": True,
                                     "quotas": {"a": 2, "b": 2}})
        c.api("POST", "/v1/queues", {"name": "scav", "priority": 0})
        scav = [c.submit(["sleep", "120"], gpus=1, queue="scav", grace_ms=500)["id"]
                for _ in range(4)]
        wait_for(lambda: len(running(c, scav)) == 4, what="scavenger work on every GPU")
        big = c.submit(["sh", "-c", "echo borrowed"], gpus=4, queue="shared", team="a")["id"]
        done = c.wait_job(big, timeout=30)
        assert done["state"] == "succeeded" and done["attempts"][0]["borrowed"], done
        victims = [j for j in (c.job(x) for x in scav)
                   if j["attempts"][0]["state"] == "preempted"]
        assert len(victims) == 4, [c.job(x) for x in scav]
        assert all(v["attempts"][0]["preempted_for"] == big for v in victims), victims


def test_gang_packs_into_one_switch_and_constraints_hold():
    with cluster(agents=4, gpus=2, name="topo") as c:
        for i, sw in enumerate(["s1", "s1", "s2", "s2"]):
            c.cli("node", "label", "node-%d" % (i + 1), "switch=" + sw, "rack=r1", check=True)
        c.cli("node", "label", "node-4", "disk=nvme", check=True)
        blocker = c.submit(["sleep", "30"], gpus=1)["id"]
        wait_for(lambda: state(c, blocker) == "running", what="blocker")
        node_of_blocker = c.job(blocker)["attempts"][0]["ranks"][0]["node"]
        gang = c.submit(["true"], gpus=2, nodes=2)["id"]
        g = c.wait_job(gang)
        nodes = sorted(r["node"] for r in g["attempts"][0]["ranks"])
        switch = {"node-1": "s1", "node-2": "s1", "node-3": "s2", "node-4": "s2"}
        assert len({switch[n] for n in nodes}) == 1, nodes
        assert node_of_blocker not in nodes
        sel = c.submit(["true"], gpus=1, selectors={"disk": "nvme"})["id"]
        assert c.wait_job(sel)["attempts"][0]["ranks"][0]["node"] == "node-4"
        # The scheduler glue has interned every node's labels by now: a
        # label set later must reach it (state_sched_forget_node).
        c.cli("node", "label", "node-3", "disk=ssd", check=True)
        ssd = c.submit(["true"], gpus=1, selectors={"disk": "ssd"})["id"]
        assert c.wait_job(ssd)["attempts"][0]["ranks"][0]["node"] == "node-3"
        try:
            c.submit(["true"], gpus=1, gpu_type="a100")
            raise AssertionError("a job for a GPU model no node has must be rejected")
        except ApiError as e:
            assert e.status == 422 and "a100" in json.dumps(e.body), e.body


def test_cordoned_node_takes_no_work_and_time_limit_stops_jobs():
    with cluster(agents=2, gpus=1, name="cordon") as c:
        c.cli("node", "cordon", "node-1", check=True)
        ids = [c.submit(["true"], gpus=1)["id"] for _ in range(3)]
        for j in ids:
            done = c.wait_job(j)
            assert done["attempts"][0]["ranks"][0]["node"] == "node-2", done
        c.cli("node", "uncordon", "node-1", check=True)
        t = c.submit(["sleep", "30"], gpus=1, time_limit_ms=1000, grace_ms=200)["id"]
        done = c.wait_job(t, timeout=20)
        assert done["state"] == "failed" and "time limit" in done["reason"], done


def test_scheduler_settings_survive_a_server_sigkill():
    with cluster(agents=1, gpus=2, name="schedrestart") as c:
        c.api("POST", "/v1/queues", {"name": "q1", "priority": 7, "weight": 3, "borrowing": False,
                                     "default_time_limit_ms": 3600000, "quotas": {"t1": 1}})
        c.api("POST", "/v1/teams", {"name": "t1", "weight": 4})
        c.cli("node", "label", "node-1", "switch=s9", "--pool", "batch", check=True)
        j = c.submit(["sleep", "30"], gpus=1, queue="q1", team="t1", time_limit_ms=600000,
                     gpu_type="h200", selectors={"switch": "s9"}, checkpointing=True)
        wait_for(lambda: state(c, j["id"]) == "running", what="running")
        c.kill_server()
        c.start_server()
        q = [x for x in c.api("GET", "/v1/queues")["queues"] if x["name"] == "q1"][0]
        assert (q["priority"], q["weight"], q["borrowing"], q["default_time_limit_ms"]) == \
            (7, 3, False, 3600000), q
        assert q["quotas"] == [{"team": "t1", "nominal_gpus": 1, "used_gpus": 1}], q
        t = [x for x in c.api("GET", "/v1/teams")["teams"] if x["name"] == "t1"][0]
        assert t["weight"] == 4, t
        n = c.nodes()[0]
        assert n["labels"] == {"switch": "s9"} and n["pool"] == "batch", n
        job = c.job(j["id"])
        assert job["team"] == "t1" and job["time_limit_ms"] == 600000 and job["checkpointing"]
        assert job["constraints"] == {"gpu_type": "h200", "selectors": {"switch": "s9"}}, job


def test_young_attempts_are_not_preempted_by_default():
    with cluster(agents=1, gpus=1, name="young") as c:
        c.api("POST", "/v1/queues", {"name": "urgent", "priority": 100})
        low = c.submit(["sleep", "30"], gpus=1)["id"]
        wait_for(lambda: state(c, low) == "running", what="low running")
        hi = c.submit(["true"], gpus=1, queue="urgent")["id"]
        time.sleep(1.0)
        assert state(c, low) == "running", c.job(low)
        assert state(c, hi) == "pending", c.job(hi)
        c.api("POST", "/v1/jobs/%d/cancel" % low)
        assert c.wait_job(hi)["state"] == "succeeded"


def test_checkpointing_job_reports_its_checkpoints():
    with cluster(agents=1, gpus=1, name="ckpt") as c:
        j = c.submit(["sh", "-c", 'test -d "$ANVIL_CHECKPOINT_DIR" || exit 9; sleep 1; '
                      'echo w > "$ANVIL_CHECKPOINT_DIR/step-1"; sleep 30'],
                     gpus=1, checkpointing=True)["id"]
        wait_for(lambda: state(c, j) == "running", what="running")
        start = c.job(j)["attempts"][0]["start_time_ms"]

        def late_checkpoint():
            t = c.job(j)["attempts"][0]["checkpoint_time_ms"]
            return t if t and t >= start + 800 else None
        wait_for(late_checkpoint, timeout=15, what="a checkpoint reported after the write")
        plain = c.submit(["sh", "-c", 'test -z "$ANVIL_CHECKPOINT_DIR"'], gpus=1)["id"]
        assert c.wait_job(plain)["state"] == "succeeded"
        c.api("POST", "/v1/jobs/%d/cancel" % j)


run_tests([test_checkpointing_job_reports_its_checkpoints,
           test_scheduler_settings_survive_a_server_sigkill,
           test_young_attempts_are_not_preempted_by_default, test_quota_blocks_and_why_explains,
           test_why_estimates_a_job_far_back, test_priority_preempts_lower_and_requeues_it,
           test_borrowed_quota_is_reclaimed, test_borrower_stops_lower_queue_work,
           test_gang_packs_into_one_switch_and_constraints_hold,
           test_cordoned_node_takes_no_work_and_time_limit_stops_jobs])
