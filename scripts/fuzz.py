#!/usr/bin/python3
"""Longer fuzz campaigns than `make check` runs, against the real daemons.

    ANVIL_BIN=build/asan/anvil /usr/bin/python3 scripts/fuzz.py post    [--seed N] [--count N]
    ANVIL_BIN=build/asan/anvil /usr/bin/python3 scripts/fuzz.py get     [--seed N] [--count N]
    ANVIL_BIN=build/asan/anvil /usr/bin/python3 scripts/fuzz.py simfile [--seed N] [--count N]
    ANVIL_BIN=build/asan/anvil /usr/bin/python3 scripts/fuzz.py agentfiles [--seed N] [--count N]

post:    mutated JSON bodies, any method, to the server's routes with every kind of token
         (registrations and syncs, node reset and approval, the join token's rotation
         included), some with an Idempotency-Key (valid ones from a small set, so that keys
         are repeated with the same and with other bodies, and malformed ones); no answer
         may be a 5xx and no daemon may die, and a create that succeeded with a key, sent
         again at once, must be answered the same, marked replayed.
get:     GET with mutated paths and query strings to the server and to the agent.
simfile: mutated simulated-GPU files given to `anvil agent --gpus-file`: each must be
         rejected with exit status 1 or 2 (or be accepted), never crash or trip a sanitizer.
agentfiles: the agent is SIGKILLed while a rank runs, its identity file or rank journal is
         mutated, and it is started again: it must start (ignoring what it cannot read) or
         exit 1 or 2, never crash or trip a sanitizer.

tests/integration/test_bad_input.py runs a short fixed-seed campaign of the first kind in
`make check`; this is the long one, by hand, with the ASan build. Exits 1 on a finding;
FUZZ_TRACE=1 prints each GET before it is sent, to find the one that killed a daemon.
"""
import argparse
import glob
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
from harness import ANVIL, cluster, wait_for  # noqa: E402

SPLICE = [b'"', b'{', b'}', b'[', b']', b'-1', b'1e999', b'\\u0000', b'null', b'""', b'[]',
          b'{}', b'9223372036854775807', b'-9223372036854775808', b'0.5', b'true', b',']


def mutate(rnd, seed, most=8):
    body = bytearray(seed)
    for _ in range(rnd.randint(1, most)):
        op, pos = rnd.randint(0, 2), rnd.randint(0, len(body))
        if op == 0:
            body[pos:pos] = bytes([rnd.randint(0, 255)])
        elif op == 1 and len(body) > 1:
            del body[pos:pos + rnd.randint(1, 6)]
        else:
            body[pos:pos] = rnd.choice(SPLICE)
    return bytes(body)


def alive(c):
    assert c.api("GET", "/healthz")["status"] == "ok"
    assert c.server.poll() is None, "the server died"
    for p in c.agents.values():
        assert p.poll() is None, "an agent died"


def request(host, port, method, path, body, token, key=None):
    """(status, answer body, replayed) of one request; status 0 when the client would
    not send it."""
    conn = http.client.HTTPConnection(host, port, timeout=10)
    headers = {"Authorization": "Bearer " + token}
    if key is not None:
        headers["Idempotency-Key"] = key
    try:
        conn.request(method, path, body, headers)
        r = conn.getresponse()
        return r.status, r.read(), r.getheader("Idempotent-Replayed") == "true"
    except (http.client.InvalidURL, ValueError):
        return 0, b"", False  # the client would not send it
    finally:
        conn.close()


# Idempotency-Keys: a few valid ones, used again and again, and malformed ones
# (empty, too long, blank, control characters, not ASCII).
VALID_KEYS = ["k1", "k2", "k3", "x" * 255]
BAD_KEYS = ["", "y" * 256, "a b", "\x01ctl", "caf\xe9", "\t"]
# The routes that take a key (docs/api.md, "Idempotency-Key").
KEYED = {("POST", "/v1/jobs"), ("POST", "/v1/workflows"), ("POST", "/v1/workflows/1/recover"),
         ("POST", "/v1/fleet/apply"), ("POST", "/v1/fleet/rollback")}


def pick_key(rnd):
    r = rnd.random()
    return None if r < 0.5 else rnd.choice(VALID_KEYS) if r < 0.85 else rnd.choice(BAD_KEYS)


def fuzz_post(rnd, count):
    paths = ["/v1/jobs", "/v1/agent/sync", "/v1/agent/register", "/v1/queues",
             "/v1/queues/default", "/v1/jobs/1/cancel", "/v1/jobs/1/why", "/v1/nodes/node-1",
             "/v1/nodes/node-1/check", "/v1/nodes/node-1/faults", "/v1/nodes/node-1/state",
             "/v1/nodes/node-1/labels", "/v1/teams", "/v1/jobs/1/attach", "/v1/jobs/1/exec",
             "/v1/fleet/plan", "/v1/fleet/apply", "/v1/fleet/rollback", "/v1/fleet/stop",
             "/v1/nodes/node-1/reset", "/v1/nodes/node-1/approve", "/v1/nodes/n/approve",
             "/v1/join-token", "/v1/join-token/rotate", "/v1/join-token/x",
             "/v1/workflows", "/v1/workflows/1/recover"]
    seeds = [b'{"command":["true"],"after":[{"job":1,"when":"any"}],"array":{"indices":[0,3],'
             b'"max_running":1},"cwd":"/tmp","env":{"A":"1"},"exported":["A"]}',
             b'{"command":["true"],"nodes":2,"head":"sleep 1","worker":"sleep 1",'
             b'"head_timeout_ms":1000,"session":true}',
             b'{"name":"t","weight":2}',
             b'{"name":"q","idle_timeout_ms":60000,"default_time_limit_ms":1000}',
             b'{"command":["true"],"gpus":1,"nodes":1,"queue":"default","team":"t",'
             b'"time_limit_ms":1000,"selectors":{"a":"b"},"env":{"X":"1"}}',
             b'{"command":["true"],"gpus":0,"nodes":2,"pool":"p","selectors":{"a":"b"},'
             b'"gpu_type":"h200","min_gpu_memory_bytes":0}',
             b'{"node_id":1,"ranks":[{"attempt_id":1,"rank":0,"state":"running","pid":5}]}',
             b'{"name":"n","gpus":[{"index":0,"uuid":"u","name":"H","memory_mib":1}]}',
             b'{"node_id":1,"health":{"gpus":[{"index":0,"state":"quarantined","reason":"r"}],'
             b'"findings":[{"seq":5,"gpu":0,"scope":"job","code":"xid-13","reason":"r"}],'
             b'"node":null}}',
             b'{"gpu":0,"kind":"xid","xid":13}', b'{"state":"draining","reason":"r"}',
             b'{"name":"q","priority":5,"weight":2,"borrowing":true,"quotas":{"a":2}}',
             b'{"spec":{"name":"f","pools":{"p":null},"profiles":{"h":{"gpu":{"model":"H",'
             b'"count":2},"driver":"1.2","sysctl":{"vm.x":1}}},"groups":{"g":{"pool":"p",'
             b'"profile":"h","nodes":"node-[1-2]","topology":{"block":"b"}}},"queues":'
             b'{"q":{"quotas":{"t":2}}},"teams":{"t":{"weight":2}},"upgrade":'
             b'{"max_unavailable":1}},"who":"w"}',
             b'{"plan":{"spec":{"name":"f"},"fingerprint":"00","digest":{"revision":0,'
             b'"nodes":{},"queues":{},"teams":{}}},"revision":1}',
             b'{"node_id":1,"profile_status":{"hash":"ab","state":"failed","time_ms":1,'
             b'"steps":[{"name":"s","status":"failed","detail":"d"}]}}',
             # registrations (a new name, and node-1's: the join token is refused for it),
             # agent URLs that point elsewhere, a sync's facts, a rotation's TTL
             b'{"name":"n","address":"127.0.0.1","agent_url":"http://127.0.0.1:1","cpus":2,'
             b'"protocol":2,"gpus":[{"index":0,"uuid":"u","name":"H","memory_bytes":1}]}',
             b'{"name":"node-1","agent_url":"http://[::1]:7071/x","hostname":"h"}',
             b'{"name":"r","agent_url":"http://localhost:7071","rdma":[]}',
             b'{"name":"r","agent_url":"https://user@10.0.0.1:1"}',
             b'{"node_id":1,"facts":{"agent_url":"http://127.0.0.1:9","name":"node-1"}}',
             b'{"ttl_ms":3600000}', b'{"ttl_ms":0}', b'{}',
             b'{"workflow":{"name":"w","tasks":[{"name":"a","command":["true"],'
             b'"retries":1}]},"no_cache":true}']
    with cluster(agents=1, gpus=2, name="fuzzpost") as c:
        secret = c.node_secret(0)
        for _ in range(count):
            # rotations (and resets of node-1) happen: the current token each time
            with open(os.path.join(c.state_dir, "join.token")) as f:
                tokens = [c.token, f.read().strip(), c.join_token, secret, "x"]
            body = mutate(rnd, rnd.choice(seeds))
            method = rnd.choice(["POST", "POST", "POST", "PUT", "DELETE", "GET", "PATCH"])
            path = rnd.choice(paths)
            token, key = rnd.choice(tokens), pick_key(rnd)
            status, answer, _ = request("127.0.0.1", c.port, method, path, body, token, key)
            if status >= 500:
                raise AssertionError("%d for %s %s %r (key %r)" % (status, method, path, body,
                                                                  key))
            if (method, path) in KEYED and key in VALID_KEYS and 200 <= status < 300:
                again = request("127.0.0.1", c.port, method, path, body, token, key)
                if again != (status, answer, True):
                    raise AssertionError("%s %s %r with key %r: %r, then %r" % (
                        method, path, body, key, (status, answer), again))
        alive(c)


def fuzz_get(rnd, count):
    server = ["/v1/jobs", "/v1/jobs/1", "/v1/jobs/1/why", "/v1/jobs/1/logs", "/v1/events",
              "/v1/nodes", "/v1/nodes/node-1", "/v1/queues", "/metrics", "/v1/jobs/-1",
              "/v1/jobs/99999999999999999999", "/v1/jobs/0x10/why", "/v1/nodes/%00"]
    agent_paths = ["/v1/logs", "/v1/gpus", "/metrics"]
    params = ["limit", "offset", "state", "rank", "attempt", "follow", "since", "tail", "queue",
              "team", "all", "bytes"]
    vals = ["-1", "0", "1", "99999999999999999999", "abc", "", "%00", "%ff", "1e9", "true",
            "..", "%2e%2e%2f", "9223372036854775807"]
    with cluster(agents=1, gpus=2, name="fuzzget") as c:
        c.wait_job(c.submit(["sh", "-c", "echo hello"], gpus=1)["id"])
        tokens = [c.token, c.node_secret(0), "x"]
        agent = urllib.parse.urlsplit(c.api("GET", "/v1/nodes/node-1")["node"]["agent_url"])
        for _ in range(count):
            to_agent = rnd.random() < 0.3
            host, port = (agent.hostname, agent.port) if to_agent else ("127.0.0.1", c.port)
            path = rnd.choice(agent_paths if to_agent else server)
            if rnd.random() < 0.3:
                path += rnd.choice(["/", "//", "/x", "%", "%zz", "/../..", "?"])
            query = "&".join("%s=%s" % (rnd.choice(params), rnd.choice(vals))
                             for _ in range(rnd.randint(0, 4)))
            if query:
                path += "?" + query
            if os.environ.get("FUZZ_TRACE"):
                print("GET", host, port, path, flush=True)
            status = request(host, port, "GET", path, None, rnd.choice(tokens))
            if status >= 500:
                raise AssertionError("%d for GET %s:%d%s" % (status, host, port, path))
        alive(c)


def fuzz_simfile(rnd, count):
    gpus = [{"index": i, "uuid": "GPU-%d" % i, "name": "NVIDIA H200",
             "memory_bytes": 150754820096, "pci_bus_id": "00000000:1%d:00.0" % i, "minor": i,
             "numa_node": 0, "cpu_affinity": "0-55,112-167", "mig_mode": False,
             "persistence_mode": True, "nvlink_peers": [1 - i], "pcie_switch": 0}
            for i in range(2)]
    seed = json.dumps({"driver_version": "sim-550.54.15", "cuda_version": "12.4",
                       "gpus": gpus}).encode()
    outcomes = {}
    with tempfile.TemporaryDirectory(prefix="anvil-fuzz-") as d:
        path = os.path.join(d, "gpus.json")
        for _ in range(count):
            body = mutate(rnd, seed, most=5)
            with open(path, "wb") as f:
                f.write(body)
            # accepted files leave the agent retrying a server that is not there
            p = subprocess.run(["timeout", "-s", "KILL", "1.5", ANVIL, "agent", "--server",
                                "http://127.0.0.1:1", "--join-token", "x", "--name", "n",
                                "--gpus-file", path, "--work-dir", os.path.join(d, "work")],
                               capture_output=True, env=dict(os.environ, ANVIL_HOME=d))
            outcomes[p.returncode] = outcomes.get(p.returncode, 0) + 1
            if p.returncode not in (1, 2, -9, 137) or b"Sanitizer" in p.stderr or \
                    b"runtime error" in p.stderr:
                raise AssertionError("status %d for %r: %s" % (p.returncode, body,
                                                             p.stderr[-800:].decode("replace")))
    print("exit statuses: %s" % outcomes)


def fuzz_agentfiles(rnd, count):
    with cluster(agents=1, gpus=2, name="fuzzfiles") as c:
        c.wait_job(c.submit(["sh", "-c", "echo hi"], gpus=1)["id"])
        j = c.submit(["sleep", "3600"], gpus=1)["id"]
        wait_for(lambda: c.job(j)["state"] == "running", what="a running rank")
        work = os.path.join(c.dir, "node-1")
        files = [os.path.join(work, "node.json")] + glob.glob(os.path.join(work, "ranks-*.jsonl"))
        orig = {}
        for f in files:
            with open(f, "rb") as fh:
                orig[f] = fh.read()
        log = os.path.join(c.logs, "node-1.log")
        for _ in range(count):
            c.agents[0].send_signal(signal.SIGKILL)
            c.agents[0].wait(10)
            f = rnd.choice(files)
            body = mutate(rnd, orig[f], most=5)
            with open(f, "wb") as fh:
                fh.write(body)
            p = c.start_agent(0)
            try:
                rc = p.wait(2.0)
            except subprocess.TimeoutExpired:
                rc = None  # still running: it started
            with open(log, "rb") as fh:
                tail = fh.read()[-4000:]
            if (rc is not None and rc not in (1, 2)) or b"Sanitizer" in tail or \
                    b"runtime error" in tail:
                raise AssertionError("agent status %r after %s became %r: %s" % (
                    rc, os.path.basename(f), body[:300], tail[-800:].decode("replace")))
            for g in files:
                with open(g, "wb") as fh:
                    fh.write(orig[g])
        if c.agents[0].poll() is not None:
            c.start_agent(0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kind", choices=["post", "get", "simfile", "agentfiles"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--count", type=int, default=2000)
    a = ap.parse_args()
    rnd = random.Random(a.seed)
    try:
        {"post": fuzz_post, "get": fuzz_get, "simfile": fuzz_simfile,
         "agentfiles": fuzz_agentfiles}[a.kind](rnd, a.count)
    except AssertionError as e:
        print("FINDING (%s, seed %d): %s" % (a.kind, a.seed, e))
        return 1
    print("%s: %d cases, seed %d, nothing found" % (a.kind, a.count, a.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
