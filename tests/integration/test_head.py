"""Head and workers (docs/cli.md): `anvil run --head CMD --worker CMD` starts
a real Dask cluster (Debian's python3-distributed) across two nodes, runs the
job's command against it on rank 0, and stops it with the command; a head
that dies, a worker that dies, a command that fails and a head that never
answers each fail the job with a reason that names the culprit, and nothing
is left running."""
import os
import subprocess
import sys
import time

from harness import cluster, run_tests, wait_for

PY = sys.executable  # Debian's python3, which has distributed

# The job's command: a Dask client that needs one worker on each node.
CLIENT = r'''
import os, socket, sys
from distributed import Client

def node(i=None):
    import os
    return os.environ.get("ANVIL_NODE"), i

addr = os.environ["ANVIL_HEAD_ADDR"]
assert addr.endswith(":" + os.environ["ANVIL_HEAD_PORT"]), addr
with Client(addr, timeout=60) as c:
    c.wait_for_workers(2, timeout=90)
    workers = sorted(c.scheduler_info()["workers"])
    ran = c.run(node)  # every worker, by address
    # One task pinned to each worker, squares summed.
    futs = [c.submit(lambda i: (node(i), i * i), i, workers=[w], allow_other_workers=False,
                     pure=False) for i, w in enumerate(workers)]
    got = c.gather(futs)
    nodes = sorted({n for (n, _), _ in got})
    print("dask nodes: %s" % " ".join(nodes))
    print("dask run nodes: %s" % " ".join(sorted(n for n, _ in ran.values())))
    print("dask sum: %d" % sum(sq for _, sq in got))
    if os.environ.get("SHUTDOWN"):  # the scheduler and workers exit before the command
        c.shutdown()
'''

# A head that listens on ANVIL_HEAD_PORT for ARGV[1] seconds, then exits
# with status ARGV[2].
LISTENER = r'''
import os, socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("", int(os.environ["ANVIL_HEAD_PORT"])))
s.listen(16)
time.sleep(float(sys.argv[1]))
sys.exit(int(sys.argv[2]))
'''


def job_dir(c):
    """A directory whose path marks the job's processes (pgrep -f), and the
    job's working directory."""
    d = os.path.join(c.dir, "headjob")
    os.makedirs(d, exist_ok=True)
    for name, text in (("client.py", CLIENT), ("listener.py", LISTENER)):
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    return d


def left_behind(d):
    p = subprocess.run(["pgrep", "-af", d], capture_output=True, text=True)
    return [l for l in p.stdout.splitlines() if "pgrep" not in l]


def assert_nothing_left(d):
    wait_for(lambda: not left_behind(d), timeout=10, what="no process of the job left")


def test_dask_cluster_across_two_nodes():
    with cluster(agents=2, gpus=1, name="head-dask") as c:
        d = job_dir(c)
        head = ("%s -m distributed.cli.dask_scheduler --port $ANVIL_HEAD_PORT --no-dashboard "
                "--no-show --scheduler-file %s/scheduler-$ANVIL_ATTEMPT_ID.json" % (PY, d))
        worker = ("%s -m distributed.cli.dask_worker $ANVIL_HEAD_ADDR --nthreads 1 "
                  "--no-dashboard --no-nanny --local-directory %s/w-$ANVIL_NODE" % (PY, d))
        p = c.cli("run", "--wait", "--nodes", "2", "--cwd", d, "--head", head, "--worker",
                  worker, "--", PY, os.path.join(d, "client.py"), timeout=240)
        assert p.returncode == 0, (p.returncode, p.stdout, p.stderr[-3000:])
        # Both workers, each on its own node, ran a task of the command.
        assert "0: dask nodes: node-1 node-2" in p.stdout, p.stdout
        assert "0: dask run nodes: node-1 node-2" in p.stdout, p.stdout
        assert "0: dask sum: 1" in p.stdout, p.stdout
        job = c.job(1)
        assert job["state"] == "succeeded" and job["exit_code"] == 0, job
        assert job["head"] == head and job["worker"] == worker, job
        assert job["reason"].startswith("the command exited 0 on rank 0"), job["reason"]
        a = job["attempts"][0]
        assert a["head_addr"] == "%s:%d" % (a["master_addr"], int(a["head_addr"].split(":")[1]))
        # The workers were stopped with the command, which does not fail the job.
        assert all(r["state"] == "exited" for r in a["ranks"]), a
        assert_nothing_left(d)
        show = c.cli("show", "1", check=True).stdout
        assert "head       " + head.split()[0] in show, show
        assert ", head " + a["head_addr"] in show, show
        # The command shuts the cluster down itself: the head's and the
        # workers' exits before the command's are not failures.
        p = c.cli("run", "--wait", "--nodes", "2", "--cwd", d, "--env", "SHUTDOWN=1",
                  "--head", head, "--worker", worker, "--", PY, os.path.join(d, "client.py"),
                  timeout=240)
        assert p.returncode == 0, (p.returncode, p.stdout, p.stderr[-3000:])
        assert "0: dask nodes: node-1 node-2" in p.stdout, p.stdout
        assert c.job(2)["state"] == "succeeded", c.job(2)
        assert_nothing_left(d)


def test_head_killed_fails_the_job_naming_it():
    with cluster(agents=2, gpus=1, name="head-dies") as c:
        d = job_dir(c)
        ran = os.path.join(d, "command-ran")
        job = c.submit(["sh", "-c", "touch %s; exec sleep 120" % ran], nodes=2, cwd=d,
                       head="exec %s %s/listener.py 120 0" % (PY, d), worker="sleep 120")
        wait_for(lambda: os.path.exists(ran), timeout=60, what="the command running")
        # The head itself, not the launcher whose arguments name it too.
        pattern = "^%s %s/listener.py" % (PY, d)
        pid = subprocess.run(["pgrep", "-f", pattern], capture_output=True,
                             text=True).stdout.split()
        assert len(pid) == 1, pid
        os.kill(int(pid[0]), 9)
        done = c.wait_job(job["id"], timeout=30)
        assert done["state"] == "failed", done
        assert done["exit_code"] == 137, done
        assert "the head was killed by signal 9" in done["reason"], done["reason"]
        assert "before the command ended" in done["reason"], done["reason"]
        assert done["reason"].startswith("rank 0 on node-"), done["reason"]
        assert_nothing_left(d)


def test_worker_exit_fails_the_job_naming_its_rank():
    with cluster(agents=2, gpus=1, name="head-worker") as c:
        d = job_dir(c)
        job = c.submit(["sleep", "120"], nodes=2, cwd=d,
                       head="exec %s %s/listener.py 120 0" % (PY, d),
                       worker="if [ $NODE_RANK = 1 ]; then sleep 1; exit 4; fi; sleep 120")
        done = c.wait_job(job["id"], timeout=60)
        assert done["state"] == "failed", done
        assert done["exit_code"] == 4, done
        assert done["reason"].startswith("rank 1 on node-"), done["reason"]
        assert "the worker exited with status 4 before the command ended" in done["reason"], \
            done["reason"]
        assert_nothing_left(d)


def test_command_failure_is_the_jobs_status():
    with cluster(agents=2, gpus=1, name="head-cmd") as c:
        d = job_dir(c)
        p = c.cli("run", "--wait", "--nodes", "2", "--cwd", d,
                  "--head", "exec %s %s/listener.py 120 0" % (PY, d), "--worker", "sleep 120",
                  "--", "sh", "-c", "echo command ran; exit 7", timeout=60)
        assert p.returncode == 7, (p.returncode, p.stdout, p.stderr)
        assert "0: command ran" in p.stdout, p.stdout
        job = c.job(1)
        assert job["state"] == "failed" and job["exit_code"] == 7, job
        assert "rank 0 on node-" in job["reason"], job["reason"]
        assert "the command exited with status 7" in job["reason"], job["reason"]
        assert "the command exited with status 7" in p.stderr, p.stderr
        assert_nothing_left(d)


def test_head_that_never_answers_times_out():
    with cluster(agents=2, gpus=1, name="head-silent") as c:
        d = job_dir(c)
        start = time.time()
        job = c.submit(["sh", "-c", "echo the command must not run"], nodes=2, cwd=d,
                       head="exec %s -c 'import time; time.sleep(120)' %s" % (PY, d), worker="sleep 120",
                       head_timeout_ms=2000)
        done = c.wait_job(job["id"], timeout=60)
        assert time.time() - start < 40
        assert done["state"] == "failed", done
        assert done["exit_code"] == 124, done
        addr = done["attempts"][0]["head_addr"]
        assert "the head did not answer at %s within 2 s" % addr in done["reason"], done
        out = c.cli("logs", str(job["id"]), check=True).stdout
        assert "the command must not run" not in out, out
        assert_nothing_left(d)


def test_worker_and_timeout_need_a_head():
    with cluster(agents=1, gpus=1, name="head-bad") as c:
        p = c.cli("run", "--worker", "sleep 1", "--", "true")
        assert p.returncode == 1, (p.returncode, p.stderr)
        assert "field 'worker': only with field 'head'" in p.stderr, p.stderr
        p = c.cli("run", "--head-timeout", "10s", "--", "true")
        assert p.returncode == 1 and "field 'head_timeout_ms'" in p.stderr, p.stderr
        p = c.cli("run", "--head", "", "--", "true")
        assert p.returncode == 1 and "field 'head'" in p.stderr, p.stderr


if __name__ == "__main__":
    run_tests([test_dask_cluster_across_two_nodes, test_head_killed_fails_the_job_naming_it,
               test_worker_exit_fails_the_job_naming_its_rank,
               test_command_failure_is_the_jobs_status, test_head_that_never_answers_times_out,
               test_worker_and_timeout_need_a_head])
