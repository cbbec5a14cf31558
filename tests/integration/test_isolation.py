"""What a rank can reach (docs/security.md): it runs as the agents' rank
account, not root; in a PID namespace of its own (it sees and signals only
its own processes); with a /tmp of its own; and with the agent's work
directory covered, so that none of the cluster's credentials, the state
database or another job's files and processes are within its reach. anvil
exec enters the same fence; a queue an admin marks run_as_root runs its
ranks as root."""
import hashlib
import io
import json
import os
import pwd
import tarfile
import tempfile

from harness import cluster, run_tests, wait_for

PY = "/usr/bin/python3"

# The attacker's probes, as a rank would run them; argv: a JSON object of
# the paths and pids to try. Prints one JSON object.
PROBE = r"""
import json, os, signal, sys
t = json.loads(sys.argv[1])
out = {"uid": os.getuid(), "euid": os.geteuid(), "reads": {}, "kills": {}}
for name, path in t["paths"].items():
    try:
        with open(path, "rb") as f:
            f.read(1)
        out["reads"][name] = "read"
    except OSError as e:
        out["reads"][name] = type(e).__name__
for pid in t["pids"]:
    try:
        os.kill(pid, signal.SIGKILL)
        out["kills"][str(pid)] = "killed"
    except OSError as e:
        out["kills"][str(pid)] = type(e).__name__
out["procs"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
out["cmdlines"] = [open("/proc/%s/cmdline" % p, "rb").read().decode(errors="replace")
                   for p in os.listdir("/proc") if p.isdigit()]
out["tmp"] = sorted(os.listdir("/tmp"))
out["home"] = os.environ.get("HOME")
print(json.dumps(out))
"""


def output_of(c, jid):
    j = c.wait_job(jid)
    assert j["state"] == "succeeded", (j, c.cli("logs", str(jid)).stdout)
    return json.loads(c.cli("logs", str(jid), check=True).stdout.strip().splitlines()[-1])


def test_a_rank_reaches_no_secret_and_no_other_job():
    with cluster(agents=1, gpus=2, name="fence") as c:
        victim = c.submit(["sh", "-c", "echo hidden > /tmp/victim-secret; "
                           "echo $HF_TOKEN > $ANVIL_OUTPUT_DIR/token; exec sleep 300"],
                          gpus=1, env={"HF_TOKEN": "hf-victim-secret"})
        vpid = c.rank_pid(victim["id"])
        wait_for(lambda: c.job(victim["id"])["state"] == "running", what="victim running")
        work = os.path.join(c.dir, "node-1")
        vout = c.job(victim["id"])["attempts"][-1]["id"]
        paths = {
            "admin.token": os.path.join(c.state_dir, "admin.token"),
            "join.token": os.path.join(c.state_dir, "join.token"),
            "anvil.db": os.path.join(c.state_dir, "anvil.db"),
            "client.json": os.path.join(c.home, "client.json"),
            "node.json": os.path.join(work, "node.json"),
            "victim's output": os.path.join(work, "output", str(vout), "token"),
            "victim's environ": "/proc/%d/environ" % vpid,
            "victim's log": os.path.join(work, "logs", "%d-0.log" % vout),
        }
        for name, path in paths.items():  # each is there, and root reads it
            if not name.startswith("victim's") or "output" in name:
                wait_for(lambda: os.path.exists(path), what=name)
        probe = c.submit([PY, "-c", PROBE, json.dumps({"paths": paths, "pids": [vpid]})],
                         gpus=1)
        out = output_of(c, probe["id"])
        account = pwd.getpwnam("anvil-job")
        assert out["uid"] == out["euid"] == account.pw_uid != 0, out
        assert all(v != "read" for v in out["reads"].values()), out["reads"]
        assert out["kills"] == {str(vpid): "ProcessLookupError"}, out["kills"]
        # it sees its own processes only: its shim (pid 1) and itself
        assert out["procs"] == [1, 2], out
        assert not any("sleep" in cl or "hf-victim" in cl for cl in out["cmdlines"]), out
        assert "victim-secret" not in out["tmp"], out["tmp"]
        assert out["home"] == "/tmp", out
        # the victim ran on, untouched
        assert c.job(victim["id"])["state"] == "running"
        assert os.path.exists("/proc/%d" % vpid)
        c.cli("cancel", str(victim["id"]), check=True)


def test_the_join_token_on_the_agents_command_line_is_not_seen():
    """The harness starts agents with --join-token on their command line;
    a rank's first process (its shim) is a copy of the agent."""
    with cluster(agents=1, gpus=1, name="fence-argv") as c:
        j = c.submit(["sh", "-c", "tr '\\0' ' ' < /proc/1/cmdline"], gpus=1)
        assert c.wait_job(j["id"])["state"] == "succeeded"
        line = c.cli("logs", str(j["id"]), check=True).stdout
        assert "--join-token" in line and c.join_token not in line, line


def test_exec_enters_the_ranks_fence():
    with cluster(agents=1, gpus=1, name="fence-exec") as c:
        j = c.submit(["sh", "-c", "echo mine > /tmp/rank-file; exec sleep 300"], gpus=1)
        c.wait_job(j["id"], states=("running",))
        p = c.cli("exec", str(j["id"]), "--", "sh", "-c",
                  "id -u; cat /tmp/rank-file; "
                  "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done")
        assert p.returncode == 0, p
        lines = p.stdout.splitlines()
        assert int(lines[0]) == pwd.getpwnam("anvil-job").pw_uid, p.stdout
        assert lines[1] == "mine", p.stdout
        # the rank's processes (its shim, sleep) and the exec's, no other
        procs = [x for x in lines[2:] if x.strip()]
        assert any(x.startswith("sleep 300") for x in procs), procs
        assert len(procs) <= 5, procs
        c.cli("cancel", str(j["id"]), check=True)


def test_a_queue_an_admin_marks_run_as_root_runs_ranks_as_root():
    with cluster(agents=1, gpus=1, name="fence-root") as c:
        c.cli("queue", "set", "maint", "--run-as-root", "yes", check=True)
        q = [x for x in c.api("GET", "/v1/queues")["queues"] if x["name"] == "maint"][0]
        assert q["run_as_root"] is True, q
        root = c.submit(["id", "-u"], gpus=1, queue="maint")
        assert c.wait_job(root["id"])["state"] == "succeeded"
        assert c.cli("logs", str(root["id"]), check=True).stdout.strip() == "0"
        plain = c.submit(["id", "-u"], gpus=1)
        assert c.wait_job(plain["id"])["state"] == "succeeded"
        assert c.cli("logs", str(plain["id"]), check=True).stdout.strip() != "0"
        p = c.cli("queue", "set", "maint", "--run-as-root", "maybe")
        assert p.returncode == 2 and "--run-as-root" in p.stderr, p


def test_a_working_directory_the_account_cannot_reach_fails_saying_why():
    with cluster(agents=1, gpus=1, name="fence-cwd") as c:
        closed = os.path.join(c.dir, "closed")
        os.makedirs(closed)
        os.chmod(closed, 0o700)
        p = c.cli("run", "--gpus", "1", "--wait", "--", "true", cwd=closed)
        j = c.job(c.api("GET", "/v1/jobs")["jobs"][-1]["id"])
        assert j["state"] == "failed", j
        assert "closed to the account ranks run as (anvil-job" in j["reason"], j["reason"]
        assert p.returncode != 0


def test_a_node_whose_work_directory_is_under_tmp_runs_tasks_in_their_code():
    """The work directory under /tmp (which each rank has of its own): a task whose code
    is unpacked already runs directly in it, bound into its view."""
    class under_tmp(cluster):  # this cluster's directories, agents' work dirs included
        def __enter__(self):
            tempfile.tempdir = "/tmp"
            try:
                return super().__enter__()
            finally:
                tempfile.tempdir = "/var/tmp/anvil-tests"

    with under_tmp(agents=1, gpus=1, name="fence-tmp") as c:
        assert c.dir.startswith("/tmp/"), c.dir
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
            data = b"the code\n"
            info = tarfile.TarInfo("code.txt")
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        body = buf.getvalue()
        key = "sha256/" + hashlib.sha256(body).hexdigest()
        c.api("PUT", "/v1/objects/" + key, raw=body)
        wf = {"workflow": {"name": "w", "tasks": [{"name": "t", "command": ["cat", "code.txt"]}]},
              "bundle": key, "no_cache": True}
        for n in (1, 2):  # the second runs directly in the unpacked code
            c.api("POST", "/v1/workflows", wf)
            x = wait_for(lambda: (lambda w: w if w["state"] not in ("running", "pending")
                                  else None)(c.api("GET", "/v1/workflows/%d" % n)["workflow"]),
                         timeout=60, what="workflow %d" % n)
            assert x["state"] == "succeeded", x


run_tests([test_a_rank_reaches_no_secret_and_no_other_job,
           test_the_join_token_on_the_agents_command_line_is_not_seen,
           test_exec_enters_the_ranks_fence,
           test_a_queue_an_admin_marks_run_as_root_runs_ranks_as_root,
           test_a_working_directory_the_account_cannot_reach_fails_saying_why,
           test_a_node_whose_work_directory_is_under_tmp_runs_tasks_in_their_code])
