"""Failures of the control plane and of agents: a server killed with SIGKILL
and restarted loses nothing; an agent killed and restarted re-adopts its
ranks; an agent silent past the node timeout has its node and jobs marked
lost, and when it comes back its stale ranks are stopped (with rank leases
off; by default they stop themselves, test_recovery.py)."""
import os
import time

from harness import cluster, run_tests, wait_for


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def read_pid(path):
    wait_for(lambda: os.path.exists(path) and open(path).read().strip(), what=path)
    return int(open(path).read().strip())


def test_server_sigkill_and_restart_loses_nothing():
    with cluster(agents=2, gpus=2, name="srvkill") as c:
        a = c.submit(["sh", "-c", "sleep 3; exit 7"], gpus=2)
        b = c.submit(["sh", "-c", "sleep 3"], gpus=2)
        wait_for(lambda: all(c.job(j["id"])["state"] == "running" for j in (a, b)),
                 what="both running")
        queued = c.submit(["sh", "-c", "exit 4"], gpus=2)  # waits: every GPU is busy
        assert c.job(queued["id"])["state"] == "pending"
        c.kill_server()
        time.sleep(1.0)
        c.start_server()  # same state dir, same port
        ja = c.wait_job(a["id"], timeout=30)
        jb = c.wait_job(b["id"], timeout=30)
        jq = c.wait_job(queued["id"], timeout=30)
        assert ja["state"] == "failed" and ja["exit_code"] == 7, ja
        assert jb["state"] == "succeeded" and jb["exit_code"] == 0, jb
        assert jq["state"] == "failed" and jq["exit_code"] == 4, jq
        assert len(ja["attempts"]) == 1, "the job must not have been restarted"
        c.wait_ready(2)


def test_agent_sigkill_and_restart_readopts_ranks():
    with cluster(agents=1, gpus=2, name="agentkill") as c:
        marker = os.path.join(c.dir, "pid")
        j = c.submit(["sh", "-c", "echo $$ > %s; sleep 3; exit 5" % marker], gpus=1)
        read_pid(marker)
        wait_for(lambda: c.job(j["id"])["state"] == "running", what="running")
        pid = c.rank_pid(j["id"])  # the node's: the rank has a PID namespace of its own
        c.kill_agent(0)
        assert pid_alive(pid), "a rank must survive its agent's death"
        time.sleep(0.5)
        c.start_agent(0)
        done = c.wait_job(j["id"], timeout=30)
        assert done["state"] == "failed" and done["exit_code"] == 5, done
        assert [n["state"] for n in c.nodes()] == ["ready"]


def test_silent_agent_marks_node_and_job_lost_then_stops_stale_ranks():
    # Without rank leases (by default a rank stops itself: test_recovery.py)
    # the stale rank runs on until its agent is back, which stops it.
    with cluster(agents=1, gpus=2, node_timeout="2s", name="lost",
                 server_args=["--rank-lease", "off"]) as c:
        marker = os.path.join(c.dir, "pid")
        j = c.submit(["sh", "-c", "echo $$ > %s; exec sleep 120" % marker], gpus=1)
        read_pid(marker)
        pid = c.rank_pid(j["id"])  # the node's: the rank has a PID namespace of its own
        c.kill_agent(0)
        done = c.wait_job(j["id"], timeout=20)
        assert done["state"] == "lost", done
        assert [n["state"] for n in c.nodes()] == ["lost"]
        assert pid_alive(pid)
        c.start_agent(0)
        wait_for(lambda: not pid_alive(pid), timeout=20, what="stale rank stopped")
        c.wait_ready(1)
        again = c.submit(["true"], gpus=2)
        assert c.wait_job(again["id"])["state"] == "succeeded"
        assert c.job(j["id"])["state"] == "lost"


run_tests([test_server_sigkill_and_restart_loses_nothing,
           test_agent_sigkill_and_restart_readopts_ranks,
           test_silent_agent_marks_node_and_job_lost_then_stops_stale_ranks])
