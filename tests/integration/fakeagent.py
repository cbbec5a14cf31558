"""A node's agent played by the test, through the real agent protocol
(docs/api.md, "Agent protocol"): it registers with the cluster's join token,
long-polls /v1/agent/sync with its node secret, reports the ranks it is told
to run as running (and as ended by SIGTERM once they are gone), serves the
node check (POST /v1/check) that the server runs to validate a profile, and
reports its profile_status as the test tells it to converge (and again when
the server asks, POST /v1/profile/converge): what a real agent converging
with src/agent/converge.c sends, without touching the machine. Standard library only."""
import http.server
import json
import threading
import time
import urllib.error
import urllib.request


class FakeAgent:
    """mode: what it does with a new profile: "converge" (reports converging,
    then converged), "fail" (reports a failed step), "hold" (reports
    converging and stays so), "ignore" (reports nothing, as an agent that
    knows no profiles). check_ok: what the node check answers."""

    def __init__(self, url, join_token, name, gpus=4, model="NVIDIA H200", driver="550.1",
                 mode="converge"):
        self.url, self.join_token, self.name = url, join_token, name
        self.gpus, self.model, self.driver = gpus, model, driver
        self.mode, self.check_ok = mode, True
        self.fail_detail = "E: unable to locate package nvidia-driver-560"
        self.lock = threading.Lock()
        self.running = set()  # (attempt_id, rank)
        self.ended = []  # reports not yet answered 200
        self.profile = None  # the last profile the server sent
        self.status = None  # what it says of it
        self.status_sent = None
        self.checks = []  # the expectations of every check asked
        self.converges = []  # every request to converge again
        self.generation = 0
        self.stopping = False
        self._serve()
        self._register()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    # ---- the node check ----
    def _serve(self):
        agent = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"] or 0)))
                if self.path == "/v1/profile/converge":  # run the steps again
                    agent.converges.append(body)
                    with agent.lock:
                        ok = agent.profile and body.get("hash") == agent.profile["hash"]
                        if ok:
                            agent.status = agent._converge(agent.profile)
                    self.send_response(202 if ok else 409)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                agent.checks.append(body)
                ok = agent.check_ok and body.get("driver_version", agent.driver) == agent.driver
                out = json.dumps({"ok": ok, "backend": "sim",
                                  "summary": "2 checks, %d failed" % (0 if ok else 1),
                                  "checks": [{"name": "gpu_count", "ok": True, "detail": "ok"},
                                             {"name": "driver_version", "ok": ok,
                                              "detail": "%s expected %s" % (
                                                  agent.driver,
                                                  body.get("driver_version", "-"))}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def facts(self):
        return {"name": self.name, "address": "127.0.0.1", "backend": "sim", "cpus": 2,
                "memory_bytes": 1 << 34,
                "agent_url": "http://127.0.0.1:%d" % self.httpd.server_address[1],
                "driver_version": self.driver, "cuda_version": "12.4",
                "gpus": [{"index": i, "uuid": "GPU-%s-%d" % (self.name, i), "name": self.model,
                          "memory_bytes": 150754820096} for i in range(self.gpus)]}

    def _post(self, path, body, token, timeout=30):
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     method="POST")
        req.add_header("Authorization", "Bearer " + token)
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def _register(self):
        got = self._post("/v1/agent/register", self.facts(), self.join_token)
        self.node_id, self.secret = got["node_id"], got["secret"]

    # ---- the sync loop ----
    def _converge(self, profile):
        """What it says of a profile it was just sent."""
        steps = [{"name": "driver %s" % (profile["spec"].get("driver") or "any"),
                  "status": "ok"},
                 {"name": "sysctl", "status": "skipped"}]
        state = "converging"
        if self.mode == "fail":
            steps[1] = {"name": "package nvidia-driver", "status": "failed",
                        "detail": self.fail_detail}
            state = "failed"
        elif self.mode == "converge":
            steps[1]["status"] = "changed"
            state = "converged"
            self.driver = profile["spec"].get("driver") or self.driver
        return {"hash": profile["hash"], "state": state, "steps": steps,
                "time_ms": int(time.time() * 1000)}

    def set_status(self, state, detail=None):
        """Reports state for the current profile from the next sync on."""
        with self.lock:
            s = self._converge(self.profile)
            s["state"] = state
            if detail:
                s["steps"][1] = {"name": "sysctl vm.swappiness", "status": "failed",
                                 "detail": detail}
            self.status = s

    def _request(self):
        with self.lock:
            ranks = [{"attempt_id": a, "rank": r, "state": "running", "pid": 1000 + r}
                     for a, r in sorted(self.running)] + list(self.ended)
            body = {"node_id": self.node_id, "generation": self.generation, "wait_ms": 1000,
                    "ranks": ranks}
            facts = self.facts()
            if facts != getattr(self, "facts_sent", None):  # while they changed
                body["facts"] = facts
            if self.status is not None and self.status != self.status_sent:
                body["profile_status"] = self.status
            return body

    def _answered(self, body, answer):
        with self.lock:
            self.ended = [e for e in self.ended if e not in body["ranks"]]
            if "profile_status" in body:
                self.status_sent = body["profile_status"]
            if "facts" in body:
                self.facts_sent = body["facts"]
            want = {(d["attempt_id"], d["rank"]) for d in answer["ranks"]}
            for a, r in self.running - want:
                self.ended.append({"attempt_id": a, "rank": r, "state": "exited",
                                   "exit_code": 0, "signal": 15})
            self.running = want
            self.generation = answer["generation"]
            p = answer.get("profile")
            if p and (not self.profile or p["hash"] != self.profile["hash"]):
                self.profile = p
                if self.mode != "ignore":
                    self.status = self._converge(p)
            elif not p:
                self.profile = None

    def _loop(self):
        while not self.stopping:
            body = self._request()
            try:
                answer = self._post("/v1/agent/sync", body, self.secret, timeout=10)
            except (OSError, urllib.error.URLError, ValueError):
                time.sleep(0.2)  # the server is down or restarting: retry
                continue
            self._answered(body, answer)

    def stop(self):
        self.stopping = True
        self.thread.join(15)
        self.httpd.shutdown()
