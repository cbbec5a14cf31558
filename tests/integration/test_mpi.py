"""MPI without SSH (docs/cli.md, "MPI"): `anvil run --mpi` runs a real Open
MPI program (Debian's openmpi-bin and python3-mpi4py) across two agents:
mpirun on rank 0, its daemons started in the other rank through `anvil
_rsh`. An allreduce proves that both nodes took part, each process with its
own node's environment; a failing program fails the job with mpirun's
status; cancelling leaves no process behind; and the exec token the ranks
hold opens exec streams into their own attempt and nothing else."""
import json
import os
import sys
import time

from harness import ApiError, EXEC, EXIT, STDOUT, cluster, frame, read_frames, run_tests, \
    wait_for

PY = "/usr/bin/python3"  # Debian's, which has mpi4py

# argv[1]: "sum" (an allreduce; rank 0 prints what it learnt), "fail N" (MPI
# rank 1 exits N after a barrier, the others would go on for a minute), "sleep" (every process waits, rank 0 says
# when all are up).
PROG = r'''
import json, os, sys, time
from mpi4py import MPI
comm = MPI.COMM_WORLD
me = {"node": os.environ.get("ANVIL_NODE"), "node_rank": os.environ.get("NODE_RANK"),
      "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"), "job": os.environ.get("ANVIL_JOB_ID")}
mode = sys.argv[1]
if mode == "sum":
    total = comm.allreduce(1 + 10 * int(me["node_rank"]))
    everyone = comm.gather(me)
    if comm.rank == 0:
        print("MPI " + json.dumps({"size": comm.size, "total": total, "procs": everyone}),
              flush=True)
elif mode == "fail":  # dies without MPI_Finalize, as a crash does
    comm.Barrier()
    if comm.rank == 1:
        os._exit(int(sys.argv[2]))
    time.sleep(60)
elif mode == "later":  # up, then an allreduce once argv[2] exists
    comm.Barrier()
    if comm.rank == 0:
        print("all up", flush=True)
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.1)
    total = comm.allreduce(1)
    if comm.rank == 0:
        print("later sum %d" % total, flush=True)
elif mode == "sleep":
    comm.Barrier()
    if comm.rank == 0:
        print("all up", flush=True)
    time.sleep(300)
'''


def job_dir(c):
    d = os.path.join(c.dir, "mpijob")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "prog.py"), "w") as f:
        f.write(PROG)
    return d


def run_mpi(c, d, *args, nodes=2, gpus=2, wait=True):
    opts = ["run", "--mpi", "--nodes", str(nodes), "--gpus", str(gpus), "--cwd", d]
    if wait:
        opts.append("--wait")
    return c.cli(*(opts + ["--", PY, "prog.py"] + list(args)), timeout=120)


def job_procs(c):
    """Every process that carries a rank's environment of this cluster:
    mpirun, the Open MPI daemons (orted), the MPI processes, the agent's
    placeholders; not the daemons of anvil."""
    mark = ("ANVIL_OUTPUT_DIR=" + c.dir).encode()
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = f.read()
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open("/proc/%s/stat" % pid) as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if mark in env and not zombie:
            found.append("%s %s" % (pid, cmd[:160]))
    return found


def assert_nothing_left(c):
    wait_for(lambda: not job_procs(c), timeout=20, what="no process of the job left")


def test_allreduce_across_two_nodes():
    with cluster(agents=2, gpus=2, name="mpi-sum") as c:
        d = job_dir(c)
        p = run_mpi(c, d, "sum")
        assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
        line = [l for l in p.stdout.splitlines() if "MPI {" in l]
        assert line, p.stdout + p.stderr
        got = json.loads(line[0].split("MPI ", 1)[1])
        # 2 GPUs per node: 2 slots on each of 2 nodes, every process with its
        # own node's variables (they come from the rank the daemon runs in).
        assert got["size"] == 4, got
        assert got["total"] == 2 * 1 + 2 * 11, got
        nodes = sorted(x["node"] for x in got["procs"])
        assert nodes == ["node-1", "node-1", "node-2", "node-2"], got
        for x in got["procs"]:
            assert x["cuda"] == "0,1", got
        job = c.job(1)
        assert job["state"] == "succeeded", job
        assert job["exit_code"] == 0, job
        assert job["mpi"] is True, job
        assert job["reason"] == "mpirun exited 0 on rank 0; the other ranks were stopped", job
        # The mpirun line is in rank 0's log; the hostfile in its output dir.
        assert "0: anvil: mpirun --hostfile " in p.stderr, p.stderr
        assert "--mca plm_rsh_agent '" in p.stderr and " _rsh'" in p.stderr, p.stderr
        att = job["attempts"][-1]
        r0 = att["ranks"][0]["node"]
        hostfile = os.path.join(c.dir, r0, "output", str(att["id"]), "mpi-hostfile")
        with open(hostfile) as f:
            lines = f.read().splitlines()
        assert lines == ["%s slots=2" % r["node"] for r in att["ranks"]], lines
        assert_nothing_left(c)


def test_failing_program_fails_the_job_with_mpiruns_status():
    with cluster(agents=2, gpus=1, name="mpi-fail") as c:
        d = job_dir(c)
        p = run_mpi(c, d, "fail", "3", gpus=1)
        assert p.returncode == 3, (p.returncode, p.stdout, p.stderr)
        job = c.job(1)
        assert job["state"] == "failed", job
        assert job["exit_code"] == 3, job
        assert job["reason"].startswith("rank 0 on node-") and \
            job["reason"].endswith(": mpirun exited with status 3"), job
        assert_nothing_left(c)


def test_cancel_stops_mpirun_its_daemons_and_the_program():
    with cluster(agents=2, gpus=1, name="mpi-cancel") as c:
        d = job_dir(c)
        p = run_mpi(c, d, "sleep", gpus=1, wait=False)
        assert p.returncode == 0, p.stderr
        wait_for(lambda: "all up" in c.cli("logs", "1").stdout, timeout=60, what="all up")
        procs = job_procs(c)
        for what in ("mpirun ", "orted ", "prog.py sleep"):
            assert any(what in x for x in procs), (what, procs)
        c.cli("cancel", "1", check=True)
        job = c.wait_job(1)
        assert job["state"] == "cancelled", job
        assert_nothing_left(c)


def test_a_server_restart_does_not_stop_a_running_mpi_job():
    """The daemons outlive the exec streams that started them: the job goes
    on while the server is away, and its end is reported after."""
    with cluster(agents=2, gpus=1, name="mpi-restart") as c:
        d = job_dir(c)
        go = os.path.join(d, "go")
        run_mpi(c, d, "later", go, gpus=1, wait=False)
        wait_for(lambda: "all up" in c.cli("logs", "1").stdout, timeout=60, what="all up")
        c.kill_server()
        time.sleep(1)
        open(go, "w").close()
        c.start_server()
        job = c.wait_job(1, timeout=60)
        assert job["state"] == "succeeded", job
        assert "later sum 2" in c.cli("logs", "1").stdout
        assert_nothing_left(c)


def exec_stream(c, jid, rank, token, command):
    """An exec stream opened with token: (HTTP status, stdout, exit status)."""
    status, sock, rest = c.stream("/v1/jobs/%d/exec?rank=%d" % (jid, rank), token=token)
    if status != 101:
        return status, rest, None
    req = json.dumps({"command": command}).encode()
    sock.sendall(frame(EXEC, req))
    frames = read_frames(sock, rest)
    sock.close()
    out = b"".join(p for t, p in frames if t == STDOUT)
    code = [int.from_bytes(p, "big") for t, p in frames if t == EXIT]
    return status, out, code[0] if code else None


def test_exec_token_opens_exec_into_its_own_attempt_only():
    with cluster(agents=2, gpus=2, name="mpi-token") as c:
        d = job_dir(c)
        run_mpi(c, d, "sleep", gpus=1, wait=False)
        wait_for(lambda: "all up" in c.cli("logs", "1").stdout, timeout=60, what="all up")
        other = c.submit(["sleep", "300"], gpus=1)["id"]
        wait_for(lambda: c.job(other)["state"] == "running", what="job 2 running")
        env = c.cli("exec", "--rank", "1", "1", "--", "env", check=True).stdout
        variables = dict(l.split("=", 1) for l in env.splitlines() if "=" in l)
        token = variables["ANVIL_EXEC_TOKEN"]
        assert len(token) == 64, token
        assert variables["ANVIL_SERVER"] == c.url, variables
        assert "ANVIL_TOKEN" not in variables and c.token not in env
        # Never shown: not by the API, not by anvil show.
        assert token not in json.dumps(c.api("GET", "/v1/jobs/1"))
        assert token not in c.cli("show", "1").stdout
        assert token not in c.cli("show", "--json", "1").stdout
        # It opens exec streams into the ranks of its attempt.
        for rank in (0, 1):
            status, out, code = exec_stream(c, 1, rank, token, ["printenv", "ANVIL_JOB_ID"])
            assert (status, out, code) == (101, b"1\n", 0), (status, out, code)
        p = c.cli("exec", "--rank", "1", "1", "--", "printenv", "NODE_RANK",
                  env={"ANVIL_TOKEN": token, "ANVIL_SERVER": c.url})
        assert (p.returncode, p.stdout) == (0, "1\n"), (p.returncode, p.stdout, p.stderr)
        # Nothing else: another job's exec, attach, reads, submit, cancel.
        status, body, _ = exec_stream(c, other, 0, token, ["true"])
        assert status == 401, (status, body)
        status, _, _ = c.stream("/v1/jobs/1/attach", token=token)
        assert status == 401, status
        for method, path, body in (("GET", "/v1/jobs", None), ("GET", "/v1/jobs/1", None),
                                   ("POST", "/v1/jobs", {"command": ["true"]}),
                                   ("POST", "/v1/jobs/1/cancel", None),
                                   ("POST", "/v1/jobs/%d/cancel" % other, None),
                                   ("GET", "/v1/nodes", None), ("GET", "/v1/jobs/1/logs", None)):
            try:
                c.api(method, path, body, token=token)
                raise AssertionError("%s %s took the exec token" % (method, path))
            except ApiError as e:
                assert e.status == 401, (method, path, e)
        assert c.job(1)["state"] == "running" and c.job(other)["state"] == "running"
        assert len(c.api("GET", "/v1/jobs")["jobs"]) == 2  # nothing was submitted
        # A wrong token of the right length opens nothing either.
        status, _, _ = exec_stream(c, 1, 0, "0" * 64, ["true"])
        assert status == 401, status
        c.cli("cancel", "1", str(other), check=True)
        c.wait_job(1)
        status, _, _ = exec_stream(c, 1, 0, token, ["true"])
        assert status != 101, status  # its attempt is over
        assert_nothing_left(c)


def test_mpi_with_a_head_or_a_session_is_refused():
    with cluster(agents=1, gpus=1, name="mpi-refused") as c:
        for extra, other in (({"head": "sleep 9"}, "head"), ({"session": True}, "session")):
            try:
                c.submit(["true"], mpi=True, **extra)
                raise AssertionError("accepted mpi with " + other)
            except ApiError as e:
                assert e.status == 400 and other in json.dumps(e.body), e


if __name__ == "__main__":
    run_tests([test_allreduce_across_two_nodes, test_failing_program_fails_the_job_with_mpiruns_status,
               test_cancel_stops_mpirun_its_daemons_and_the_program,
               test_a_server_restart_does_not_stop_a_running_mpi_job,
               test_exec_token_opens_exec_into_its_own_attempt_only,
               test_mpi_with_a_head_or_a_session_is_refused])
