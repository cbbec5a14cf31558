"""A node's identity (docs/operations.md, "Node identity"): the join token admits
new nodes only, a node is re-admitted by an admin's `anvil node reset`, new nodes
may wait for approval, the join token expires and is rotated, agent URLs point at
the address a node registers from, and a node's syncs speak for its own ranks only.

Other addresses are played from 127.0.0.2 (all of 127/8 is this machine's)."""
import http.client
import http.server
import json
import os
import signal
import stat
import subprocess
import threading

from harness import ANVIL, ApiError, cluster, run_tests, scratch_dir, wait_for


class Listener:
    """An HTTP endpoint that counts what reaches it: the agent URL an
    impostor would give, to see that the server sends it nothing."""

    def __init__(self, host="127.0.0.1"):
        self.hits = []
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def _any(self):
                outer.hits.append((self.command, self.path))
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST = _any

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer((host, 0), H)
        self.url = "http://%s:%d" % (host, self.httpd.server_address[1])
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


def call(c, path, body, token, source="127.0.0.1"):
    """POST body to the server from the address source: (status, JSON)."""
    conn = http.client.HTTPConnection("127.0.0.1", c.port, timeout=30,
                                      source_address=(source, 0))
    try:
        conn.request("POST", path, json.dumps(body),
                     {"Authorization": "Bearer " + token, "Content-Type": "application/json"})
        r = conn.getresponse()
        text = r.read()
        return r.status, json.loads(text) if text else None
    finally:
        conn.close()


def facts(name, agent_url, gpus=8):
    return {"name": name, "address": "127.0.0.1", "agent_url": agent_url, "backend": "sim",
            "cpus": 8, "memory_bytes": 1 << 36, "protocol": 2,
            "gpus": [{"index": i, "uuid": "GPU-%s-%d" % (name, i), "name": "NVIDIA H200",
                      "memory_bytes": 150754820096} for i in range(gpus)]}


def message(body):
    return body["error"]["message"] if isinstance(body, dict) and "error" in body else str(body)


def register(c, name, agent_url, token=None, source="127.0.0.1", gpus=8):
    return call(c, "/v1/agent/register", facts(name, agent_url, gpus),
                c.join_token if token is None else token, source)


def sync(c, node_id, secret, source="127.0.0.1", **extra):
    return call(c, "/v1/agent/sync", dict({"node_id": node_id, "wait_ms": 0}, **extra), secret,
                source)


def running_job(c, env=None):
    jid = c.submit(["sh", "-c", "echo hello-from-the-rank; exec sleep 600"], gpus=1,
                   env=env or {})["id"]
    wait_for(lambda: c.job(jid)["state"] == "running", what="job %d running" % jid)
    wait_for(lambda: b"hello-from-the-rank" in c.api("GET", "/v1/jobs/%d/logs" % jid),
             what="the rank's output")
    return jid


def node(c, name):
    return c.api("GET", "/v1/nodes/%s" % name)["node"]


def test_the_join_token_does_not_take_a_live_node():
    """The probe's takeover: a join-token registration of node-1's name is
    refused (409, saying how to re-admit a node), node-1 keeps its secret, its
    agent URL and its running job, whose rank still reports (its agent stops
    it when the job is cancelled), and the impostor's URL hears nothing."""
    with cluster(agents=1, gpus=2, name="takeover") as c:
        jid = running_job(c)
        secret, url = c.node_secret(0), node(c, "node-1")["agent_url"]
        evil = Listener()
        try:
            st, body = register(c, "node-1", evil.url)
            assert st == 409, (st, body)
            assert "node node-1 is registered already" in message(body), body
            assert "anvil node reset node-1" in message(body), body
            st, body = sync(c, 1, secret)  # its own secret still works
            assert st == 200, (st, body)
            n = node(c, "node-1")
            assert n["agent_url"] == url and n["state"] == "ready", n
            assert c.job(jid)["state"] == "running"
            # the log read goes to the real agent, which still has the rank
            assert b"hello-from-the-rank" in c.api("GET", "/v1/jobs/%d/logs" % jid)
            c.api("POST", "/v1/jobs/%d/cancel" % jid)
            assert c.wait_job(jid)["state"] == "cancelled"  # its agent stopped it
            assert evil.hits == [], evil.hits
            events = [e["kind"] for e in c.api("GET", "/v1/events?limit=200")["events"]]
            assert "node.reregistered" not in events, events
        finally:
            evil.close()


def test_a_reset_node_is_admitted_once():
    """An agent that lost its identity file is refused (409) and says what to
    do, retrying; `anvil node reset` revokes the node's secret at once (a sync
    with it is a 401), its running job is lost, and the agent's next
    registration is accepted: once."""
    with cluster(agents=1, gpus=2, name="reset") as c:
        jid = running_job(c)
        old = c.node_secret(0)
        c.kill_agent(0)
        os.remove(os.path.join(c.work_dir(0), "node.json"))
        c.start_agent(0)
        wait_for(lambda: "anvil node reset node-1" in c.log("node-1.log"),
                 what="the agent saying what to do")
        assert c.agents[0].poll() is None, "the refused agent exited"
        p = c.cli("node", "reset", "node-1")
        assert p.returncode == 0, p.stderr
        assert "node node-1: reset" in p.stdout, p.stdout
        st, body = sync(c, 1, old)  # revoked (its agent may have registered again already)
        assert st == 401, (st, body)
        assert c.job(jid)["state"] == "lost", c.job(jid)
        # the agent retries by itself and gets in
        wait_for(lambda: node(c, "node-1")["state"] == "ready", timeout=60,
                 what="node-1 back after the reset")
        new = c.node_secret(0)
        assert new != old
        with open(os.path.join(c.logs, "node-1.log"), errors="replace") as f:
            said = f.read().count("is registered already and this agent holds no valid secret")
        assert said == 1, "the agent said what to do %d times, not once" % said
        assert sync(c, 1, new)[0] == 200
        # once: the join token does not take it again
        st, body = register(c, "node-1", "http://127.0.0.1:1")
        assert st == 409, (st, body)
        j2 = c.submit(["true"], gpus=1)["id"]
        assert c.wait_job(j2)["state"] == "succeeded"


def test_a_new_name_gets_no_other_jobs_environment():
    """What a job holding the join token could try: node-1's name is refused
    (before, its sync answer carried the running job's environment), and a
    registration under a new name gets its own, empty, desired set: no
    environment of the job that runs on node-1."""
    with cluster(agents=1, gpus=2, name="newname") as c:
        running_job(c, env={"HF_TOKEN": "hf_s3cr3t_value"})
        evil = Listener()
        try:
            st, body = register(c, "node-1", evil.url, gpus=8)
            assert st == 409, (st, body)
            st, body = register(c, "rogue", evil.url, gpus=8)
            assert st == 200, (st, body)
            st, answer = sync(c, body["node_id"], body["secret"])
            assert st == 200, (st, answer)
            assert answer["ranks"] == [], answer
            assert "hf_s3cr3t_value" not in json.dumps(answer), answer
        finally:
            evil.close()


def test_new_nodes_wait_for_approval():
    """With --approve-nodes a new node is shown awaiting approval, takes no work
    (a job that fits only there stays pending, its sync answer is empty) and
    refuses cordon; `anvil node approve` lets the job start."""
    with cluster(agents=0, gpus=2, name="approve", server_args=["--approve-nodes"]) as c:
        c.start_agent(0)
        wait_for(lambda: [n["state"] for n in c.nodes()] == ["awaiting_approval"],
                 what="node-1 awaiting approval")
        st, rogue = register(c, "rogue", "http://127.0.0.1:1", gpus=8)
        assert st == 200, (st, rogue)
        job = c.submit(["true"], gpus=1)
        assert job["state"] == "pending", job
        st, answer = sync(c, rogue["node_id"], rogue["secret"])
        assert st == 200 and answer["ranks"] == [], answer
        p = c.cli("nodes")
        assert "awaiting_approval" in p.stdout and "anvil node approve node-1" in p.stdout, \
            p.stdout
        try:
            c.api("POST", "/v1/nodes/node-1", {"state": "cordoned"})
            raise AssertionError("cordon of a node awaiting approval was accepted")
        except ApiError as e:
            assert e.status == 409 and "awaiting approval" in message(e.body), e.body
        assert c.job(job["id"])["state"] == "pending"
        p = c.cli("node", "approve", "node-1")
        assert p.returncode == 0 and "node node-1: ready" in p.stdout, (p.stdout, p.stderr)
        assert c.wait_job(job["id"])["state"] == "succeeded"
        assert node(c, "rogue")["state"] == "awaiting_approval"
        p = c.cli("node", "approve", "node-1")
        assert p.returncode == 1 and "not awaiting approval" in p.stderr, p.stderr


def test_an_expired_or_rotated_join_token_is_refused():
    """`anvil node token` shows the token and its expiry; a token rotated
    with a short life expires and is refused naming why; a rotated-away one
    is refused naming that; nodes that joined are not affected; the token and
    its expiry survive a restart, in 0600 files."""
    with cluster(agents=1, gpus=2, name="jointoken") as c:
        p = c.cli("node", "token")
        assert p.returncode == 0 and p.stdout.split("\n")[0] == c.join_token, p.stdout
        assert "expires at" in p.stdout, p.stdout  # 24h by default
        first = c.join_token
        p = c.cli("node", "token", "--rotate", "--ttl", "1s")
        assert p.returncode == 0, p.stderr
        short = p.stdout.split("\n")[0]
        assert short != first and len(short) == 64, p.stdout
        with open(os.path.join(c.state_dir, "join.token")) as f:
            assert f.read().strip() == short
        for name in ("join.token", "join.token.json"):
            mode = stat.S_IMODE(os.stat(os.path.join(c.state_dir, name)).st_mode)
            assert mode == 0o600, (name, oct(mode))
        st, body = register(c, "x1", "http://127.0.0.1:1", token=first)
        assert st == 401 and "was rotated at" in message(body), (st, body)
        wait_for(lambda: c.api("GET", "/v1/join-token")["expired"], what="the token's expiry")
        st, body = register(c, "x1", "http://127.0.0.1:1", token=short)
        assert st == 401 and "the join token expired at" in message(body), (st, body)
        assert "anvil node token --rotate" in message(body), body
        # node-1 syncs with its own secret: unaffected
        assert sync(c, 1, c.node_secret(0))[0] == 200
        jid = c.submit(["true"], gpus=1)["id"]
        assert c.wait_job(jid)["state"] == "succeeded"
        p = c.cli("node", "token", "--rotate")
        assert p.returncode == 0 and "expires at" in p.stdout, p.stdout
        fresh = p.stdout.split("\n")[0]
        st, body = register(c, "x1", "http://127.0.0.1:1", token=fresh)
        assert st == 200, (st, body)
        before = c.api("GET", "/v1/join-token")
        c.kill_server()
        c.start_server()
        assert c.api("GET", "/v1/join-token") == before
        st, body = register(c, "x2", "http://127.0.0.1:1", token=short)
        assert st == 401 and "rotated" in message(body), (st, body)


def test_agent_urls_point_at_the_registering_address():
    """A registration (or a sync's facts) whose agent_url is not the address it
    comes from is refused naming the field, the value and the reason; a node's
    sync from another address is refused (401), and its own secret registers
    it again from there; with --bind-node-address that takes a reset."""
    with cluster(agents=1, gpus=2, name="addr") as c:
        st, body = register(c, "x", "http://10.9.9.9:7071")
        assert st == 400, (st, body)
        m = message(body)
        assert "field 'agent_url': 'http://10.9.9.9:7071' points at 10.9.9.9, not at " \
               "127.0.0.1" in m, m
        st, body = register(c, "x", "http://127.0.0.1:1", source="127.0.0.2")
        assert st == 400 and "not at 127.0.0.2" in message(body), (st, body)
        assert [n["name"] for n in c.nodes()] == ["node-1"]
        # a sync's facts likewise; nothing applied
        secret = c.node_secret(0)
        url = node(c, "node-1")["agent_url"]
        st, body = sync(c, 1, secret, facts={"agent_url": "http://10.9.9.9:1"})
        assert st == 400 and "field 'facts.agent_url'" in message(body), (st, body)
        assert node(c, "node-1")["agent_url"] == url
        # a node moves: its sync from the new address is refused, its secret
        # registers it again from there (with an agent URL there)
        n = Listener("127.0.0.2")
        try:
            st, body = register(c, "y", n.url, source="127.0.0.2", gpus=1)
            assert st == 200, (st, body)
            yid, ysecret = body["node_id"], body["secret"]
            st, body = sync(c, yid, ysecret, source="127.0.0.3")
            assert st == 401 and "registered from 127.0.0.2" in message(body), (st, body)
            m3 = Listener("127.0.0.3")
            st, body = call(c, "/v1/agent/register", facts("y", m3.url, 1), ysecret,
                            "127.0.0.3")
            assert st == 200 and body["secret"] == ysecret, (st, body)
            assert sync(c, yid, ysecret, source="127.0.0.3")[0] == 200
            assert node(c, "y")["agent_url"] == m3.url
            assert node(c, "y")["registered_from"] == "127.0.0.3"
            m3.close()
        finally:
            n.close()
    with cluster(agents=1, gpus=2, name="bind", server_args=["--bind-node-address"]) as c:
        secret = c.node_secret(0)
        st, body = sync(c, 1, secret, source="127.0.0.2")
        assert st == 401 and "bound to the address it registered from" in message(body), body
        st, body = call(c, "/v1/agent/register", facts("node-1", "http://127.0.0.2:1", 1),
                        secret, "127.0.0.2")
        assert st == 401 and "anvil node reset node-1" in message(body), (st, body)
        assert sync(c, 1, secret)[0] == 200
        jid = c.submit(["true"], gpus=1)["id"]
        assert c.wait_job(jid)["state"] == "succeeded"


def test_a_forged_report_for_another_nodes_attempt_changes_nothing():
    """node-2's secret reports node-1's running rank as exited 0: nothing
    changes; the job runs on and ends when it is cancelled."""
    with cluster(agents=2, gpus=1, name="forged") as c:
        jid = running_job(c)
        a = c.job(jid)["attempts"][-1]
        on = a["ranks"][0]["node"]
        other = 1 if on == "node-1" else 0
        st, body = sync(c, node(c, "node-%d" % (other + 1))["id"], c.node_secret(other),
                        ranks=[{"attempt_id": a["id"], "rank": 0, "state": "exited",
                                "exit_code": 0, "signal": 0}])
        assert st == 200, (st, body)
        j = c.job(jid)
        assert j["state"] == "running", j
        assert j["attempts"][-1]["ranks"][0]["state"] == "running", j
        c.api("POST", "/v1/jobs/%d/cancel" % jid)
        assert c.wait_job(jid)["state"] == "cancelled"


def start_up(home, agents):
    """`anvil up` in home until it says ready: the process and what it printed."""
    p = subprocess.Popen([ANVIL, "up", "--port", "0", "--agents", str(agents),
                          "--gpus-per-agent", "1"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, env=dict(os.environ, ANVIL_HOME=home),
                         text=True)
    lines = []
    while True:
        line = p.stdout.readline()
        lines.append(line)
        if "anvil up: ready" in line:
            return p, "".join(lines)
        if not line and p.poll() is not None:
            raise AssertionError("anvil up did not get ready:\n" + "".join(lines))


def test_up_started_again_later_gets_a_valid_token():
    """`anvil up` started again after its join token expired (a day later), with
    more agents: it has the token rotated, and the new agent joins."""
    home = scratch_dir("anvil-up-token-")
    p, _ = start_up(home, 1)
    p.send_signal(signal.SIGINT)
    assert p.wait(30) == 0
    rec = os.path.join(home, "up", "server", "join.token.json")
    with open(rec) as f:
        r = json.load(f)
    r["expires_ms"] = r["created_ms"] + 1  # as if a day went by
    with open(rec, "w") as f:
        json.dump(r, f)
    p, out = start_up(home, 2)
    try:
        assert "the join token had expired; rotated it" in out, out
        nodes = subprocess.run([ANVIL, "nodes", "--json"], capture_output=True, text=True,
                               env=dict(os.environ, ANVIL_HOME=home), timeout=30)
        states = sorted((n["name"], n["state"]) for n in json.loads(nodes.stdout)["nodes"])
        assert states == [("node-1", "ready"), ("node-2", "ready")], states
    finally:
        p.send_signal(signal.SIGINT)
        assert p.wait(30) == 0


if __name__ == "__main__":
    run_tests([test_the_join_token_does_not_take_a_live_node,
               test_a_reset_node_is_admitted_once,
               test_a_new_name_gets_no_other_jobs_environment,
               test_new_nodes_wait_for_approval,
               test_an_expired_or_rotated_join_token_is_refused,
               test_agent_urls_point_at_the_registering_address,
               test_a_forged_report_for_another_nodes_attempt_changes_nothing,
               test_up_started_again_later_gets_a_valid_token])
