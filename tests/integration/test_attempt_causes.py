"""Why an attempt ended, through the real server, agents and CLI: a requeued
attempt carries its cause (preemption for a higher-priority job, a quota
reclaim by another team, a GPU fault, a drain) in the API's attempt view and
in `anvil show`, and keeps it across a server SIGKILL; attempts admitted on
borrowed quota are marked in `anvil show` and `anvil jobs`; and `anvil jobs`
shows no node for a pending job that was requeued."""
import json
import re

from harness import cluster, run_tests, wait_for

# Preemption guards off: these tests' victims are seconds old.
FAST_PREEMPT = ["--preempt-min-runtime", "0s", "--preempt-loss-pct", "0"]
FAST_GPU = ("--gpu-sample-ms", "200")


def state(c, jid):
    return c.job(jid)["state"]


def jobs_rows(c):
    """`anvil jobs` as {id: [ID, NAME, STATE, WHERE, ...]}: cells are
    separated by two spaces or more (a STATE may hold one: "(borrowed)")."""
    out = c.cli("jobs", check=True).stdout
    rows = {}
    for line in out.splitlines()[1:]:
        cells = re.split(r"\s{2,}", line.strip())
        rows[int(cells[0])] = cells
    return rows


def show(c, jid):
    return c.cli("show", str(jid), check=True).stdout


def requeued_and_pending(c, jid):
    j = c.job(jid)
    return j["state"] == "pending" and j["attempts"] and \
        j["attempts"][-1]["state"] == "preempted"


def test_priority_preemption_cause_survives_a_server_sigkill():
    with cluster(agents=1, gpus=1, name="causeprio", server_args=FAST_PREEMPT) as c:
        c.api("POST", "/v1/queues", {"name": "urgent", "priority": 100})
        low = c.submit(["sleep", "60"], gpus=1, grace_ms=500, name="low")["id"]
        wait_for(lambda: state(c, low) == "running", what="low running")
        hi = c.submit(["sleep", "60"], gpus=1, queue="urgent", name="hi")["id"]
        wait_for(lambda: requeued_and_pending(c, low) and state(c, hi) == "running",
                 timeout=30, what="low requeued behind the urgent job")
        cause = "preempted for job %d (higher priority)" % hi
        for when in ("before", "after"):
            # a pending job runs nowhere: no node in `anvil jobs`, none in the listing
            rows = jobs_rows(c)
            assert rows[low][2] == "pending" and rows[low][3] == "-", (when, rows)
            assert rows[hi][2] == "running" and rows[hi][3] == "node-1:0", (when, rows)
            listed = json.loads(c.cli("jobs", "--json", check=True).stdout)["jobs"]
            entry = [j for j in listed if j["id"] == low][0]
            assert entry["placement"] == [] and entry["borrowed"] is False, entry
            # the requeued attempt says why, in the API and in `anvil show`
            out = show(c, low)
            a = c.job(low)["attempts"][0]
            assert "attempt 1 (id %d): preempted" % a["id"] in out, (when, out)
            assert "  requeued: " + cause + "\n" in out, (when, out)
            assert "borrowed" not in out, (when, out)
            assert a.get("end_reason") == cause and a["preempted_for"] == hi, (when, a)
            assert not a["borrowed"], a
            if when == "before":
                c.kill_server()
                c.start_server()
        events = c.cli("events", "--job", str(low), check=True).stdout
        assert cause in events, events
        c.cli("cancel", str(hi), str(low), check=True)


def test_reclaim_names_the_team_and_borrowed_attempts_are_marked():
    with cluster(agents=1, gpus=4, name="causereclaim", server_args=FAST_PREEMPT) as c:
        c.api("POST", "/v1/queues", {"name": "shared", "borrowing": True,
                                     "quotas": {"a": 2, "b": 2}})
        bs = [c.submit(["sleep", "60"], gpus=1, queue="shared", team="b", grace_ms=500,
                       name="b%d" % i)["id"] for i in range(4)]
        wait_for(lambda: all(state(c, j) == "running" for j in bs), what="b on every GPU")
        borrowed = [j for j in bs if c.job(j)["attempts"][0]["borrowed"]]
        assert len(borrowed) == 2, [c.job(j) for j in bs]
        rows = jobs_rows(c)
        for j in bs:
            mark = "running (borrowed)" if j in borrowed else "running"
            assert rows[j][2] == mark, rows
        assert "attempt 1 (id %d): running on borrowed quota" % \
            c.job(borrowed[0])["attempts"][0]["id"] in show(c, borrowed[0])
        a = c.submit(["sleep", "60"], gpus=1, queue="shared", team="a", name="a")["id"]
        wait_for(lambda: state(c, a) == "running", timeout=30, what="team a reclaims")
        victims = [j for j in bs if requeued_and_pending(c, j)]
        assert len(victims) == 1 and victims[0] in borrowed, [c.job(j) for j in bs]
        v = victims[0]
        cause = "reclaimed by team a for job %d" % a
        att = c.job(v)["attempts"][0]
        assert att.get("end_reason") == cause and att["borrowed"], att
        out = show(c, v)
        assert "attempt 1 (id %d): preempted on borrowed quota" % att["id"] in out, out
        assert "  requeued: " + cause + "\n" in out, out
        rows = jobs_rows(c)
        assert rows[v][2] == "pending" and rows[v][3] == "-", rows
        c.cli("cancel", *[str(j) for j in bs + [a]], check=True)


def test_gpu_fault_and_drain_causes():
    with cluster(agents=1, gpus=2, agent_args=FAST_GPU, name="causefault") as c:
        # an attempt that ends for good keeps the job's final reason as its own
        f = c.submit(["sh", "-c", "exit 3"], gpus=1)["id"]
        assert c.wait_job(f)["attempts"][0].get("end_reason") == \
            "rank 0 on node-1 exited non-zero"
        assert "  ended: rank 0 on node-1 exited non-zero\n" in show(c, f)
        j = c.submit(["sleep", "60"], gpus=1, grace_ms=500)["id"]
        wait_for(lambda: state(c, j) == "running", what="running")
        bad = c.job(j)["attempts"][0]["ranks"][0]["gpus"][0]
        c.api("POST", "/v1/nodes/node-1/faults", {"gpu": bad, "kind": "xid", "xid": 48})
        wait_for(lambda: c.job(j)["attempts"][0]["state"] == "preempted", timeout=30,
                 what="attempt 1 requeued off the bad GPU")
        why = c.job(j)["attempts"][0].get("end_reason", "")
        assert why.startswith("GPU %d of node node-1 " % bad) and "XID 48" in why, why
        assert "  requeued: GPU %d of node node-1 " % bad in show(c, j)
        # the job runs again on the good GPU; a drain requeues it with its reason
        wait_for(lambda: state(c, j) == "running", timeout=30, what="attempt 2 running")
        c.cli("node", "drain", "node-1", "--reason", "new NIC", check=True)
        wait_for(lambda: requeued_and_pending(c, j) and len(c.job(j)["attempts"]) == 2,
                 timeout=30, what="attempt 2 requeued by the drain")
        assert c.job(j)["attempts"][1].get("end_reason") == "node node-1 draining: new NIC"
        out = show(c, j)
        assert "  requeued: node node-1 draining: new NIC\n" in out, out
        rows = jobs_rows(c)
        assert rows[j][2] == "pending" and rows[j][3] == "-", rows
        c.cli("cancel", str(j), check=True)
        assert c.wait_job(j)["state"] == "cancelled"
        assert show(c, j).count("  requeued: ") == 2


run_tests([test_priority_preemption_cause_survives_a_server_sigkill,
           test_reclaim_names_the_team_and_borrowed_attempts_are_marked,
           test_gpu_fault_and_drain_causes])
