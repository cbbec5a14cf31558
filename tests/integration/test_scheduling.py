"""Whole-GPU allocation under contention: 50 jobs with random GPU and node
counts on a small cluster; at no moment is a GPU used by two jobs, checked
from what the ranks themselves record. Plus priority order and cancel of a
process tree."""
import os
import random
import time

from harness import cluster, node_pids, run_tests, wait_for

# Each rank appends "start <ns> <node> <gpus>" when it begins and "end ..."
# when it ends; the test rebuilds the intervals from these records.
RECORD = ('f=%s/$ANVIL_JOB_ID-$NODE_RANK; '
          'echo "$ANVIL_NODE $CUDA_VISIBLE_DEVICES $(date +%%s%%N)" > $f.start; '
          'sleep %s; echo "$(date +%%s%%N)" > $f.end')


def test_fifty_random_jobs_never_share_a_gpu():
    rnd = random.Random(1234)
    with cluster(agents=3, gpus=4, name="nodouble") as c:
        out = os.path.join(c.dir, "rec")
        os.makedirs(out)
        jobs = []
        for i in range(50):
            gpus = rnd.choice([1, 1, 1, 2, 2, 3, 4])
            nodes = rnd.choice([1, 1, 1, 2])
            dur = "0.%d" % rnd.randint(1, 6)
            jobs.append(c.submit(["sh", "-c", RECORD % (out, dur)], gpus=gpus, nodes=nodes))
        for j in jobs:
            done = c.wait_job(j["id"], timeout=120)
            assert done["state"] == "succeeded", done
        intervals = []
        for j in jobs:
            for rank in range(j["nodes"]):
                base = os.path.join(out, "%d-%d" % (j["id"], rank))
                node, gpus, start = open(base + ".start").read().split()
                end = int(open(base + ".end").read())
                g = gpus.split(",")
                assert len(g) == j["gpus"], (j, gpus)
                intervals.append((node, g, int(start), end, j["id"]))
        used = 0
        for i, (n1, g1, s1, e1, j1) in enumerate(intervals):
            for n2, g2, s2, e2, j2 in intervals[i + 1:]:
                if n1 == n2 and j1 != j2 and set(g1) & set(g2):
                    overlap = min(e1, e2) - max(s1, s2)
                    assert overlap <= 0, "jobs %d and %d shared GPU %s on %s" % (
                        j1, j2, set(g1) & set(g2), n1)
                    used += 1
        assert used > 0, "the test must have GPUs reused over time to mean anything"


def test_priority_then_fifo():
    with cluster(agents=1, gpus=1, name="prio") as c:
        out = os.path.join(c.dir, "order")
        blocker = c.submit(["sleep", "1"], gpus=1)
        wait_for(lambda: c.job(blocker["id"])["state"] == "running", what="blocker")
        cmd = lambda tag: ["sh", "-c", "echo %s >> %s" % (tag, out)]
        low = c.submit(cmd("low"), gpus=1, priority=-5)
        a = c.submit(cmd("a"), gpus=1)
        b = c.submit(cmd("b"), gpus=1)
        high = c.submit(cmd("high"), gpus=1, priority=10)
        for j in (low, a, b, high):
            c.wait_job(j["id"])
        assert open(out).read().split() == ["high", "a", "b", "low"]
        pending = c.submit(["true"], gpus=1)
        assert c.wait_job(pending["id"])["state"] == "succeeded"


def pid_alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_cancel_kills_the_whole_process_tree():
    with cluster(agents=1, gpus=2, name="cancel") as c:
        pids = os.path.join(c.dir, "pids")
        # children, a grandchild, and one that escapes into its own session
        script = ("sleep 300 & echo $! >> {p}; "
                  "sh -c 'sleep 300 & echo $! >> {p}; wait' & echo $! >> {p}; "
                  "setsid sleep 300 & echo $! >> {p}; "
                  "echo $$ >> {p}; wait").format(p=pids)
        j = c.submit(["sh", "-c", script], gpus=1, grace_ms=2000)
        wait_for(lambda: os.path.exists(pids) and len(open(pids).read().split()) >= 5,
                 what="process tree started")
        # the node's pids: the rank has a PID namespace of its own
        tree = node_pids(c.rank_pid(j["id"]), [int(x) for x in open(pids).read().split()])
        assert len(tree) == 5 and all(pid_alive(p) for p in tree), tree
        r = c.cli("cancel", str(j["id"]), check=True)
        assert str(j["id"]) in r.stdout + r.stderr
        done = c.wait_job(j["id"], timeout=30)
        assert done["state"] == "cancelled", done
        wait_for(lambda: not any(pid_alive(p) for p in tree), timeout=10,
                 what="no survivor of %s" % tree)
        # the GPU is free again
        again = c.submit(["true"], gpus=2)
        assert c.wait_job(again["id"])["state"] == "succeeded"


def test_cancel_pending_job():
    with cluster(agents=1, gpus=1, name="cancelpending") as c:
        blocker = c.submit(["sleep", "2"], gpus=1)
        p = c.submit(["true"], gpus=1)
        assert c.job(p["id"])["state"] == "pending"
        reason = c.job(p["id"])["reason"]
        assert "GPU" in reason and "needs" in reason, reason
        c.api("POST", "/v1/jobs/%d/cancel" % p["id"])
        assert c.job(p["id"])["state"] == "cancelled"
        assert c.wait_job(blocker["id"])["state"] == "succeeded"
        assert c.job(p["id"])["attempts"] == []


run_tests([test_fifty_random_jobs_never_share_a_gpu, test_priority_then_fifo,
           test_cancel_kills_the_whole_process_tree, test_cancel_pending_job])
