"""The CLI end to end against real daemons: run --wait exit codes and
streamed output, jobs/show/logs/nodes with tables and --json, --help on
every verb, server discovery (flags, environment, client file), metrics,
and two `anvil up --port 0` clusters side by side."""
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.request

from harness import ANVIL, cluster, run_tests, scratch_dir, wait_for

VERBS = ["run", "jobs", "show", "logs", "cancel", "nodes"]


def test_run_wait_streams_and_exits_with_the_job_code():
    with cluster(agents=2, gpus=2, name="cliwait") as c:
        p = c.cli("run", "--gpus", "1", "--wait", "--", "sh", "-c", "echo hello-from-rank; exit 9")
        assert p.returncode == 9, (p.returncode, p.stdout, p.stderr)
        assert "hello-from-rank" in p.stdout, p.stdout
        p = c.cli("run", "--wait", "--nodes", "2", "--gpus", "2", "--", "sh", "-c",
                  "echo rank=$NODE_RANK world=$WORLD_SIZE")
        assert p.returncode == 0, p.stderr
        assert "rank=0 world=4" in p.stdout, p.stdout
        p = c.cli("run", "--wait", "--", "sh", "-c", "kill -9 $$")
        assert p.returncode == 137, (p.returncode, p.stderr)


def test_listings_tables_and_json():
    with cluster(agents=2, gpus=2, name="clilist") as c:
        p = c.cli("run", "--name", "lister", "--gpus", "2", "--priority", "3", "--env", "FOO=bar",
                  "--", "sh", "-c", "echo $FOO; echo to-stderr >&2", check=True)
        jid = int(re.search(r"(\d+)", p.stdout + p.stderr).group(1))
        c.wait_job(jid)
        jobs = c.cli("jobs", check=True).stdout
        assert "lister" in jobs and "succeeded" in jobs and "ID" in jobs, jobs
        js = json.loads(c.cli("jobs", "--json", check=True).stdout)
        assert js["jobs"][0]["id"] == jid and js["jobs"][0]["priority"] == 3
        show = c.cli("show", str(jid), check=True).stdout
        assert "lister" in show and "succeeded" in show, show
        sj = json.loads(c.cli("show", "--json", str(jid), check=True).stdout)
        assert sj["job"]["env"] == {"FOO": "bar"}
        logs = c.cli("logs", str(jid), check=True)
        assert logs.stdout == "bar\n" and logs.stderr == "to-stderr\n", logs
        nodes = c.cli("nodes", check=True).stdout
        assert "node-1" in nodes and "node-2" in nodes and "ready" in nodes, nodes
        nj = json.loads(c.cli("nodes", "--json", check=True).stdout)
        assert sorted(n["name"] for n in nj["nodes"]) == ["node-1", "node-2"]
        assert all(n["gpus_total"] == 2 and n["backend"] == "sim" for n in nj["nodes"])
        # nodes show: where the node's agent serves its metrics, and they are there
        show = c.cli("nodes", "show", "node-2", check=True).stdout
        agent_url = [n for n in nj["nodes"] if n["name"] == "node-2"][0]["agent_url"]
        m = re.search(r"^  metrics +(\S+)$", show, re.M)
        assert m and m.group(1) == agent_url + "/metrics", show
        with urllib.request.urlopen(m.group(1), timeout=10) as r:
            text = r.read().decode()
        assert 'anvil_gpu_health{gpu="1"' in text and 'Hostname="node-2"' in text, text[:2000]
        for verb in VERBS:
            h = c.cli(verb, "--help")
            assert h.returncode == 0 and "usage" in h.stdout.lower(), (verb, h.stdout, h.stderr)


def test_logs_follow_until_the_job_ends():
    with cluster(agents=1, gpus=1, name="clifollow") as c:
        j = c.submit(["sh", "-c", "for i in 1 2 3; do echo line-$i; sleep 0.3; done"], gpus=1)
        p = c.cli("logs", "-f", str(j["id"]), check=True, timeout=30)
        assert p.stdout.split() == ["line-1", "line-2", "line-3"], p.stdout


def test_server_discovery_order():
    with cluster(agents=1, gpus=1, name="clidisc") as c:
        # the client file alone
        assert c.cli("jobs").returncode == 0
        # environment beats the file: a wrong server from the environment fails
        p = c.cli("jobs", env={"ANVIL_SERVER": "http://127.0.0.1:9"})
        assert p.returncode == 3 and "ANVIL_SERVER" in p.stderr, p.stderr
        # flags beat the environment
        p = c.cli("--server", c.url, "jobs", env={"ANVIL_SERVER": "http://127.0.0.1:9"})
        assert p.returncode == 0, p.stderr
        p = c.cli("jobs", "--token", "wrong")
        assert p.returncode == 1 and "token" in p.stderr.lower(), p.stderr
        # no home, no flags: explains how to configure
        p = c.cli("jobs", env={"ANVIL_HOME": os.path.join(c.dir, "empty")})
        assert p.returncode == 3 and "ANVIL_SERVER" in p.stderr, p.stderr


def test_metrics_and_health():
    with cluster(agents=1, gpus=2, name="metrics") as c:
        j = c.submit(["true"], gpus=1)
        c.wait_job(j["id"])
        text = urllib.request.urlopen(c.url + "/metrics").read().decode()
        for needle in ['anvil_jobs{state="succeeded"} 1', "anvil_gpus 2",
                       "anvil_gpus_allocated 0", 'anvil_nodes{state="ready"} 1',
                       'anvil_http_requests_total{route="jobs_submit"} 1',
                       'anvil_http_request_duration_seconds_bucket{route="jobs_submit",le="+Inf"} 1']:
            assert needle in text, needle
        agent_url = c.nodes()[0]["agent_url"]
        assert "anvil_agent" in urllib.request.urlopen(agent_url + "/metrics").read().decode()
        assert json.loads(urllib.request.urlopen(agent_url + "/healthz").read())["status"] == "ok"


def start_up(home):
    env = dict(os.environ, ANVIL_HOME=home)
    p = subprocess.Popen([ANVIL, "up", "--port", "0", "--agents", "2", "--gpus-per-agent", "2"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, text=True)
    lines = []
    deadline = time.time() + 30
    while time.time() < deadline:
        line = p.stdout.readline()
        lines.append(line)
        if "anvil up: ready" in line:
            return p
        if not line and p.poll() is not None:
            break
    p.kill()
    raise AssertionError("anvil up did not get ready:\n" + "".join(lines))


def test_two_up_clusters_side_by_side():
    homes = [scratch_dir("anvil-up-%d-" % i) for i in range(2)]
    ups = []
    try:
        for h in homes:
            ups.append(start_up(h))
        urls = set()
        for h in homes:
            env = dict(os.environ, ANVIL_HOME=h)
            r = subprocess.run([ANVIL, "run", "--wait", "--", "sh", "-c", "echo $ANVIL_JOB_ID"],
                               capture_output=True, text=True, env=env, timeout=60)
            assert r.returncode == 0, r.stderr
            assert r.stdout.strip() == "1", r.stdout
            urls.add(json.load(open(os.path.join(h, "client.json")))["server"])
        assert len(urls) == 2, urls
    finally:
        for p in ups:
            p.send_signal(signal.SIGINT)
        for p in ups:
            assert p.wait(30) == 0, "anvil up must exit 0 on Ctrl-C"


def test_server_check_config_shows_the_defaults():
    with tempfile.TemporaryDirectory(prefix="anvil-cfg-") as d:
        check_config_defaults(d)


def check_config_defaults(d):
    r = subprocess.run([ANVIL, "server", "--check-config", "--state-dir", d],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    # durability defaults to WAL + synchronous=NORMAL (survives process crashes)
    assert "full-sync=off" in r.stdout and "preempt-min-runtime=300000ms" in r.stdout, r.stdout
    r = subprocess.run([ANVIL, "server", "--check-config", "--full-sync", "--state-dir", d],
                       capture_output=True, text=True, timeout=30)
    assert "full-sync=on" in r.stdout, r.stdout
    r = subprocess.run([ANVIL, "server", "--node-timeout", "1ms"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "--node-timeout" in r.stderr, r.stderr


def test_every_verb_takes_an_array_member():
    """ARRAY_INDEX (12_3), as `anvil jobs` prints a member, names it to every
    verb that takes a job: show, why, logs, exec, attach, events, cancel, and
    run --after."""
    with cluster(agents=1, gpus=2, name="climember") as c:
        p = c.cli("run", "--array", "0-3%2", "--", "sh", "-c",
                  "echo out-$ANVIL_ARRAY_INDEX; sleep 120", check=True)
        a = int(re.search(r"submitted array (\d+)", p.stdout + p.stderr).group(1))
        for k in (0, 1):
            wait_for(lambda: c.job(a + k)["state"] == "running", what="member %d runs" % k)
        show = c.cli("show", "%d_1" % a, check=True).stdout
        assert show.startswith("job %d" % (a + 1)) and "running" in show, show
        why = c.cli("why", "%d_3" % a, check=True).stdout
        assert why.startswith("job %d " % (a + 3)), why
        assert "array %d: 2 of its jobs run, its limit (%%2)" % a in why, why
        wait_for(lambda: c.cli("logs", "%d_1" % a).stdout == "out-1\n", what="member 1's log")
        p = c.cli("exec", "%d_1" % a, "--", "sh", "-c", "echo $ANVIL_JOB_ID $ANVIL_ARRAY_INDEX")
        assert p.returncode == 0 and p.stdout == "%d 1\n" % (a + 1), (p.stdout, p.stderr)
        p = c.cli("attach", "%d_1" % a)
        assert p.returncode == 1 and "job %d is not an interactive session" % (a + 1) \
            in p.stderr, (p.returncode, p.stderr)
        events = c.cli("events", "--job", "%d_1" % a, check=True).stdout
        assert "job.submitted" in events and "job %d " % (a + 1) in events, events
        p = c.cli("run", "--after", "%d_1:any" % a, "--", "true", check=True)
        dep = int(re.search(r"submitted job (\d+)", p.stdout).group(1))
        assert c.job(dep)["after"] == [{"job": a + 1, "when": "any"}], c.job(dep)
        # member 0's id is the array's: 12_0 cancels that member alone
        p = c.cli("cancel", "%d_0" % a, check=True)
        assert p.stdout.startswith("cancelling job %d_0:" % a), p.stdout
        assert c.wait_job(a)["state"] == "cancelled"
        assert c.job(a + 1)["state"] == "running", c.job(a + 1)
        for verb in ("show", "why", "logs", "events", "cancel"):
            args = [verb, "--job", "%d_9" % a] if verb == "events" else [verb, "%d_9" % a]
            p = c.cli(*args)
            assert p.returncode == 1 and "%d_9: no such array member" % a in p.stderr, \
                (verb, p.returncode, p.stderr)
            args = [verb, "--job", "%d_x" % a] if verb == "events" else [verb, "%d_x" % a]
            p = c.cli(*args)
            assert p.returncode == 2 and "is not a job" in p.stderr, (verb, p.stderr)
        c.cli("cancel", str(a), check=True)


run_tests([test_server_check_config_shows_the_defaults, test_run_wait_streams_and_exits_with_the_job_code, test_listings_tables_and_json,
           test_logs_follow_until_the_job_ends, test_server_discovery_order,
           test_metrics_and_health, test_two_up_clusters_side_by_side,
           test_every_verb_takes_an_array_member])
