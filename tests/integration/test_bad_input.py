"""Bad input gets HTTP 400 (or 401/404/413/422) naming the field and the
reason, the CLI prints it and exits non-zero, and nothing crashes a daemon."""
import glob
import http.client
import json
import os
import random
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

from harness import ANVIL, ApiError, cluster, run_tests, wait_for


def expect(c, status, needle, body=None, raw=None, path="/v1/jobs", method="POST", token=None):
    try:
        c.api(method, path, body, raw=raw, token=token)
    except ApiError as e:
        assert e.status == status, (e.status, e.body, body, raw)
        msg = e.body["error"]["message"] if isinstance(e.body, dict) else str(e.body)
        assert needle in msg, (needle, msg)
        return
    raise AssertionError("expected HTTP %d for %r" % (status, body or raw))


def alive(c):
    assert c.api("GET", "/healthz")["status"] == "ok"
    assert c.server.poll() is None, "server died"
    for p in c.agents.values():
        assert p.poll() is None, "an agent died"


def test_job_bodies_rejected_with_field_and_reason():
    with cluster(agents=2, gpus=4, name="bad") as c:
        cases = [
            (400, "malformed JSON", None, b'{"command": ["true"'),
            (400, "expected a JSON object", None, b'[1,2]'),
            (400, "empty", None, b''),
            (400, "field 'gpu': unknown field", {"command": ["true"], "gpu": 1}, None),
            (400, "field 'gpus': \"2\" is not an integer", {"command": ["true"], "gpus": "2"}, None),
            (400, "field 'gpus': -1 is below the minimum 0", {"command": ["true"], "gpus": -1}, None),
            (400, "field 'gpu_type': 'h200' asks for a GPU model, but field 'gpus' is 0",
             {"command": ["true"], "gpus": 0, "gpu_type": "h200"}, None),
            (400, "field 'min_gpu_memory_bytes': 1024 asks for GPU memory, but field 'gpus' is 0",
             {"command": ["true"], "gpus": 0, "min_gpu_memory_bytes": 1024}, None),
            (400, "field 'gpus': 1000000 is above the maximum 64", {"command": ["true"], "gpus": 1000000}, None),
            (400, "field 'nodes': 0 is below the minimum 1", {"command": ["true"], "nodes": 0}, None),
            (400, "field 'nodes': 99999 is above the maximum 1024", {"command": ["true"], "nodes": 99999}, None),
            (400, "field 'priority'", {"command": ["true"], "priority": 10**12}, None),
            (400, "field 'command': required", {"gpus": 1}, None),
            (400, "field 'command': needs at least 1", {"command": []}, None),
            (400, "field 'command[0]': the program to run must not be empty", {"command": [""]}, None),
            (400, "field 'command[1]': 5 is not a string", {"command": ["a", 5]}, None),
            (400, "field 'command': {} is not an array of strings", {"command": {}}, None),
            (400, "field 'queue': no queue named 'nope'", {"command": ["true"], "queue": "nope"}, None),
            (400, "field 'env.X': must be a string", {"command": ["true"], "env": {"X": 1}}, None),
            (400, "field 'env': 'A=B' is not a valid variable name", {"command": ["true"], "env": {"A=B": "1"}}, None),
            (400, "field 'name': longer than 128", {"command": ["true"], "name": "x" * 200}, None),
            (400, "field 'gpus': 1.5 is not an integer", {"command": ["true"], "gpus": 1.5}, None),
            (422, "largest matching node has 4", {"command": ["true"], "gpus": 8}, None),
            (422, "only 2 matching nodes have that many", {"command": ["true"], "gpus": 1, "nodes": 3}, None),
        ]
        for status, needle, body, raw in cases:
            expect(c, status, needle, body=body, raw=raw)
        expect(c, 413, "larger than the limit", raw=b'{"command":["' + b"x" * (2 << 20) + b'"]}')
        expect(c, 401, "admin token", body={"command": ["true"]}, token="wrong")
        expect(c, 404, "no job 999", path="/v1/jobs/999", method="GET")
        expect(c, 400, "job id", path="/v1/jobs/abc", method="GET")
        expect(c, 404, "no job 999", path="/v1/jobs/999/why", method="GET")
        expect(c, 400, "job id", path="/v1/jobs/-1/why", method="GET")
        expect(c, 404, "no such route", path="/v1/jobs/1/why", method="POST")
        expect(c, 400, "query 'state'", path="/v1/jobs?state=bogus", method="GET")
        expect(c, 400, "query 'rank'", path="/v1/jobs/1/logs?rank=-1", method="GET")
        expect(c, 404, "no such route", path="/v1/nope", method="GET")
        # nothing was created by any of it
        assert c.api("GET", "/v1/jobs")["jobs"] == []
        alive(c)


def test_agent_protocol_rejects_garbage():
    with cluster(agents=1, gpus=2, name="badagent") as c:
        expect(c, 401, "join token", path="/v1/agent/register", body={"name": "x"}, token="bad")
        expect(c, 400, "field 'name': required", path="/v1/agent/register", body={},
               token=c.join_token)
        expect(c, 400, "gpus[0]", path="/v1/agent/register",
               body={"name": "x", "gpus": [{"index": "a"}]}, token=c.join_token)
        expect(c, 400, "field 'node_id'", path="/v1/agent/sync", body={"node_id": "1"})
        expect(c, 400, "ranks[0]", path="/v1/agent/sync",
               body={"node_id": 1, "ranks": [{"attempt_id": 1}]})
        expect(c, 401, "node secret", path="/v1/agent/sync", body={"node_id": 1}, token="x")
        # bytes that are not UTF-8, quoted back in an error, to the server and the agent
        agent = urllib.parse.urlsplit(c.api("GET", "/v1/nodes/node-1")["node"]["agent_url"])
        for host, port, path, token in [
                ("127.0.0.1", c.port, "/v1/events?limit=%ff", c.token),
                ("127.0.0.1", c.port, "/v1/nodes/%ff%c0", c.token),
                (agent.hostname, agent.port, "/v1/logs?offset=0&attempt=%ff", c.node_secret(0))]:
            conn = http.client.HTTPConnection(host, port, timeout=10)
            conn.request("GET", path, headers={"Authorization": "Bearer " + token})
            r = conn.getresponse()
            body = json.loads(r.read())
            assert 400 <= r.status < 500, (path, r.status, body)
            conn.close()
        alive(c)


def test_agent_records_checked_entry_by_entry():
    """The facts' GPU entries and RDMA ports, and the health report's node
    fault, are records of their own (proto/wire.h): a bad one is refused
    with its place, its field and the reason, and nothing is registered."""
    with cluster(agents=1, gpus=2, name="badfacts") as c:
        join, secret = c.join_token, c.node_secret(0)
        expect(c, 400, "rdma[0]: field 'port': required", path="/v1/agent/register",
               body={"name": "x", "rdma": [{"dev": "mlx5_0"}]}, token=join)
        expect(c, 400, "rdma[1]: field 'colour': unknown field", path="/v1/agent/register",
               body={"name": "x", "rdma": [{"dev": "mlx5_0", "port": 1},
                                           {"dev": "mlx5_1", "port": 1, "colour": "red"}]},
               token=join)
        expect(c, 400, "gpus[0]: field 'uuid': required", path="/v1/agent/sync",
               body={"node_id": 1, "facts": {"gpus": [{"index": 0}]}}, token=secret)
        expect(c, 400, "health: field 'reason': required", path="/v1/agent/sync",
               body={"node_id": 1, "health": {"node": {"code": "gpu-lost"}}}, token=secret)
        names = [n["name"] for n in c.api("GET", "/v1/nodes")["nodes"]]
        assert names == ["node-1"], names
        n = c.api("GET", "/v1/nodes/node-1")["node"]
        assert n["state"] == "ready" and len(n["gpus"]) == 2 and n["fault"] is None, n
        alive(c)


def test_random_bytes_never_crash_the_server():
    rnd = random.Random(7)
    with cluster(agents=1, gpus=2, name="fuzz") as c:
        paths = ["/v1/jobs", "/v1/agent/sync", "/v1/agent/register", "/v1/queues",
                 "/v1/jobs/1/cancel", "/v1/nodes/node-1", "/v1/nodes/node-1/check",
                 "/v1/nodes/node-1/faults"]
        seeds = [b'{"command":["true"],"gpus":1}', b'{"node_id":1,"ranks":[]}',
                 b'{"name":"n","gpus":[]}',
                 b'{"node_id":1,"health":{"gpus":[{"index":0,"state":"quarantined",'
                 b'"reason":"r"}],"findings":[{"seq":5,"gpu":0,"scope":"job","code":"xid-13",'
                 b'"reason":"r"}],"node":null}}',
                 b'{"gpu":0,"kind":"xid","xid":13}', b'{"state":"draining","reason":"r"}']
        secret = c.node_secret(0)
        for i in range(400):
            body = bytearray(rnd.choice(seeds))
            for _ in range(rnd.randint(1, 6)):
                op = rnd.randint(0, 2)
                pos = rnd.randint(0, len(body))
                if op == 0:
                    body[pos:pos] = bytes([rnd.randint(0, 255)])
                elif op == 1 and len(body) > 1:
                    del body[pos:pos + rnd.randint(1, 4)]
                else:
                    body[pos:pos] = rnd.choice([b'"', b'{', b'}', b'[', b'-1', b'1e999', b'\\u0000', b'null'])
            conn = http.client.HTTPConnection("127.0.0.1", c.port, timeout=10)
            token = rnd.choice([c.token, c.join_token, secret, "x"])
            conn.request("POST", rnd.choice(paths), bytes(body),
                         {"Authorization": "Bearer " + token})
            r = conn.getresponse()
            r.read()
            assert r.status < 500, (r.status, body)
            conn.close()
        alive(c)
        # the agent's own routes, with its secret
        agent = urllib.parse.urlsplit(c.api("GET", "/v1/nodes/node-1")["node"]["agent_url"])
        for i in range(150):
            body = bytearray(rnd.choice(seeds[3:]))
            pos = rnd.randint(0, len(body))
            body[pos:pos] = rnd.choice([b'"', b'{', b'}', b'-1', b'1e999', b'null', b'x'])
            conn = http.client.HTTPConnection(agent.hostname, agent.port, timeout=10)
            conn.request("POST", rnd.choice(["/v1/gpu/faults", "/v1/check"]), bytes(body),
                         {"Authorization": "Bearer " + secret})
            r = conn.getresponse()
            r.read()
            assert r.status < 500, (r.status, body)
            conn.close()
        alive(c)
        assert c.api("GET", "/v1/nodes/node-1")["node"]["state"] != "lost"


def test_damaged_state_files_stop_the_server_with_a_reason():
    """A token file or database the server cannot use stops it at start with the
    file and the reason; nothing is replaced and nothing crashes. An operator's
    own token (32-128 URL-safe characters) is used as it is."""
    with tempfile.TemporaryDirectory(prefix="anvil-badstate-") as d:
        state, home = os.path.join(d, "state"), os.path.join(d, "home")
        os.makedirs(state)

        def start(wait=10):
            return subprocess.run([ANVIL, "server", "--state-dir", state, "--home", home,
                                   "--listen", "127.0.0.1:0"], capture_output=True,
                                  text=True, errors="replace", timeout=wait)

        def refused(name, content, needle):
            with open(os.path.join(state, name), "wb") as f:
                f.write(content)
            r = start()
            assert r.returncode == 1, (name, r.returncode, r.stderr)
            assert name in r.stderr and needle in r.stderr, r.stderr
            with open(os.path.join(state, name), "rb") as f:
                assert f.read() == content, "the file was replaced"
            os.remove(os.path.join(state, name))

        refused("admin.token", bytes(range(0, 240, 3)), "a character other than")
        refused("join.token", b"", "shorter than 32")
        refused("admin.token", b"x" * 200 + b"\n", "longer than 128")
        # an operator's own token is used as it is
        mine = "ops-" + "a1b2c3d4" * 5
        with open(os.path.join(state, "admin.token"), "w") as f:
            f.write(mine + "\n")
        p = subprocess.Popen([ANVIL, "server", "--state-dir", state, "--home", home,
                              "--listen", "127.0.0.1:0"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        try:
            client = os.path.join(home, "client.json")
            deadline = time.time() + 10
            while not os.path.exists(client) and time.time() < deadline:
                time.sleep(0.05)
            with open(client) as f:
                conf = json.load(f)
            assert conf["token"] == mine, conf
            req = urllib.request.Request(conf["server"] + "/v1/queues",
                                         headers={"Authorization": "Bearer " + mine})
            with urllib.request.urlopen(req, timeout=5) as r:
                assert r.status == 200
        finally:
            p.terminate()
            p.wait(timeout=10)
        # a damaged database: refused, and left as it was
        db = os.path.join(state, "anvil.db")
        with open(db, "rb") as f:
            data = bytearray(f.read())
        rnd = random.Random(1)
        for _ in range(200):
            data[rnd.randrange(100, len(data))] = rnd.randrange(256)
        with open(db, "wb") as f:
            f.write(data)
        r = start()
        assert r.returncode == 1, (r.returncode, r.stderr)
        assert "cannot open the state database" in r.stderr and db in r.stderr, r.stderr
        with open(db, "rb") as f:
            assert f.read() == bytes(data), "the damaged database was written"


def test_reasons_cut_to_fit_stay_utf8():
    """A reason an agent reports (up to 255 bytes) is quoted into a job's
    reason and its attempt's requeue reason, which have fixed sizes: cut to
    fit (text_printf), they must not end in half a character, or a view of
    the job would fail to encode. (The requeue is over in milliseconds, so
    this is the path end to end; test_base's text_printf test is the cut.)"""
    with cluster(agents=1, gpus=2, name="utf8cut") as c:
        j = c.submit(["sleep", "60"], gpus=1, grace_ms=200)["id"]
        wait_for(lambda: c.job(j)["state"] == "running", what="job running")
        gpu = c.job(j)["attempts"][0]["ranks"][0]["gpus"][0]
        body = {"node_id": 1, "health": {"gpus": [
            {"index": gpu, "state": "quarantined", "reason": "\u00e9" * 127}]}}
        conn = http.client.HTTPConnection("127.0.0.1", c.port, timeout=10)
        conn.request("POST", "/v1/agent/sync", json.dumps(body),
                     {"Authorization": "Bearer " + c.node_secret(0)})
        r = conn.getresponse()
        r.read()
        assert r.status == 200, r.status
        wait_for(lambda: c.job(j)["attempts"][0]["state"] != "running", what="job requeued")
        events = c.api("GET", "/v1/events?limit=100")["events"]
        assert any("\u00e9" * 127 in e["message"] for e in events), events
        for path in ("/v1/jobs", "/v1/nodes/node-1"):
            c.api("GET", path)
        alive(c)


def test_agent_without_its_journal_stops_and_reports_the_rank():
    """An agent restarted on an emptied rank journal finds a rank's cgroup that
    no record tells of: it stops the processes (nothing could report their end
    or stop them when asked) and reports the rank lost, with why."""
    with cluster(agents=1, gpus=2, name="nojournal") as c:
        j = c.submit(["sleep", "600"], gpus=1)["id"]
        wait_for(lambda: c.job(j)["state"] == "running", what="job running")
        pid = c.job(j)["attempts"][0]["ranks"][0]["pid"]
        c.agents[0].send_signal(signal.SIGKILL)
        c.agents[0].wait(10)
        for f in glob.glob(os.path.join(c.dir, "node-1", "ranks-*.jsonl")):
            open(f, "w").close()
        c.start_agent(0)
        done = c.wait_job(j, timeout=20)
        assert done["state"] == "failed" and "journal" in done["reason"], done
        rank = done["attempts"][0]["ranks"][0]
        assert rank["exit_code"] == 255 and "journal" in rank["error"], rank
        wait_for(lambda: not os.path.exists("/proc/%d" % pid), what="the orphan stopped")
        alive(c)


def test_full_disk_refuses_submissions_whole():
    """On a full disk a submission is refused and leaves nothing behind (no
    job in memory that would run anyway, no duplicate when the client sends
    it again); once there is room, everything accepted is there, also after
    a restart."""
    d = tempfile.mkdtemp(prefix="anvil-full-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", d], check=True)
    p = None
    try:
        state, home = os.path.join(d, "state"), os.path.join(d, "home")

        def start():
            client = os.path.join(home, "client.json")
            if os.path.exists(client):
                os.unlink(client)
            proc = subprocess.Popen([ANVIL, "server", "--state-dir", state, "--home", home,
                                     "--listen", "127.0.0.1:0"], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            deadline = time.time() + 10
            while time.time() < deadline:
                try:
                    with open(client) as f:
                        conf = json.load(f)
                    if conf.get("server"):
                        return proc, conf
                except (OSError, ValueError):
                    pass
                time.sleep(0.05)
            raise AssertionError("the server did not start")

        def call(conf, method, path, body=None):
            req = urllib.request.Request(
                conf["server"] + path, method=method,
                data=json.dumps(body).encode() if body is not None else None,
                headers={"Authorization": "Bearer " + conf["token"],
                         "Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as r:
                return json.load(r)

        p, conf = start()
        accepted, refused = 0, 0
        for _ in range(400):
            try:
                call(conf, "POST", "/v1/jobs", {"command": ["echo", "x" * 500], "gpus": 1})
                accepted += 1
            except urllib.error.HTTPError as e:
                msg = json.loads(e.read())["error"]["message"]
                assert e.code == 507 and "nothing was submitted" in msg, (e.code, msg)
                refused += 1
                if refused == 20:
                    break
        assert accepted > 0 and refused == 20, (accepted, refused)
        jobs = call(conf, "GET", "/v1/jobs?state=all")["jobs"]
        assert len(jobs) == accepted, (len(jobs), accepted)
        subprocess.run(["mount", "-o", "remount,size=8m", d], check=True)
        call(conf, "POST", "/v1/jobs", {"command": ["true"], "gpus": 1})
        p.terminate()
        p.wait(10)
        p, conf = start()
        ids = sorted(j["id"] for j in call(conf, "GET", "/v1/jobs?state=all")["jobs"])
        assert ids == list(range(1, accepted + 2)), (ids, accepted)
    finally:
        if p and p.poll() is None:
            p.terminate()
            p.wait(10)
        subprocess.run(["umount", d], check=False)
        os.rmdir(d)


def test_cli_prints_the_reason_and_fails():
    with cluster(agents=1, gpus=2, name="badcli") as c:
        p = c.cli("run", "--gpus", "-1", "--", "true")
        assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
        assert "field 'gpus': -1 is below the minimum 0" in p.stderr, p.stderr
        p = c.cli("run", "--gpus", "abc", "--", "true")
        assert p.returncode == 2, (p.returncode, p.stderr)
        assert "--gpus" in p.stderr and "abc" in p.stderr
        p = c.cli("run", "--")
        assert p.returncode == 2, (p.returncode, p.stderr)
        p = c.cli("run", "--gpus", "9", "--", "true")
        assert p.returncode == 1 and "largest matching node has 2" in p.stderr, p.stderr
        p = c.cli("show", "12345")
        assert p.returncode == 1 and "no job 12345" in p.stderr, p.stderr
        p = c.cli("jobs", "--bogus")
        assert p.returncode == 2, p.stderr
        p = c.cli("jobs", env={"ANVIL_SERVER": "http://127.0.0.1:1"})
        assert p.returncode == 3 and "127.0.0.1:1" in p.stderr, p.stderr
        # an argument that is not UTF-8 (a Latin-1 e-acute) is refused, not dropped
        p = c.cli("run", "--gpus", "1", "--", "echo", "caf\udce9")
        assert p.returncode == 2 and "argument 6, 'caf?'" in p.stderr, p.stderr
        assert "submitted" not in p.stdout, p.stdout
        alive(c)


def test_commands_that_cannot_exec_are_refused_with_their_size():
    """A command argument or NAME=VALUE over Linux's MAX_ARG_STRLEN, or all of
    them past the exec's total, is a 400 naming the field, the size and the
    limit (not a job that fails with 'Argument list too long'), from the
    API, `anvil run` and a workflow's run; what fits runs."""
    with cluster(agents=1, gpus=1, name="bigargs") as c:
        expect(c, 400, "field 'command[3]': 900000 bytes, over the limit of 131071 bytes for "
               "one argument (Linux's MAX_ARG_STRLEN, 131072 with its NUL)",
               body={"command": ["sh", "-c", "true", "x" * 900000]})
        expect(c, 400, "field 'env': 'BIG' is 900004 bytes as NAME=VALUE, over the limit of "
               "131071 bytes", body={"command": ["true"], "env": {"BIG": "x" * 900000}})
        assert c.api("GET", "/v1/jobs")["jobs"] == []
        # Each fits (the CLI's own exec takes them), together they do not.
        part = "x" * 120000
        p = c.cli("run", "--", "sh", "-c", "true", part, part, part, part, part)
        assert p.returncode == 1, (p.returncode, p.stderr[-2000:])
        assert "fields 'command' and 'env':" in p.stderr, p.stderr[-2000:]
        assert "over the limit of 524288 bytes for one exec" in p.stderr, p.stderr[-2000:]
        # The longest argument there is runs.
        p = c.cli("run", "--wait", "--", "sh", "-c", "echo ${#1}", "sh", "x" * 131071)
        assert p.returncode == 0 and "131071" in p.stdout, (p.returncode, p.stderr[-2000:])
        # A workflow's run goes through the same validation.
        d = tempfile.mkdtemp(dir=c.dir)
        spec = os.path.join(d, "big.yaml")
        with open(spec, "w") as f:
            f.write("name: big\ntasks:\n  t:\n    command: 'true'\n    env: {BIG: %s}\n"
                    % ("x" * 900000))
        p = c.cli("wf", "run", "--code", d, "--wait", spec, timeout=60)
        assert p.returncode == 1, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
        x = c.api("GET", "/v1/workflows/1")["workflow"]
        why = x["run_list"][0]["why"]
        assert "its job was refused: field 'env': 'BIG' is 900004 bytes" in why, why
        alive(c)


run_tests([test_job_bodies_rejected_with_field_and_reason, test_agent_protocol_rejects_garbage,
           test_agent_records_checked_entry_by_entry,
           test_random_bytes_never_crash_the_server, test_cli_prints_the_reason_and_fails,
           test_damaged_state_files_stop_the_server_with_a_reason,
           test_reasons_cut_to_fit_stay_utf8,
           test_agent_without_its_journal_stops_and_reports_the_rank,
           test_full_disk_refuses_submissions_whole,
           test_commands_that_cannot_exec_are_refused_with_their_size])
