"""Recovery without a human, through the real server, agents and shims: a job
whose node is lost is requeued by itself when it checkpoints or asked for it
(--requeue), onto other nodes, and its new attempt never overlaps the lost
one; a rank whose agent cannot reach the server stops by itself once its
lease runs out (self-fencing), even with its agent stopped; a job that has
used its --max-restarts ends lost, with exit status 75 and the reason; and
--no-requeue keeps a checkpointing job from being requeued."""
import json
import os
import signal
import time

from harness import cluster, run_tests, wait_for

# Each rank appends "ATTEMPT_ID NODE MONOTONIC_NS" to a file of the test's
# every 50 ms: the intervals each attempt ran on each node are read back.
TICKER = ("while :; do echo \"$ANVIL_ATTEMPT_ID $ANVIL_NODE $(cat /proc/uptime | "
          "cut -d' ' -f1)\" >> %s; sleep 0.05; done")


def read_ticks(path):
    """{(attempt_id, node): (first, last)} in seconds since boot."""
    spans = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) != 3:
                continue  # a line cut by a SIGKILL
            key, t = (int(parts[0]), parts[1]), float(parts[2])
            lo, hi = spans.get(key, (t, t))
            spans[key] = (min(lo, t), max(hi, t))
    return spans


def uptime():
    with open("/proc/uptime") as f:
        return float(f.read().split()[0])


def node_of(c, jid, rank=0):
    att = c.job(jid)["attempts"][-1]
    return next(r["node"] for r in att["ranks"] if r["rank"] == rank)


def agent_index(node):
    return int(node.split("-")[1]) - 1


def two_running(c, jid, attempts=1):
    j = c.job(jid)
    return j["state"] == "running" and len(j["attempts"]) == attempts


def test_a_lost_node_requeues_a_checkpointing_gang_elsewhere_without_overlap():
    with cluster(agents=3, gpus=2, node_timeout="3s", name="requeue") as c:
        ticks = os.path.join(c.dir, "ticks")
        j = c.submit(["sh", "-c", TICKER % ticks], gpus=2, nodes=2, checkpointing=True,
                     grace_ms=2000)["id"]
        wait_for(lambda: two_running(c, j), what="the gang running")
        lost = node_of(c, j, 1)
        wait_for(lambda: any(k[1] == lost for k in read_ticks(ticks)), what="ticks")
        c.kill_agent(agent_index(lost))
        killed_at = uptime()
        wait_for(lambda: two_running(c, j, attempts=2), timeout=30,
                 what="the job running again as a second attempt")
        restarted_at = uptime()
        job = c.job(j)
        first, second = job["attempts"]
        assert first["state"] == "lost", first
        assert "was lost with its node (restart 1 of 3)" in first["end_reason"], first
        assert first["lease_end_time_ms"] > 0, first
        assert lost not in [r["node"] for r in second["ranks"]], (lost, second)
        time.sleep(0.5)  # some ticks of the new attempt
        spans = read_ticks(ticks)
        old_end = max(hi for (a, _), (lo, hi) in spans.items() if a == first["id"])
        new_start = min(lo for (a, _), (lo, hi) in spans.items() if a == second["id"])
        assert old_end < new_start, (spans, first["id"], second["id"])
        # the rank on the dead agent's node stopped by itself, at its lease
        on_lost = spans[(first["id"], lost)][1]
        assert on_lost - killed_at < 3.0 + 1.5, (on_lost - killed_at, spans)
        events = c.api("GET", "/v1/events?job=%d" % j)["events"]
        requeued = [e for e in events if e["kind"] == "job.requeued"]
        assert requeued and "was lost with its node" in requeued[0]["message"], events
        print("lost at +0 s, lease end +%.2f s, new attempt running at +%.2f s" %
              (on_lost - killed_at, restarted_at - killed_at))
        c.cli("cancel", str(j), check=True)


def test_a_stopped_agents_ranks_stop_themselves_before_the_replacement_starts():
    with cluster(agents=2, gpus=2, node_timeout="3s", name="fence") as c:
        ticks = os.path.join(c.dir, "ticks")
        j = c.submit(["sh", "-c", TICKER % ticks], gpus=2, requeue=True,
                     grace_ms=1000)["id"]
        wait_for(lambda: two_running(c, j), what="the job running")
        node = node_of(c, j)
        pid = c.rank_pid(j)
        c.agents[agent_index(node)].send_signal(signal.SIGSTOP)
        try:
            stopped_at = uptime()
            # the shim, not the (stopped) agent, ends the rank at its lease
            wait_for(lambda: not os.path.exists("/proc/%d" % pid) or
                     open("/proc/%d/stat" % pid).read().split(")")[-1].split()[0] == "Z",
                     timeout=15, what="the rank stopping by itself")
            fenced_after = uptime() - stopped_at
            assert fenced_after < 3.0 + 1.5, fenced_after
            wait_for(lambda: two_running(c, j, attempts=2), timeout=30,
                     what="the replacement running")
            first, second = c.job(j)["attempts"]
            spans = read_ticks(ticks)
            assert spans[(first["id"], node)][1] < min(
                lo for (a, _), (lo, hi) in spans.items() if a == second["id"]), spans
            assert node_of(c, j) != node
        finally:
            c.agents[agent_index(node)].send_signal(signal.SIGCONT)
        err = open(os.path.join(c.work_dir(agent_index(node)), "logs",
                                "%d-0.err" % first["id"])).read()
        assert "has not reached the server for the rank's lease" in err, err
        c.wait_ready(2)  # back, and running nothing it should not
        c.cli("cancel", str(j), check=True)


def test_max_restarts_exhausted_ends_lost_with_the_reason_and_75():
    with cluster(agents=2, gpus=1, node_timeout="2s", name="maxrs") as c:
        r = c.cli("run", "--gpus", "1", "--requeue", "--max-restarts", "1", "--json", "--",
                  "sleep", "600", check=True)
        j = json.loads(r.stdout)["job"]["id"]
        for attempt in (1, 2):
            wait_for(lambda: two_running(c, j, attempts=attempt), timeout=30,
                     what="attempt %d running" % attempt)
            i = agent_index(node_of(c, j))
            c.kill_agent(i)
            if attempt == 1:
                wait_for(lambda: c.job(j)["state"] in ("pending", "scheduled", "running") and
                         len(c.job(j)["attempts"]) == 2 or c.job(j)["state"] == "pending",
                         timeout=20, what="requeued")
                c.start_agent(i)
        done = c.wait_job(j, timeout=30)
        assert done["state"] == "lost", done
        assert done["exit_code"] == 75, done
        assert "not requeued: it was restarted 1 time(s), its max_restarts" in done["reason"], done
        assert [a["state"] for a in done["attempts"]] == ["lost", "lost"], done
        show = c.cli("show", str(j), check=True).stdout
        assert "restart 1 of 1" in show, show
        w = c.cli("run", "--wait", "--gpus", "1", "--", "true")  # a node is still there
        assert w.returncode == 0, w.stderr


def test_no_requeue_keeps_a_checkpointing_job_lost():
    with cluster(agents=2, gpus=1, node_timeout="2s", name="norq") as c:
        r = c.cli("run", "--gpus", "1", "--checkpointing", "--no-requeue", "--json", "--",
                  "sleep", "600", check=True)
        j = json.loads(r.stdout)["job"]["id"]
        wait_for(lambda: two_running(c, j), what="running")
        assert c.job(j)["requeue"] is False
        c.kill_agent(agent_index(node_of(c, j)))
        done = c.wait_job(j, timeout=20)
        assert done["state"] == "lost" and len(done["attempts"]) == 1, done
        assert done["exit_code"] == 75, done
        assert done["reason"].endswith("was lost with its node"), done
        both = c.cli("run", "--requeue", "--no-requeue", "--", "true")
        assert both.returncode == 2 and "do not go together" in both.stderr, both.stderr


# A training loop that resumes: it starts from the newest checkpoint in
# $ANVIL_CHECKPOINT_DIR (restored there by anvil on a new node), says so,
# and writes step-N every 0.2 s as a directory renamed into place, with the
# step and a 1 MiB file that never changes (so later uploads send only the
# step file).
TRAINER = r"""
set -e
d=$ANVIL_CHECKPOINT_DIR
last=$(ls "$d" | grep '^step-' | sed 's/step-//' | sort -n | tail -1)
step=${last:-0}
echo "attempt $ANVIL_ATTEMPT on $ANVIL_NODE resumed from step $step" >> %(out)s
head -c 1048576 /dev/zero | tr '\0' 'w' > /tmp/weights
while :; do
  step=$((step+1))
  mkdir "$d/.step-$step.tmp"
  cp /tmp/weights "$d/.step-$step.tmp/weights"
  echo $step > "$d/.step-$step.tmp/state"
  mv "$d/.step-$step.tmp" "$d/step-$step"
  sleep 0.2
done
"""


def test_checkpoints_are_uploaded_as_written_and_restored_on_another_node():
    with cluster(agents=2, gpus=1, node_timeout="3s", name="ckptup") as c:
        out = os.path.join(c.dir, "resumed")
        j = c.submit(["sh", "-c", TRAINER % {"out": out}], gpus=1, checkpointing=True,
                     grace_ms=1000)["id"]
        wait_for(lambda: two_running(c, j), what="running")
        wait_for(lambda: len(c.job(j)["attempts"][0].get("checkpoints") or []) >= 2,
                 timeout=30, what="two checkpoints uploaded")
        first = c.job(j)["attempts"][0]
        cks = first["checkpoints"]
        assert all(k["key"] == "ckpt/%d/%s" % (j, k["name"]) for k in cks), cks
        assert cks[-1]["bytes"] > 1048576 and cks[-1]["files"] == 2, cks
        # incremental: the unchanged 1 MiB file went once
        assert cks[-1]["sent_bytes"] < 4096, cks
        show = c.cli("show", str(j), check=True).stdout
        assert "checkpoint %s: 1.0 MiB in 2 file(s)" % cks[-1]["name"] in show, show
        node = node_of(c, j)
        c.kill_agent(agent_index(node))
        wait_for(lambda: two_running(c, j, attempts=2), timeout=30, what="second attempt")
        wait_for(lambda: os.path.exists(out) and len(open(out).read().splitlines()) == 2,
                 what="the second attempt's start")
        lines = open(out).read().splitlines()
        assert lines[0].startswith("attempt 1 on %s resumed from step 0" % node), lines
        resumed = int(lines[1].rsplit(" ", 1)[1])
        uploaded = max(int(k["name"].split("-")[1]) for k in c.job(j)["attempts"][0]["checkpoints"])
        assert node_of(c, j) != node and lines[1].startswith("attempt 2 on "), lines
        assert resumed >= uploaded >= 2, (resumed, uploaded, lines)
        err = open(os.path.join(c.work_dir(agent_index(node_of(c, j))), "logs",
                                "%d-0.err" % c.job(j)["attempts"][1]["id"])).read()
        assert "restored into" in err, err
        c.cli("cancel", str(j), check=True)


def test_a_hung_rank_has_its_stacks_kept_and_is_requeued():
    with cluster(agents=1, gpus=1, name="hang") as c:
        # prints once, then sits in a sleep: no output, no heartbeat, idle GPU
        r = c.cli("run", "--gpus", "1", "--requeue", "--hang-timeout", "3s", "--json", "--",
                  "sh", "-c", "env | grep -E 'NCCL|COLLECTIVE'; exec sleep 600", check=True)
        j = json.loads(r.stdout)["job"]["id"]
        wait_for(lambda: len(c.job(j)["attempts"]) >= 2, timeout=30, what="requeued after its hang")
        first = c.job(j)["attempts"][0]
        assert first["state"] == "failed", first
        assert "made no progress for 3s (hung; restart 1 of 3)" in first["end_reason"], first
        log = os.path.join(c.work_dir(0), "logs", "%d-0" % first["id"])
        out = open(log + ".log").read()
        assert "TORCH_NCCL_ASYNC_ERROR_HANDLING=1" in out and "ANVIL_COLLECTIVE_TIMEOUT_S=2" in out, out
        err = open(log + ".err").read()
        assert "declared hung; the stacks of its" in err, err
        assert "--- pid " in err and "(sleep), waiting in" in err, err
        events = c.api("GET", "/v1/events?job=%d" % j)["events"]
        assert any(e["kind"] == "job.hung" for e in events), events
        c.cli("cancel", str(j), check=True)


def test_a_heartbeat_keeps_a_quiet_rank_alive_and_a_hang_without_requeue_fails():
    with cluster(agents=1, gpus=1, name="beat") as c:
        beat = c.submit(["sh", "-c", "for i in $(seq 12); do touch $ANVIL_HEARTBEAT_FILE; "
                         "sleep 0.5; done"], gpus=1, hang_timeout_ms=2000)["id"]
        done = c.wait_job(beat, timeout=30)
        assert done["state"] == "succeeded" and len(done["attempts"]) == 1, done
        hung = c.submit(["sleep", "600"], gpus=1, hang_timeout_ms=2000)["id"]
        done = c.wait_job(hung, timeout=30)
        assert done["state"] == "failed" and done["exit_code"] == 124, done
        assert "made no progress for 2s: hung (its stacks are in its stderr" in done["reason"], done


run_tests([test_checkpoints_are_uploaded_as_written_and_restored_on_another_node,
           test_a_hung_rank_has_its_stacks_kept_and_is_requeued,
           test_a_heartbeat_keeps_a_quiet_rank_alive_and_a_hang_without_requeue_fails,
           test_a_lost_node_requeues_a_checkpointing_gang_elsewhere_without_overlap,
           test_a_stopped_agents_ranks_stop_themselves_before_the_replacement_starts,
           test_max_restarts_exhausted_ends_lost_with_the_reason_and_75,
           test_no_requeue_keeps_a_checkpointing_job_lost])
