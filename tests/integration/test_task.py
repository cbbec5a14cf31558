"""A workflow task on a node (docs/workflows.md, "How a task runs on a
node"): the object API of a real server (docs/api.md, "Objects"), and the
wrapper `anvil _task` run as the agent runs it (its own process group,
ANVIL_TASK, ANVIL_SERVER, an exec token) against that server: the code
bundle unpacked once per node, also by ranks racing for it; inputs
downloaded and rendered into the command and render_env; outputs uploaded
by content and reported (to a recording stand-in for the workflow
engine's POST /v1/workflows/runs/RUN/outputs, in front of the real
server); the checkpoint restored into an empty directory and saved after
a SIGTERM; every failure of the wrapper one line on stderr; the real agent
running a task's desired entry under the wrapper; and a workflow whose
tasks hand a directory, a file, a value and a sweep's files to each other
through the engine, the agent, the wrapper and the object store; and a
bundle with a link outside it refused when `anvil wf run` packs it and,
hand-made, when the node unpacks it (the task failing with the reason,
no bundle left behind)."""
import hashlib
import http.server
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.request

from harness import ANVIL, Cluster, cluster, run_tests, sim_gpus, wait_for

PY = sys.executable


def sha(data):
    return hashlib.sha256(data).hexdigest()


def store_key(hexdigest):
    """A content key, as the API answers it."""
    return "sha256/" + hexdigest


def file_key(hexdigest):
    """The same object by the store's file layout, which the API also takes."""
    return "sha256/%s/%s" % (hexdigest[:2], hexdigest[2:])


def raw(c, method, key, data=None, token=None, headers=None):
    """(status, headers, body bytes) of a call on /v1/objects/KEY."""
    req = urllib.request.Request(c.url + "/v1/objects/" + key, data=data, method=method)
    if token != "":
        req.add_header("Authorization", "Bearer " + (token or c.token))
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def put_expecting(c, key, size):
    """A PUT as curl sends a large body: headers with "Expect: 100-continue"
    first; (status, body) of the answer that comes before the body."""
    host, port = c.url.split("://", 1)[1].rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=20)
    s.sendall(("PUT /v1/objects/%s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
               "Content-Length: %d\r\nExpect: 100-continue\r\n\r\n"
               % (key, host, c.token, size)).encode())
    data = b""
    while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < int(
            re.search(rb"Content-Length: *(\d+)", data, re.I).group(1)):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def put(c, data, key=None):
    status, _, body = raw(c, "PUT", key or "sha256/" + sha(data), data)
    assert status in (200, 201), (status, body)
    return json.loads(body)["key"]


def tar_of(files):
    """A tar (bytes) of {name: text}; names ending in / are directories."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name in sorted(files):
            info = tarfile.TarInfo(name.rstrip("/"))
            if name.endswith("/"):
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                t.addfile(info)
            else:
                data = files[name].encode()
                info.size, info.mode = len(data), 0o644
                t.addfile(info, io.BytesIO(data))
    return out.getvalue()


def metric(c, route):
    text = urllib.request.urlopen(c.url + "/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith('anvil_http_requests_total{route="%s"}' % route):
            return int(line.split()[-1])
    return 0


class Engine:
    """A stand-in for the server as a task's wrapper sees it: forwards
    /v1/objects to the real server and records each POST of outputs, which
    it answers 200 {} as the workflow engine will. It also speaks the agent
    protocol (docs/api.md) to one agent: register, and syncs answered with
    the desired entries in self.desired, their reports kept by attempt."""

    def __init__(self, upstream):
        self.posts = []
        self.desired = []
        self.gen = 1
        self.reports = {}
        self.lock = threading.Lock()
        engine = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if self.path == "/v1/agent/register":
                    answer = {"node_id": 1, "secret": "node-secret"}
                elif self.path == "/v1/agent/sync":
                    answer = engine.sync(body)
                else:
                    engine.posts.append((self.path, dict(self.headers), body))
                    answer = {}
                self.answer(200, json.dumps(answer).encode(), "application/json")

            def forward(self):
                n = int(self.headers.get("Content-Length", 0))
                data = self.rfile.read(n) if n else None
                req = urllib.request.Request(upstream + self.path, data=data,
                                             method=self.command)
                for k in ("Authorization", "X-Anvil-Attempt"):
                    if self.headers.get(k):
                        req.add_header(k, self.headers[k])
                try:
                    with urllib.request.urlopen(req, timeout=30) as r:
                        self.answer(r.status, r.read(), r.headers.get("Content-Type"),
                                    r.headers)
                except urllib.error.HTTPError as e:
                    self.answer(e.code, e.read(), e.headers.get("Content-Type"), e.headers)

            do_GET = do_PUT = forward

            def answer(self, status, body, ctype, headers=None):
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", ctype or "application/octet-stream")
                    self.send_header("Content-Length", str(len(body)))
                    for k in ("X-Anvil-Size", "X-Anvil-Sha256"):
                        if headers is not None and headers.get(k):
                            self.send_header(k, headers[k])
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the agent gave up a long poll for a newer one

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def sync(self, body):
        with self.lock:
            for r in body.get("ranks", []):
                if self.reports.get(r["attempt_id"], {}).get("state") != "exited":
                    self.reports[r["attempt_id"]] = r
        deadline = time.time() + min(body.get("wait_ms", 0), 300) / 1000.0
        while body.get("generation") == self.gen and time.time() < deadline:
            time.sleep(0.02)
        with self.lock:
            return {"generation": self.gen, "node_timeout_ms": 30000,
                    "ranks": list(self.desired)}

    def set_desired(self, entries):
        with self.lock:
            self.desired = entries
            self.gen += 1

    def report(self, attempt_id):
        with self.lock:
            return self.reports.get(attempt_id)


def task_env(c, doc, attempt, work, server=None, rank=0, ckpt=None, extra=None):
    env = dict(os.environ, ANVIL_TASK=json.dumps(doc), ANVIL_SERVER=server or c.url,
               ANVIL_EXEC_TOKEN=c.token, ANVIL_ATTEMPT_ID=str(attempt), NODE_RANK=str(rank),
               ANVIL_JOB_ID="1")
    env.pop("ANVIL_CHECKPOINT_DIR", None)
    if ckpt:
        env["ANVIL_CHECKPOINT_DIR"] = ckpt
    env.update(extra or {})
    return env


def start_task(c, doc, argv, attempt, work, grace_ms=10000, **kw):
    """`anvil _task` as the agent starts it: a process group of its own."""
    return subprocess.Popen([ANVIL, "_task", "--work-dir", work, "--grace-ms", str(grace_ms),
                             "--"] + argv, env=task_env(c, doc, attempt, work, **kw),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def run_task(c, doc, argv, attempt, work, timeout=60, **kw):
    p = start_task(c, doc, argv, attempt, work, **kw)
    out, err = p.communicate(timeout=timeout)
    assert "AddressSanitizer" not in err and "runtime error" not in err, err
    return p.returncode, out, err


# ---- the object API ----

def test_objects_by_content_and_by_name():
    with cluster(agents=1, gpus=1, name="objects",
                 server_args=["--object-max-size", "2Mi"]) as c:
        body = os.urandom(1536 * 1024)  # larger than an in-memory body (1 MiB)
        h = sha(body)
        status, _, got = raw(c, "PUT", "sha256/" + h, body)
        assert status == 201 and json.loads(got) == {
            "key": store_key(h), "size": len(body), "sha256": h, "stored": True}, got
        status, _, got = raw(c, "PUT", "sha256/" + h, body)  # stored once
        assert status == 200 and json.loads(got)["stored"] is False, got
        for key in ("sha256/" + h, file_key(h)):  # both forms name it
            status, headers, got = raw(c, "GET", key)
            assert status == 200 and got == body
            assert headers["X-Anvil-Sha256"] == h and headers["X-Anvil-Size"] == str(len(body))
        status, headers, got = raw(c, "HEAD", "sha256/" + h)
        assert status == 200 and got == b"" and headers["Content-Length"] == str(len(body))
        assert c.api("GET", "/v1/objects/sha256/%s?stat=1" % h) == {
            "key": store_key(h), "size": len(body), "sha256": h}

        # a body that is not what its key says is refused, naming both
        wrong = "0" * 64
        status, _, got = raw(c, "PUT", "sha256/" + wrong, b"other bytes")
        msg = json.loads(got)["error"]["message"]
        assert status == 400 and ("sha256/" + wrong) in msg and sha(b"other bytes") in msg, got
        status, _, got = raw(c, "GET", "sha256/" + wrong)
        assert status == 404, got
        status, _, got = raw(c, "PUT", "sha256/abc", b"x")
        assert status == 400 and "content key" in got.decode(), got
        # over --object-max-size: 413, said before the body is sent
        status, got = put_expecting(c, "sha256/" + "1" * 64, 3 << 20)
        assert status == 413 and b"2097152" in got, (status, got)

        # named: replaced whole; the store's own prefixes are not names
        for text in (b"first", b"second"):
            status, _, got = raw(c, "PUT", "ckpt/12/train/3", text)
            assert status == 200 and json.loads(got)["sha256"] == sha(text), got
        assert raw(c, "GET", "ckpt/12/train/3")[2] == b"second"
        for key in ("staging/x", "sha256/" + h + "/x"):
            status, _, got = raw(c, "PUT", key, b"z")
            assert status == 400, (key, status, got)
        assert raw(c, "GET", "ckpt/none")[0] == 404

        # credentials: none, another, an exec token of no attempt
        for token, headers in (("", None), ("wrong-token", None),
                               ("0" * 64, {"X-Anvil-Attempt": "1"})):
            for method, data in (("GET", None), ("PUT", b"q")):
                status, _, got = raw(c, method, "sha256/" + h, data, token=token,
                                     headers=headers)
                assert status == 401 and b"exec token" in got, (method, token, status, got)
        status, _, _ = raw(c, "DELETE", "sha256/" + h)
        assert status == 404
        uploads = os.path.join(c.state_dir, "uploads")
        assert not os.path.isdir(uploads) or os.listdir(uploads) == [], os.listdir(uploads)


# ---- the wrapper ----

# The task's program, from its bundle: says what it was given and writes
# its outputs.
RUN_PY = r'''
import json, os, sys
args = sys.argv[1:]
shards, scores = args[args.index("--shards") + 1], args[args.index("--scores") + 1]
seen = {
    "cwd_has_bundle": os.path.exists("run.py") and open("lib/data.txt").read(),
    "shards": sorted(os.listdir(shards)),
    "shard_a": open(os.path.join(shards, "a.txt")).read(),
    "scores": [open(p).read() for p in scores.split(" ")],
    "DATA": os.environ.get("DATA"),
    "OTHER": os.environ.get("OTHER"),
    "left": args[args.index("--left") + 1],
    "out": os.environ["ANVIL_OUTPUT_DIR"],
    "out_empty": os.listdir(os.environ["ANVIL_OUTPUT_DIR"]) == [],
}
print("SEEN " + json.dumps(seen), flush=True)
out = os.environ["ANVIL_OUTPUT_DIR"]
if os.environ.get("SKIP") != "model":
    os.makedirs(os.path.join(out, "model", "w"))
    open(os.path.join(out, "model", "w", "weights.bin"), "w").write("w" * 100)
open(os.path.join(out, "score"), "w").write("0.93\n")
open(os.path.join(out, "report"), "w").write("all good\n")
'''


def make_inputs(c):
    """The bundle and two upstream outputs in the store; the document."""
    bundle = tar_of({"./": None, "run.py": RUN_PY, "lib/": None, "lib/data.txt": "bundled"})
    shards = tar_of({"a.txt": "shard A", "b.txt": "shard B"})
    s0, s1 = b"score zero", b"score one"
    for data in (bundle, shards, s0, s1):
        put(c, data)
    doc = {"exec": 12, "run": 42, "task": "train", "index": 0, "rank_outputs": 0,
           "bundle": "sha256/" + sha(bundle),
           "fetch": [{"ref": "tasks.prep.outputs.shards", "kind": "dir",
                      "keys": ["sha256/" + sha(shards)], "list": False},
                     {"ref": "tasks.sweep.outputs.score", "kind": "file",
                      "keys": ["sha256/" + sha(s0), file_key(sha(s1))], "list": True}],
           "render_env": ["DATA"],
           "outputs": {"model": "dir", "score": "value", "report": "file"},
           "a_key_from_later": {"ignored": True}}
    argv = [PY, "run.py", "--shards", "{{ tasks.prep.outputs.shards }}",
            "--scores", "{{tasks.sweep.outputs.score}}", "--left", "{{ params.lr }}"]
    return doc, argv, sha(bundle)


def seen_of(out):
    line = [x for x in out.splitlines() if x.startswith("SEEN ")]
    assert line, out
    return json.loads(line[0][5:])


def test_task_with_bundle_inputs_and_outputs():
    with cluster(agents=1, gpus=1, name="task") as c:
        doc, argv, bundle_hex = make_inputs(c)
        work = os.path.join(c.dir, "work")
        engine = Engine(c.url)
        try:
            extra = {"DATA": "x={{ tasks.prep.outputs.shards }}",
                     "OTHER": "{{ tasks.prep.outputs.shards }}"}  # not in render_env
            rc, out, err = run_task(c, doc, argv, 101, work, server=engine.url, extra=extra)
            assert rc == 0, (rc, out, err)
            seen = seen_of(out)
            in_dir = os.path.join(work, "tasks", "101", "in")
            assert seen["cwd_has_bundle"] == "bundled", seen
            assert seen["shards"] == ["a.txt", "b.txt"] and seen["shard_a"] == "shard A", seen
            assert seen["scores"] == ["score zero", "score one"], seen
            assert seen["DATA"] == "x=" + os.path.join(in_dir, "prep", "shards"), seen
            assert seen["OTHER"] == "{{ tasks.prep.outputs.shards }}", seen
            assert seen["left"] == "{{ params.lr }}", seen  # not a fetched ref: as written
            assert seen["out"] == os.path.join(work, "tasks", "101", "out") and seen["out_empty"]
            assert ("code bundle %s" % store_key(bundle_hex)) in err, err

            # the outputs were reported once, each as the store has it
            assert len(engine.posts) == 1, engine.posts
            path, headers, body = engine.posts[0]
            assert path == "/v1/workflows/runs/42/outputs", path
            assert headers["Authorization"] == "Bearer " + c.token
            assert headers["X-Anvil-Attempt"] == "101"
            assert body["attempt_id"] == 101, body
            outs = body["outputs"]
            assert outs["score"] == {"kind": "value", "value": "0.93"}, outs
            report = b"all good\n"
            assert outs["report"] == {"kind": "file", "key": store_key(sha(report)),
                                      "size": len(report), "sha256": sha(report)}, outs
            model = outs["model"]
            assert model["kind"] == "dir" and model["key"] == store_key(model["sha256"]), model
            status, _, tar = raw(c, "GET", model["key"])
            assert status == 200 and sha(tar) == model["sha256"] and len(tar) == model["size"]
            with tarfile.open(fileobj=io.BytesIO(tar)) as t:
                names = sorted(m.name for m in t.getmembers() if m.isfile())
                assert names == ["./w/weights.bin"], names
                assert all(m.mtime == 0 and m.uid == 0 for m in t.getmembers())
            # the attempt's directory is gone; the bundle stays for the next
            assert not os.path.exists(os.path.join(work, "tasks", "101"))
            assert os.path.isfile(os.path.join(work, "bundles", bundle_hex, "run.py"))

            # the same output again makes the same key (deterministic tar)
            rc, out, err = run_task(c, doc, argv, 102, work, server=engine.url, extra=extra)
            assert rc == 0, err
            assert engine.posts[1][2]["outputs"]["model"]["key"] == model["key"]
            assert "code bundle" not in err, err  # unpacked once per node

            # a declared output not written fails the task, saying which
            rc, out, err = run_task(c, doc, argv, 103, work, server=engine.url,
                                    extra=dict(extra, SKIP="model"))
            assert rc == 1, (rc, err)
            assert ("anvil _task: output 'model' was not written: $ANVIL_OUTPUT_DIR/model "
                    "does not exist") in err, err
            assert len(engine.posts) == 2  # nothing reported

            # on another rank: the command runs, nothing is published
            rc, out, err = run_task(c, doc, argv, 104, work, server=engine.url, rank=1,
                                    extra=extra)
            assert rc == 0 and len(engine.posts) == 2, (rc, err)
        finally:
            engine.close()

        # Against the server itself, until the workflow engine answers the
        # outputs route, the objects land and the report is refused.
        rc, out, err = run_task(c, doc, argv, 105, work, extra=extra)
        if rc != 0:
            assert "POST %s/v1/workflows/runs/42/outputs answered 404" % c.url in err, err
        assert raw(c, "GET", store_key(sha(b"all good\n")))[0] == 200


def test_bundle_is_unpacked_once_by_racing_ranks():
    with cluster(agents=1, gpus=1, name="task-race") as c:
        bundle = tar_of({"./": None, "hello.txt": "hi\n", "big.bin": "x" * 2000000})
        put(c, bundle)
        doc = {"run": 1, "bundle": "sha256/" + sha(bundle)}
        work = os.path.join(c.dir, "work")
        before = metric(c, "objects_get")
        procs = [start_task(c, doc, ["cat", "hello.txt"], 200 + i, work) for i in range(4)]
        results = [p.communicate(timeout=60) + (p.returncode,) for p in procs]
        for out, err, rc in results:
            assert rc == 0 and out == "hi\n", (rc, out, err)
        unpacked = sum(err.count("unpacked into") for _, err, _ in results)
        assert unpacked == 1, results
        assert metric(c, "objects_get") - before == 1
        rc, out, err = run_task(c, doc, ["cat", "hello.txt"], 210, work)
        assert rc == 0 and out == "hi\n" and metric(c, "objects_get") - before == 1, err
        assert sorted(os.listdir(os.path.join(work, "bundles"))) == [
            sha(bundle), sha(bundle) + ".lock"]


def test_the_agent_removes_bundles_nothing_used_for_its_keep():
    """A restarted agent's first sweep (agent/bundles.h): of three bundles
    last used two hours ago under --bundle-keep 1h, the one a process still
    works in stays, the others go; one used a minute ago stays; a killed
    unpack's scratch tree goes; so does an attempt directory of no rank the
    agent has, older than ten minutes, and not a younger one."""
    c = Cluster(agents=0, gpus=1, name="task-sweep", agent_args=["--bundle-keep", "1h"])
    sleeper = None
    try:
        bundles = os.path.join(c.dir, "node-1", "bundles")
        old, busy, fresh = ("%064x" % i for i in (0xa1, 0xb2, 0xc3))
        now = time.time()
        for h, age in ((old, 7200), (busy, 7200), (fresh, 60), (old + ".partial", 60)):
            os.makedirs(os.path.join(bundles, h, "src"))
            os.utime(os.path.join(bundles, h), (now - age, now - age))
        # an attempt directory a killed wrapper left, and a fresh one
        tasks = os.path.join(c.dir, "node-1", "tasks")
        for attempt, age in (("999", 7200), ("1000", 60)):
            os.makedirs(os.path.join(tasks, attempt, "in"))
            os.utime(os.path.join(tasks, attempt), (now - age, now - age))
        sleeper = subprocess.Popen(["sleep", "120"], cwd=os.path.join(bundles, busy, "src"))
        c.start_agent(0)
        c.wait_ready(1)
        wait_for(lambda: "bundles: removed 1 unused for 3600s, 1 leftovers; kept 1, 1 in use"
                 in c.log("node-1.log"), what="the sweep's line")
        left = lambda: sorted(n for n in os.listdir(bundles) if not n.endswith(".lock"))
        wait_for(lambda: left() == [busy, fresh], what="only the used bundles left")
        assert "tasks: removing 1 attempt directories their wrappers left" in c.log("node-1.log")
        wait_for(lambda: os.listdir(tasks) == ["1000"], what="only the fresh attempt left")
    except BaseException:
        c.dump_logs()
        raise
    finally:
        if sleeper:
            sleeper.kill()
            sleeper.wait()
        c.stop()
    shutil.rmtree(c.dir, ignore_errors=True)


# The checkpointing program: resumes from $ANVIL_CHECKPOINT_DIR/step,
# writes the next step, and on SIGTERM (or when told to ignore it) writes
# what it has before it goes.
CKPT_PY = r'''
import os, signal, sys, time
d = os.environ["ANVIL_CHECKPOINT_DIR"]
path = os.path.join(d, "step")
step = int(open(path).read()) if os.path.exists(path) else 0
print("resumed at %d" % step, flush=True)
mode = sys.argv[1]
def save(n):
    open(path + ".tmp", "w").write(str(n))
    os.rename(path + ".tmp", path)
def on_term(sig, frame):
    save(step + 2)
    sys.exit(143)
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, on_term)
if mode == "same":
    sys.exit(0)
save(step + 1)
print("ready", flush=True)
time.sleep(120)
'''


def test_checkpoint_is_restored_and_saved_after_sigterm():
    with cluster(agents=1, gpus=1, name="task-ckpt") as c:
        prog = os.path.join(c.dir, "ckpt.py")
        with open(prog, "w") as f:
            f.write(CKPT_PY)
        key = "ckpt/12/train/3"
        doc = {"run": 1, "checkpoint": key}
        work = os.path.join(c.dir, "work")

        def ckpt_dir(name):
            d = os.path.join(c.dir, name)
            os.makedirs(d, exist_ok=True)
            return d

        def stopped(p, sig=signal.SIGTERM):
            """Waits for 'ready', then stops the group as the agent does."""
            line = p.stdout.readline()
            while line and "ready" not in line:
                line = p.stdout.readline()
            os.killpg(p.pid, sig)
            out, err = p.communicate(timeout=60)
            assert "AddressSanitizer" not in err, err
            return p.returncode, err

        # first attempt: nothing stored yet; preempted at step 1, it saves 2
        p = start_task(c, doc, [PY, prog, "run"], 301, work, ckpt=ckpt_dir("node-a"))
        rc, err = stopped(p)
        assert rc == 143, (rc, err)
        assert "checkpoint %s saved" % key in err, err
        stored = raw(c, "GET", key)[2]
        with tarfile.open(fileobj=io.BytesIO(stored)) as t:
            assert t.extractfile("./step").read() == b"2"

        # the next attempt on another node resumes from it
        p = start_task(c, doc, [PY, prog, "run"], 302, work, ckpt=ckpt_dir("node-b"))
        assert p.stdout.readline() == "resumed at 2\n"
        rc, err = stopped(p)
        assert rc == 143 and "restored into" in err and "saved" in err, err
        assert open(os.path.join(c.dir, "node-b", "step")).read() == "4"

        # restored and left as it was: not saved again
        rc, out, err = run_task(c, doc, [PY, prog, "same"], 303, work, ckpt=ckpt_dir("node-c"))
        assert rc == 0 and "resumed at 4" in out and "unchanged, not saved" in err, (out, err)

        # a rank other than 0 restores but never saves
        before = raw(c, "GET", key)[2]
        p = start_task(c, doc, [PY, prog, "run"], 304, work, rank=1, ckpt=ckpt_dir("node-d"))
        rc, err = stopped(p)
        assert rc == 143 and "saved" not in err and raw(c, "GET", key)[2] == before, err

        # a command that ignores SIGTERM is killed after 3/4 of the grace,
        # and what it wrote is still saved
        p = start_task(c, doc, [PY, prog, "stubborn"], 305, work, ckpt=ckpt_dir("node-c"),
                       grace_ms=2000)
        start = time.time()
        rc, err = stopped(p)
        took = time.time() - start
        assert rc == 128 + 9 and "3/4 of its 2000 ms grace" in err, (rc, err)
        assert 1.0 < took < 10, took
        assert "checkpoint %s saved" % key in err, err
        with tarfile.open(fileobj=io.BytesIO(raw(c, "GET", key)[2])) as t:
            assert t.extractfile("./step").read() == b"5"


def test_failures_are_one_line_and_never_a_crash():
    with cluster(agents=1, gpus=1, name="task-fail") as c:
        work = os.path.join(c.dir, "work")
        missing = "sha256/" + "ab" * 32
        cases = [
            ({"bundle": missing}, {}, "no object %s" % store_key("ab" * 32)),
            ({"run": "x"}, {}, "field 'run'"),
            ({"fetch": [{"ref": "inputs.x", "kind": "file", "keys": []}]}, {},
             "fetch[0].ref: 'inputs.x' is not tasks.TASK.outputs.NAME"),
            ({"checkpoint": "ckpt/1"}, {}, "ANVIL_CHECKPOINT_DIR is not set"),
            ({"fetch": [{"ref": "tasks.a.outputs.b", "kind": "file", "keys": [missing]}]},
             {"ANVIL_EXEC_TOKEN": "not-the-token"}, "answered 401"),
        ]
        for i, (doc, env, want) in enumerate(cases):
            rc, out, err = run_task(c, doc, ["true"], 400 + i, work, extra=env)
            lines = [x for x in err.splitlines() if x.startswith("anvil _task: ")]
            assert rc != 0 and len(lines) == 1 and want in lines[0], (doc, rc, err)
        # not JSON at all
        env = task_env(c, {}, 410, work)
        env["ANVIL_TASK"] = "{not json"
        p = subprocess.run([ANVIL, "_task", "--work-dir", work, "--", "true"], env=env,
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 1 and "anvil _task: ANVIL_TASK: not a JSON object" in p.stderr
        # the server away: said with its address, after a few tries
        rc, out, err = run_task(c, {"bundle": missing}, ["true"], 411, work,
                                server="http://127.0.0.1:1")
        assert rc == 1 and "the server at http://127.0.0.1:1" in err, err
        # a command that cannot run: 127, as a shell says it
        rc, out, err = run_task(c, {}, ["/nonexistent/prog"], 412, work)
        assert rc == 127 and "cannot run '/nonexistent/prog'" in err, err
        # a command's own status, and a signal's, come back
        assert run_task(c, {}, ["sh", "-c", "exit 7"], 413, work)[0] == 7
        assert run_task(c, {}, ["sh", "-c", "kill -KILL $$"], 414, work)[0] == 128 + 9
        assert c.api("GET", "/healthz")["status"] == "ok"


def test_an_agent_runs_a_task_rank_under_the_wrapper():
    """The real agent, given a desired entry with "task" (by the stand-in
    above, until the workflow engine makes such jobs): it runs the rank
    under `anvil _task` with ANVIL_SERVER, its work directory and the
    entry's grace; a finished rank publishes its outputs; a stopped one
    saves its checkpoint from the agent's ANVIL_CHECKPOINT_DIR."""
    with cluster(agents=0, gpus=1, name="task-agent") as c:
        doc, argv, bundle_hex = make_inputs(c)
        engine = Engine(c.url)
        work = os.path.join(c.dir, "node-x")
        os.makedirs(work)
        gpus = os.path.join(work, "gpus.json")
        sim_gpus(gpus, 1)
        log = open(os.path.join(c.logs, "node-x.log"), "ab")
        agent = subprocess.Popen([ANVIL, "agent", "--server", engine.url, "--join-token", "jt",
                                  "--name", "node-x", "--work-dir", work, "--gpus-file", gpus,
                                  "--wait-ms", "300"], stdout=log, stderr=log,
                                 env=dict(os.environ, ANVIL_HOME=c.home),
                                 start_new_session=True)
        try:
            def entry(attempt, command, task_doc, env=None):
                e = {"ANVIL_TASK": json.dumps(task_doc), "ANVIL_EXEC_TOKEN": c.token,
                     "ANVIL_ATTEMPT_ID": str(attempt), "NODE_RANK": "0",
                     "DATA": "{{ tasks.prep.outputs.shards }}"}
                e.update(env or {})
                return {"attempt_id": attempt, "job_id": attempt, "rank": 0, "gpus": [0],
                        "command": command, "grace_ms": 8000, "task": True, "env": e}

            engine.set_desired([entry(601, argv, doc)])
            rep = wait_for(lambda: (lambda r: r if r and r["state"] == "exited" else None)(
                engine.report(601)), timeout=60, what="the task rank's end")
            assert rep["exit_code"] == 0, (rep, c.log("node-x.log"))
            assert [p[0] for p in engine.posts] == ["/v1/workflows/runs/42/outputs"]
            assert engine.posts[0][2]["outputs"]["score"]["value"] == "0.93"
            assert os.path.isdir(os.path.join(work, "bundles", bundle_hex))
            with open(os.path.join(work, "logs", "601-0.log")) as f:
                seen = seen_of(f.read())
            assert seen["DATA"].endswith("/tasks/601/in/prep/shards"), seen

            # checkpointing: stopped (dropped from the desired set), it saves
            prog = os.path.join(c.dir, "ckpt.py")
            with open(prog, "w") as f:
                f.write(CKPT_PY)
            ck = {"run": 42, "checkpoint": "ckpt/602/t/0"}
            engine.set_desired([entry(602, [PY, prog, "run"], ck,
                                      {"ANVIL_CHECKPOINTING": "1"})])
            log602 = os.path.join(work, "logs", "602-0.log")
            wait_for(lambda: os.path.exists(log602) and "ready" in open(log602).read(),
                     timeout=60, what="the checkpointing rank to be ready")
            engine.set_desired([])
            rep = wait_for(lambda: (lambda r: r if r and r["state"] == "exited" else None)(
                engine.report(602)), timeout=60, what="the stopped rank's end")
            assert rep["exit_code"] == 143, rep
            status, _, stored = raw(c, "GET", "ckpt/602/t/0")
            assert status == 200, stored
            with tarfile.open(fileobj=io.BytesIO(stored)) as t:
                assert t.extractfile("./step").read() == b"2"
            with open(os.path.join(work, "logs", "602-0.err")) as f:
                assert "checkpoint ckpt/602/t/0 saved" in f.read()
        finally:
            agent.send_signal(signal.SIGTERM)
            agent.wait(15)
            engine.close()


# A workflow whose tasks hand each other a directory, a file and a value
# through the object store, with code from the bundle, and a checkpoint.
PIPELINE = """
name: handoff
tasks:
  prep:
    command: [python3, prep.py]
    outputs: {shards: dir, count: value}
  sweep:
    command: [python3, score.py, "{{ params.k }}"]
    map: {grid: {k: [1, 2]}}
    outputs: {score: file}
  train:
    command: >-
      python3 train.py {{ tasks.prep.outputs.shards }} {{ tasks.prep.outputs.count }}
      {{ tasks.sweep.outputs.score }}
    needs: [prep, sweep]
    checkpoint: true
    outputs: {model: file}
"""

PREP_PY = r'''
import os
out = os.environ["ANVIL_OUTPUT_DIR"]
os.makedirs(os.path.join(out, "shards"))
for n in ("a", "b"):
    open(os.path.join(out, "shards", n), "w").write("shard " + n)
open(os.path.join(out, "count"), "w").write("2\n")
'''

SCORE_PY = r'''
import os, sys
open(os.path.join(os.environ["ANVIL_OUTPUT_DIR"], "score"), "w").write("k=" + sys.argv[1])
'''

TRAIN_PY = r'''
import os, sys
shards, count, scores = sys.argv[1], sys.argv[2], sys.argv[3:]
seen = sorted(open(os.path.join(shards, n)).read() for n in os.listdir(shards))
got = [open(p).read() for p in scores]
ck = os.path.join(os.environ["ANVIL_CHECKPOINT_DIR"], "state")
open(ck, "w").write("trained")
open(os.path.join(os.environ["ANVIL_OUTPUT_DIR"], "model"), "w").write(
    "%s|%s|%s" % (",".join(seen), count, ",".join(sorted(got))))
'''


def test_a_workflow_hands_outputs_through_the_store():
    """Through everything: the engine's jobs, the agent, the wrapper, the
    object API and the engine's outputs route."""
    with cluster(agents=1, gpus=2, name="task-wf") as c:
        bundle = tar_of({"./": None, "prep.py": PREP_PY, "score.py": SCORE_PY,
                         "train.py": TRAIN_PY})
        key = put(c, bundle)
        path = os.path.join(c.dir, "handoff.yaml")
        with open(path, "w") as f:
            f.write(PIPELINE)
        p = c.cli("wf", "check", "--json", path, check=True)
        x = c.api("POST", "/v1/workflows", {"workflow": json.loads(p.stdout), "bundle": key})
        xid = (x.get("workflow") or x)["id"]

        def ended():
            w = c.api("GET", "/v1/workflows/%d" % xid)["workflow"]
            return w if w["state"] != "running" else None
        w = wait_for(ended, timeout=120, what="the workflow to end")
        runs = {r["label"]: r for r in w["run_list"]}
        assert w["state"] == "succeeded", json.dumps(runs, indent=1) + c.log("node-1.log")
        prep, train = runs["prep"]["outputs"], runs["train"]["outputs"]
        assert prep["count"] == {"kind": "value", "value": "2"}, prep
        assert prep["shards"]["kind"] == "dir", prep
        model = train["model"]
        status, _, got = raw(c, "GET", model["key"])
        assert status == 200 and sha(got) == model["sha256"], (status, got)
        assert got == b"shard a,shard b|2|k=1,k=2", got
        # the checkpoint left the node as the attempt ended
        ck = raw(c, "GET", "ckpt/%d/train/0" % xid)
        assert ck[0] == 200, ck
        with tarfile.open(fileobj=io.BytesIO(ck[2])) as t:
            assert t.extractfile("./state").read() == b"trained"
        # one node: the bundle was unpacked there once for the four runs
        node = os.path.join(c.dir, "node-1")
        assert os.listdir(os.path.join(node, "bundles")).count(sha(bundle)) == 1
        errs = "".join(open(os.path.join(node, "logs", n)).read()
                       for n in os.listdir(os.path.join(node, "logs")) if n.endswith(".err"))
        assert errs.count("unpacked into") == 1, errs


# ---- links in a bundle (docs/workflows.md, "Links in a bundle") ----

LINKS_WF = """
name: links
tasks:
  show:
    command: [cat, inside]
"""


def tar_members(members, fmt=tarfile.GNU_FORMAT):
    """A tar (bytes) of (name, type, link or data) as a hand would make it,
    whatever anvil's packer would refuse."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as t:
        for name, kind, value in members:
            info = tarfile.TarInfo(name)
            info.type, info.mode = kind, 0o644
            data = None
            if kind == tarfile.REGTYPE:
                data = value.encode()
                info.size = len(data)
            elif kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                info.linkname = value
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def test_a_bundle_with_a_link_outside_is_refused():
    """At pack: `anvil wf run` refuses a tree with a link outside it,
    naming the link and its target, and submits nothing; a link inside is
    kept and works on the node. At unpack: hand-made bundles with a link
    out (absolute, through .., a POSIX-format long one), a hard link out or
    a device fail the task with the reason and leave no bundle that a later
    task would use, also when the real agent runs the task."""
    with cluster(agents=1, gpus=1, name="task-links") as c:
        code = tempfile.mkdtemp(dir=c.dir, prefix="code-")
        with open(os.path.join(code, "real.txt"), "w") as f:
            f.write("from inside\n")
        os.symlink("real.txt", os.path.join(code, "inside"))
        outside = os.path.join(c.dir, "outside")
        os.makedirs(outside)
        os.symlink(outside, os.path.join(code, "out"))
        wf = os.path.join(c.dir, "links.yaml")
        with open(wf, "w") as f:
            f.write(LINKS_WF)
        p = c.cli("wf", "run", "--code", code, "--wait", wf, timeout=90)
        assert p.returncode != 0, p.stdout + p.stderr
        assert ("'out' is a symbolic link to '%s', which is absolute: outside the archive"
                % outside) in p.stderr, p.stderr
        assert "leave it out with .anvilignore" in p.stderr, p.stderr
        assert c.api("GET", "/v1/workflows")["workflows"] == []
        with open(os.path.join(code, ".anvilignore"), "w") as f:
            f.write("out\n")
        p = c.cli("wf", "run", "--code", code, "--wait", wf, timeout=90)
        assert p.returncode == 0, p.stdout + p.stderr
        p = c.cli("wf", "logs", "1", "show", check=True)
        assert "from inside" in p.stdout, p.stdout

        # hand-made bundles, unpacked by the wrapper as the agent runs it
        work = os.path.join(c.dir, "work")
        long_out = "x/" * 70 + "../" * 71 + "etc"  # past a header's 100 bytes
        cases = [
            ([("lnk", tarfile.SYMTYPE, "/tmp")],
             "'lnk' is a symbolic link to '/tmp', which is absolute: outside the archive"),
            ([("d", tarfile.DIRTYPE, None), ("d/up", tarfile.SYMTYPE, "../../home")],
             "'d/up' is a symbolic link to '../../home', which leads outside the archive"),
            ([("me", tarfile.SYMTYPE, "."), ("lnk", tarfile.SYMTYPE, "me/../secret")],
             "'lnk' is a symbolic link to 'me/../secret', which leads outside the archive"),
            ([("deep", tarfile.SYMTYPE, long_out)], "which leads outside the archive"),
            ([("pw", tarfile.LNKTYPE, "../../etc/passwd")],
             "'pw' is a hard link to '../../etc/passwd', outside the archive"),
            ([("tty", tarfile.CHRTYPE, None)],
             "'tty' is a character device: an archive holds only regular files, "
             "directories and symbolic links"),
        ]
        for i, (members, want) in enumerate(cases):
            for fmt in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
                bundle = tar_members([("ok.txt", tarfile.REGTYPE, "fine")] + members, fmt)
                key = put(c, bundle)
                rc, out, err = run_task(c, {"bundle": key}, ["cat", "ok.txt"],
                                        500 + 2 * i + (fmt == tarfile.PAX_FORMAT), work)
                lines = [x for x in err.splitlines() if x.startswith("anvil _task: ")]
                assert rc == 1 and out == "" and len(lines) == 1, (want, rc, out, err)
                assert "the code bundle %s: unpacking" % key in lines[0], lines
                assert want in lines[0], (want, lines)
                # nothing unpacked that a later task of this bundle would use
                left = os.listdir(os.path.join(work, "bundles"))
                assert sha(bundle) not in left and sha(bundle) + ".partial" not in left, left
                rc, out, err = run_task(c, {"bundle": key}, ["cat", "ok.txt"], 600 + i, work)
                assert rc == 1 and want in err, err  # refused again, not used half-made

        # the same through the real agent: the task fails with the reason
        bundle = tar_members([("inside", tarfile.REGTYPE, "x"),
                              ("lnk", tarfile.SYMTYPE, "/etc")])
        key = put(c, bundle)
        compiled = json.loads(c.cli("wf", "check", "--json", wf, check=True).stdout)
        x = c.api("POST", "/v1/workflows", {"workflow": compiled, "bundle": key})
        xid = (x.get("workflow") or x)["id"]

        def ended():
            w = c.api("GET", "/v1/workflows/%d" % xid)["workflow"]
            return w if w["state"] != "running" else None
        w = wait_for(ended, timeout=60, what="the workflow to end")
        assert w["state"] == "failed", w
        job = w["run_list"][0]["job_id"]
        p = c.cli("logs", str(job), check=True)
        assert "'lnk' is a symbolic link to '/etc', which is absolute" in p.stderr, \
            p.stdout + p.stderr
        node = os.path.join(c.dir, "node-1", "bundles")
        assert sha(bundle) not in os.listdir(node), os.listdir(node)


if __name__ == "__main__":
    run_tests([test_objects_by_content_and_by_name, test_task_with_bundle_inputs_and_outputs,
               test_bundle_is_unpacked_once_by_racing_ranks,
               test_the_agent_removes_bundles_nothing_used_for_its_keep,
               test_checkpoint_is_restored_and_saved_after_sigterm,
               test_failures_are_one_line_and_never_a_crash,
               test_an_agent_runs_a_task_rank_under_the_wrapper,
               test_a_workflow_hands_outputs_through_the_store,
               test_a_bundle_with_a_link_outside_is_refused])
