"""Lineage through real daemons: a DAG (a -> b through a file output, a ->
c through a value, b and c -> d) run and rerun from the cache; `anvil lineage EXEC/d` upstream as a tree,
`--downstream` from a, `--json` with each attempt's record (the secret
variable redacted), `--dot` as a digraph Graphviz reads, and the
OpenLineage export to a file and POSTed to a local receiver, whose events
are checked against the spec's required keys and each run's START then
COMPLETE/FAIL."""
import http.client
import http.server
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import uuid

from harness import ApiError, cluster, run_tests

WF = """
name: lin
inputs: {src: "s3://corpus/pages"}
tasks:
  a:
    command: >-
      echo a {{ inputs.src }}; echo data > $ANVIL_OUTPUT_DIR/f; echo 0.93 > $ANVIL_OUTPUT_DIR/v
    env: {HF_TOKEN: hf_supersecret, LR: "0.1"}
    outputs: {f: file, v: value}
    cache: true
  b:
    command: >-
      n=$(cat %(count)s 2>/dev/null || echo 0); echo $((n+1)) > %(count)s; test $n -ge 1 &&
      cat {{ tasks.a.outputs.f }}
    retries: {count: 1, backoff: 0s}
    cache: true
  c:
    command: echo c {{ tasks.a.outputs.v }}
    cache: true
  d:
    command: echo d
    needs: [b, c]
    cache: true
"""

SCHEMA_URL = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def graph(c, *args):
    return json.loads(c.cli("lineage", "--json", *args, check=True).stdout)


def node(g, label, exec_id=1):
    for n in g["nodes"]:
        if n["type"] == "run" and n["label"] == label and n["exec"] == exec_id:
            return n
    raise AssertionError("no run %d/%s in %r" % (exec_id, label, [n["id"] for n in g["nodes"]]))


def run_workflow(c, wf, xid):
    code = os.path.join(c.dir, "code")  # the tasks' code bundle: one file, the same each run
    os.makedirs(code, exist_ok=True)
    with open(os.path.join(code, "README"), "w") as f:
        f.write("lineage test\n")
    p = c.cli("wf", "run", "--code", code, "--wait", wf, timeout=90)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "workflow %d succeeded" % xid in p.stdout, p.stdout


def check_tree(c):
    tree = c.cli("lineage", "1/d", check=True).stdout
    line = r"1/%s \(lin\): succeeded, job \d+ on node-1, exit 0, code [0-9a-f]{12}"
    want = [r"^" + line % "d" + "$",
            r"^\|-- " + line % "b" + "$",
            r"^\|   `-- object sha256/[0-9a-f]{12} \(file, 5 B\)$",
            r"^\|       `-- " + line % "a" + "$",
            r"^\|           `-- input s3://corpus/pages$",
            r"^`-- " + line % "c" + "$",
            r"^    `-- " + line % "a" + r" \(above\)$"]
    got = tree.splitlines()
    assert len(got) == len(want), tree
    for w, g in zip(want, got):
        assert re.match(w, g), "%r does not match %r in\n%s" % (g, w, tree)
    down = c.cli("lineage", "--downstream", "1/a", check=True).stdout
    assert down.splitlines()[0].startswith("1/a (lin): succeeded"), down
    for label in ("b", "c", "d"):
        assert re.search(r"-- 1/%s \(lin\): succeeded" % label, down), down
    assert "-- object sha256/" in down and "input" not in down, down
    # depth: one edge upstream of d is b and c, not a
    shallow = c.cli("lineage", "--depth", "1", "1/d", check=True).stdout
    assert "1/b" in shallow and "1/a" not in shallow, shallow


def check_json(c):
    g = graph(c, "1/d")
    assert g["direction"] == "upstream" and g["starts"] == ["run:%d" % node(g, "d")["run"]]
    a = node(g, "a")
    att = a["attempts"][0]
    assert att["env"]["HF_TOKEN"] == "<redacted>", att["env"]
    assert att["env"]["LR"] == "0.1", att["env"]
    assert att["command"][:2] == ["/bin/sh", "-c"], att["command"]
    assert att["command"][2].startswith("echo a s3://corpus/pages;"), att["command"]
    assert att["nodes"] == ["node-1"] and att["exit_code"] == 0, att
    assert att["ranks"][0]["gpus"][0]["uuid"].startswith("GPU-sim-"), att["ranks"]
    assert att["start_ms"] and att["end_ms"] >= att["start_ms"], att
    assert a["inputs"]["workflow"] == {"src": "s3://corpus/pages"}, a["inputs"]
    assert "hf_supersecret" not in json.dumps(g)
    # a's outputs: a stored file with its hash and size, and a value
    f = a["outputs"]["f"]
    assert f["kind"] == "file" and f["size"] == 5 and f["key"] == "sha256/" + f["sha256"], f
    assert a["outputs"]["v"] == {"kind": "value", "value": "0.93"}, a["outputs"]
    # b read it: its command shows the object's key, not the template; it
    # failed once, then succeeded: two jobs, an attempt each
    b = node(g, "b")
    assert f["key"] in b["attempts"][-1]["command"][2], b["attempts"][-1]["command"]
    assert "{{" not in b["attempts"][-1]["command"][2], b["attempts"][-1]["command"]
    assert [o["key"] for o in b["objects"]] == [f["key"]], b["objects"]
    assert [x["state"] for x in b["attempts"]] == ["failed", "succeeded"], b["attempts"]
    assert b["attempts"][0]["exit_code"] == 1, b["attempts"][0]
    edges = {(e["from"], e["to"], e["kind"]) for e in g["edges"]}
    ra, rb, rc, obj = ("run:%d" % a["run"], "run:%d" % b["run"], "run:%d" % node(g, "c")["run"],
                       "object:" + f["key"])
    assert {(ra, obj, "produced"), (obj, rb, "consumed"), (ra, rc, "needs"),
            ("input:s3://corpus/pages", ra, "input")} <= edges, edges
    assert (ra, rb, "needs") not in edges, edges  # the object says it
    # from the object: who wrote it, and who read it
    up = c.cli("lineage", f["key"], check=True).stdout.splitlines()
    assert up[0] == "object sha256/%s (file, 5 B)" % f["sha256"][:12], up
    assert re.match(r"^`-- 1/a \(lin\): succeeded", up[1]), up
    down = c.cli("lineage", "--downstream", f["key"], check=True).stdout
    assert re.search(r"^`-- 1/b \(lin\): succeeded", down, re.M), down
    return g


def check_cache_links(c):
    tree = c.cli("lineage", "2/d", check=True).stdout
    first = tree.splitlines()
    assert re.match(r"^2/d \(lin\): cached, code [0-9a-f]{12}$", first[0]), tree
    assert re.match(r"^\|-- cached from 1/d \(lin\): succeeded, job \d+ on node-1, exit 0, "
                    r"code [0-9a-f]{12}$",
                    first[1]), tree
    # what 1/d came from, then 2/d's own needs, each cached from its origin
    assert re.search(r"^\|-- 2/b \(lin\): cached, code [0-9a-f]{12}$", tree, re.M), tree
    assert re.search(r"^\|       `-- cached from 1/a \(lin\): succeeded.* \(above\)$", tree,
                     re.M), tree
    down = c.cli("lineage", "--downstream", "1/a", check=True).stdout
    assert re.search(r"-- cached as 2/a \(lin\): cached, code [0-9a-f]{12}$", down, re.M), down
    g = graph(c, "--downstream", "1/a")
    assert node(g, "a", 2)["cached_from"] == node(g, "a")["run"]
    up = graph(c, "s3://corpus/pages", "--downstream")
    assert {n["exec"] for n in up["nodes"] if n["type"] == "run"} == {1, 2}, up["nodes"]


def check_dot(c):
    dot = c.cli("lineage", "--dot", "1/d", check=True).stdout
    assert dot.startswith("digraph lineage {") and dot.rstrip().endswith("}"), dot
    edges = re.findall(r'^  "([^"]+)" -> "([^"]+)" \[label="([a-z]+)"\];$', dot, re.M)
    assert len(edges) == 6, dot
    nodes = re.findall(r'^  "([^"]+)" \[shape=(box|note|ellipse), label="[^"]*"\];$', dot, re.M)
    assert len(nodes) == 6, dot
    assert {n for e in edges for n in e[:2]} <= {n[0] for n in nodes}, dot
    # Graphviz reads it back: the same nodes and edges
    assert shutil.which("dot"), "dot missing: scripts/deps.sh installs graphviz"
    p = subprocess.run(["dot", "-Tplain"], input=dot, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    plain = p.stdout.splitlines()
    assert len([x for x in plain if x.startswith("edge ")]) == 6, p.stdout
    assert len([x for x in plain if x.startswith("node ")]) == 6, p.stdout


def check_events(events, g):
    """The spec's required keys, and each run's START then its end."""
    assert events, events
    by_run = {}
    for e in events:
        for k in ("eventType", "eventTime", "run", "job", "producer", "schemaURL"):
            assert k in e, (k, e)
        assert e["schemaURL"] == SCHEMA_URL, e
        assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", e["eventTime"]), e
        assert uuid.UUID(e["run"]["runId"]).version == 5, e
        assert e["job"]["namespace"] == "anvil" and e["job"]["name"], e
        for d in e["inputs"] + e["outputs"]:
            assert d["namespace"] and d["name"], d
        by_run.setdefault(e["run"]["runId"], []).append(e)
    key = node(g, "a")["outputs"]["f"]["key"]
    xrun = str(uuid.uuid5(uuid.NAMESPACE_URL, "anvil://anvil/executions/1"))
    assert [e["eventType"] for e in by_run.pop(xrun)] == ["START", "COMPLETE"], events
    want = {}
    for label in ("a", "b", "c", "d"):
        for att in node(g, label)["attempts"]:
            rid = str(uuid.uuid5(uuid.NAMESPACE_URL,
                                 "anvil://anvil/executions/1/attempts/%d" % att["attempt"]))
            end = "COMPLETE" if att["state"] == "succeeded" else "FAIL"
            want[rid] = ("lin." + label, ["START", end])
    assert set(by_run) == set(want), (sorted(by_run), sorted(want))
    for rid, evs in by_run.items():
        assert [e["eventType"] for e in evs] == want[rid][1], evs
        assert all(e["job"]["name"] == want[rid][0] for e in evs), evs
        assert all(e["run"]["facets"]["parent"]["run"]["runId"] == xrun for e in evs), evs
        if want[rid][0] == "lin.a":  # given the URI, wrote the file
            assert [d["name"] for d in evs[0]["inputs"]] == ["s3://corpus/pages"], evs[0]
            assert evs[0]["outputs"] == [], evs[0]
            out = evs[1]["outputs"]
            assert [d["name"] for d in out] == [key], out
            assert out[0]["facets"]["version"]["datasetVersion"] == key[7:], out
            assert out[0]["outputFacets"]["outputStatistics"]["size"] == 5, out
        if want[rid][0] == "lin.b":  # read it
            assert [d["name"] for d in evs[0]["inputs"]] == [key], evs[0]
    assert "hf_supersecret" not in json.dumps(events)


class Receiver(http.server.BaseHTTPRequestHandler):
    """Records each POST's path and JSON body; answers 201, or refuses the
    fail_at'th with 400 (a server attribute)."""

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.got.append((self.path, json.loads(body), self.headers.get("Authorization")))
        bad = len(self.server.got) == self.server.fail_at
        self.send_response(400 if bad else 201)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error": "bad event"}' if bad else b"{}")

    def log_message(self, *args):
        pass


def receiver(fail_at=0):
    srv = http.server.HTTPServer(("127.0.0.1", 0), Receiver)
    srv.got, srv.fail_at = [], fail_at
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def check_export(c, g, d):
    out = os.path.join(d, "events.jsonl")
    p = c.cli("lineage", "--export", "1", "--file", out, check=True)
    with open(out) as f:
        events = [json.loads(x) for x in f]
    assert "%d event(s) written to %s" % (len(events), out) in p.stdout, p.stdout
    check_events(events, g)
    # the same to stdout
    p = c.cli("lineage", "--export", "1", check=True)
    assert [json.loads(x) for x in p.stdout.splitlines()] == events
    # POSTed, one by one, with the API key as a bearer token
    srv = receiver()
    try:
        url = "http://127.0.0.1:%d/api/v1/lineage" % srv.server_address[1]
        p = c.cli("lineage", "--export", "1", "--url", url, check=True,
                  env={"OPENLINEAGE_API_KEY": "k123"})
        assert "%d event(s) sent to %s" % (len(events), url) in p.stdout, p.stdout
        assert [x[0] for x in srv.got] == ["/api/v1/lineage"] * len(events)
        assert [x[1] for x in srv.got] == events
        assert {x[2] for x in srv.got} == {"Bearer k123"}
    finally:
        srv.shutdown()
    # a refused event stops the export, named
    srv = receiver(fail_at=3)
    try:
        url = "http://127.0.0.1:%d/api/v1/lineage" % srv.server_address[1]
        p = c.cli("lineage", "--export", "1", "--url", url)
        assert p.returncode == 1, p.stdout + p.stderr
        assert "answered 400 to event 3" in p.stderr and "bad event" in p.stderr, p.stderr
        assert len(srv.got) == 3
    finally:
        srv.shutdown()
    p = c.cli("lineage", "--export", "1", "--url", "http://127.0.0.1:1/x")
    assert p.returncode == 3 and "cannot send event 1" in p.stderr, p.stderr


def check_errors(c):
    p = c.cli("lineage", "1/zz")
    assert p.returncode == 1 and "query 'task': workflow 1 (lin) has no task 'zz'" in p.stderr, \
        p.stderr
    p = c.cli("lineage", "sha256/" + "0" * 64)
    assert p.returncode == 1 and "no workflow run wrote, read or was given" in p.stderr, p.stderr
    for args in (["nonsense"], ["1"], ["--export", "1/d"], ["--file", "x", "1/d"],
                 ["--json", "--dot", "1/d"], ["--export", "1", "--url", "ftp://x"]):
        p = c.cli("lineage", *args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
    try:
        c.api("GET", "/v1/lineage?exec=1&direction=sideways")
        raise AssertionError("accepted")
    except ApiError as e:
        assert e.status == 400, e
        assert e.body["error"]["message"] == \
            "query 'direction': 'sideways' is not upstream, downstream or both", e.body
    try:
        c.api("GET", "/v1/lineage?exec=9")
        raise AssertionError("found")
    except ApiError as e:
        assert e.status == 404, e
    # bytes that are not UTF-8, quoted back in the error
    for path in ("/v1/lineage?object=%ff%c0", "/v1/lineage?uri=s3://%ff",
                 "/v1/lineage?exec=1&task=%ff"):
        conn = http.client.HTTPConnection("127.0.0.1", c.port, timeout=10)
        conn.request("GET", path, headers={"Authorization": "Bearer " + c.token})
        r = conn.getresponse()
        body = json.loads(r.read())
        conn.close()
        assert r.status in (400, 404) and "query '" in body["error"]["message"], (path, body)


def test_lineage_of_a_dag_its_cache_links_and_its_openlineage_export():
    with cluster(agents=1, gpus=2, name="lineage") as c:
        d = tempfile.mkdtemp(dir=c.dir)
        wf = write(os.path.join(d, "lin.yaml"), WF % {"count": os.path.join(d, "count")})
        run_workflow(c, wf, 1)
        check_tree(c)
        g = check_json(c)
        check_dot(c)
        check_export(c, g, d)
        run_workflow(c, wf, 2)  # every task from the cache
        check_cache_links(c)
        check_errors(c)


if __name__ == "__main__":
    run_tests([test_lineage_of_a_dag_its_cache_links_and_its_openlineage_export])
