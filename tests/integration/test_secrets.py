"""Credentials stay with their daemon (docs/operations.md, "Files that
hold credentials"): with a permissive umask (000) every file that holds a
credential or the cluster's state is its daemon's alone (the state
directory 0700; anvil.db, its -wal and -shm, admin.token and join.token
0600; the object store and the upload spool 0700; client.json 0600 in an
ANVIL_HOME made 0700; the agent's node.json and rank journal 0600);
files an older version left looser are tightened at start, said once in
the log; and no token of the cluster (the admin token, the join token, a
node's secret) reaches a job's environment, even with --export ALL, nor
any process's command line a rank can read. The attempt's exec token,
which a workflow task's rank gets, is its own."""
import glob
import json
import os
import signal
import stat
import subprocess

from harness import ANVIL, Cluster, cluster, run_tests, scratch_dir, wait_for

WF = """
name: envtask
tasks:
  show:
    command: [env]
"""


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def modes(paths):
    """{path: "0NNN"} for the paths that exist (so a failure shows them all)."""
    return {p: "0%03o" % mode(p) for p in paths if os.path.exists(p)}


def whole_log(c, name):
    with open(os.path.join(c.logs, name), errors="replace") as f:
        return f.read()


def start_up(home):
    """`anvil up` with umask 000, as a user whose umask lets everyone read
    what they make; its stdout once it says it is ready."""
    old = os.umask(0)
    try:
        p = subprocess.Popen([ANVIL, "up", "--port", "0", "--agents", "1",
                              "--gpus-per-agent", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=dict(os.environ, ANVIL_HOME=home), start_new_session=True)
    finally:
        os.umask(old)
    lines = []
    while True:
        line = p.stdout.readline()
        lines.append(line)
        if "anvil up: ready" in line:
            return p
        if not line:
            p.kill()
            raise AssertionError("anvil up did not get ready:\n" + "".join(lines))


def test_secret_files_are_the_daemons_only_whatever_the_umask():
    home = os.path.join(scratch_dir("anvil-secrets-"), "home")  # up makes it
    up = start_up(home)
    try:
        env = dict(os.environ, ANVIL_HOME=home)
        env.pop("ANVIL_TOKEN", None)
        env.pop("ANVIL_SERVER", None)
        code = scratch_dir("anvil-secrets-code-")
        with open(os.path.join(code, "wf.yaml"), "w") as f:
            f.write(WF)
        # a job (journal lines) and a workflow with a bundle (an upload, an object)
        for argv in (["run", "--wait", "--", "true"],
                     ["wf", "run", "--code", code, "--wait", os.path.join(code, "wf.yaml")]):
            p = subprocess.run([ANVIL] + argv, capture_output=True, text=True, env=env,
                               timeout=90)
            assert p.returncode == 0, (argv, p.stdout, p.stderr)
        state = os.path.join(home, "up", "server")
        node = os.path.join(home, "up", "node-1")
        journal = glob.glob(os.path.join(node, "ranks-*.jsonl"))
        assert journal, os.listdir(node)
        want = {home: "0700", os.path.join(home, "client.json"): "0600",
                state: "0700",
                os.path.join(state, "objects"): "0700",
                os.path.join(state, "uploads"): "0700",
                os.path.join(node, "node.json"): "0600"}
        for name in ("anvil.db", "anvil.db-wal", "anvil.db-shm", "admin.token", "join.token"):
            want[os.path.join(state, name)] = "0600"
        for j in journal:
            want[j] = "0600"
        # -wal and -shm exist while the server has the database open
        assert modes(want) == want, json.dumps(modes(want), indent=1)
    finally:
        up.send_signal(signal.SIGINT)
        up.wait(30)


def agent_started(c, restarts):
    """Agent 0, restarted that many times, has read its identity: past the
    start that tightens its files."""
    wait_for(lambda: whole_log(c, "node-1.log").count("identity from file=") >= restarts,
             what="the agent's restart %d" % restarts)


def test_looser_modes_of_an_older_version_are_tightened_at_start():
    with cluster(agents=1, gpus=1, name="secrets-old") as c:
        c.submit(["true"], gpus=1)
        work = c.work_dir(0)
        c.node_secret(0)  # node.json is written a moment after the node is listed
        loose = {c.state_dir: 0o755}
        for name in ("anvil.db", "anvil.db-wal", "anvil.db-shm", "admin.token", "join.token"):
            loose[os.path.join(c.state_dir, name)] = 0o644
        loose[os.path.join(c.state_dir, "objects")] = 0o755
        loose[os.path.join(work, "node.json")] = 0o644
        for j in glob.glob(os.path.join(work, "ranks-*.jsonl")):
            loose[j] = 0o644
        # killed, so that the -wal and -shm stay, as a crash leaves them
        c.kill_agent(0)
        c.kill_server()
        for path, m in loose.items():
            os.chmod(path, m)
        c.start_server()
        c.start_agent(0)
        agent_started(c, 1)
        got = modes(loose)
        assert all(v in ("0600", "0700") for v in got.values()), json.dumps(got, indent=1)
        assert len(got) == len(loose), got
        log = whole_log(c, "server.log") + whole_log(c, "node-1.log")
        for path, m in loose.items():
            line = "tightened the mode of path=%s from=0%03o" % (path, m)
            assert log.count(line) == 1, (line, log)
        # once: a second start finds nothing to say
        c.kill_agent(0)
        c.kill_server()
        c.start_server()
        c.start_agent(0)
        agent_started(c, 2)
        log = whole_log(c, "server.log") + whole_log(c, "node-1.log")
        assert log.count("tightened the mode of") == len(loose), log


def start_agent_with_file(c, token_file, env):
    """Agent 0 again, with its join token in a file (as deployed) and env."""
    work = c.work_dir(0)
    c.agents[0] = c._spawn(["agent", "--no-config", "--server", c.url,
                            "--join-token-file", token_file, "--name", "node-1",
                            "--work-dir", work, "--gpus-file", os.path.join(work, "gpus.json"),
                            "--log-level", "debug"], "node-1.log", env)


def test_no_token_of_the_cluster_reaches_a_jobs_environment():
    c = Cluster(agents=1, gpus=1, name="secrets-env")
    try:
        secret = c.node_secret(0)
        tokens = {"admin": c.token, "join": c.join_token, "node secret": secret}
        # the agent with every token in its own environment, the join token
        # in its file: nothing of it may reach a rank
        c.kill_agent(0)
        start_agent_with_file(c, os.path.join(c.state_dir, "join.token"),
                              {"ANVIL_TOKEN": c.token, "ANVIL_JOIN_TOKEN": c.join_token,
                               "ANVIL_NODE_SECRET": secret})
        c.wait_ready(1)
        log = whole_log(c, "node-1.log")
        assert log.count("the join token is on the command line") == 1, log  # the first
        # the client has the admin token in its environment and sends all of it
        client = {"ANVIL_TOKEN": c.token, "ANVIL_SERVER": c.url}
        scan = ("env; echo ----; for f in /proc/[0-9]*/cmdline; do "
                "tr '\\0' ' ' < $f 2>/dev/null; echo; done")
        p = c.cli("run", "--export", "ALL", "--wait", "--", "sh", "-c", scan, env=client)
        assert p.returncode == 0, p.stderr
        assert "ANVIL_JOB_ID=" in p.stdout.split("----\n", 1)[0], p.stdout
        for name, t in tokens.items():
            assert t not in p.stdout, (name, p.stdout)
        # named, it is refused, saying why
        p = c.cli("run", "--export", "PATH,ANVIL_TOKEN", "--", "true", env=client)
        assert p.returncode != 0 and "ANVIL_TOKEN is never exported" in p.stderr, p.stderr
        # a rank's exec helper (anvil exec) has the rank's environment, no more
        job = c.submit(["sleep", "600"], gpus=1)
        c.wait_job(job["id"], states=("running",))
        p = c.cli("exec", str(job["id"]), "--", "env", env=client)
        assert p.returncode == 0 and "ANVIL_JOB_ID=%d" % job["id"] in p.stdout, p.stderr
        for name, t in tokens.items():
            assert t not in p.stdout, (name, p.stdout)
        c.api("POST", "/v1/jobs/%d/cancel" % job["id"])
        # a workflow task's rank gets its attempt's exec token: its own
        code = scratch_dir("anvil-secrets-code-")
        wf = os.path.join(code, "wf.yaml")
        with open(wf, "w") as f:
            f.write(WF)
        p = c.cli("wf", "run", "--code", code, "--wait", wf, env=client, timeout=90)
        assert p.returncode == 0, p.stdout + p.stderr
        p = c.cli("wf", "logs", "1", "show", env=client, check=True)
        exec_token = [x.split("=", 1)[1] for x in p.stdout.splitlines()
                      if x.startswith("ANVIL_EXEC_TOKEN=")]
        assert len(exec_token) == 1 and len(exec_token[0]) >= 32, p.stdout
        for name, t in tokens.items():
            assert t not in p.stdout, (name, p.stdout)
    except BaseException:
        c.dump_logs()
        raise
    finally:
        c.stop()


if __name__ == "__main__":
    run_tests([test_secret_files_are_the_daemons_only_whatever_the_umask,
               test_looser_modes_of_an_older_version_are_tightened_at_start,
               test_no_token_of_the_cluster_reaches_a_jobs_environment])
