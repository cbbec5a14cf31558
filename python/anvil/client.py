"""A client for anvil's HTTP API (docs/api.md): jobs and workflow executions.

    from anvil import Client
    c = Client()                                   # as the CLI finds the server
    job = c.submit(["python3", "train.py"], gpus=8, nodes=2)
    c.wait_job(job["id"])
    x = c.run_workflow(pipeline, epochs=5)         # a @workflow, or a compiled dict, with the
                                                   # current directory as its code bundle
    x = c.wait(x["id"])                            # the execution, final
    for run in x["run_list"]: print(run["label"], run["state"], run.get("outputs"))

The server and token come from the arguments, else ANVIL_SERVER and ANVIL_TOKEN, else the
client file the CLI uses ($ANVIL_HOME/client.json or ~/.anvil/client.json). Standard library
only.

Creates (submit, run_workflow, recover) are safe to retry: each carries an Idempotency-Key
made for it, and when its answer is lost (the server restarts, a proxy answers 502, 503 or
504) it is sent again with the same key for up to retry_for seconds (60 by default), so the
server makes it once (docs/api.md, "Idempotency-Key").

A workflow's code bundle is packed and stored by the anvil binary ($ANVIL_BIN, else `anvil` on
PATH: `anvil wf bundle`), not here: the bundle is then the one `anvil wf run` sends for the
same tree, byte for byte (git's tracked files or the tree minus .anvilignore, the same
deterministic tar, the same refusal of links that leave the tree), so it has the same key and
hits the same task cache entries.
"""
import http.client
import json
import os
import secrets
import subprocess
import time
import urllib.error
import urllib.request

FINAL_JOB = ("succeeded", "failed", "cancelled", "lost")
LOST_ANSWER = (502, 503, 504)  # what a proxy or a restarting server answers
RETRY_FIRST, RETRY_GAP = 0.25, 2.0  # seconds between tries: doubling, at most RETRY_GAP


class AnvilError(Exception):
    """The server answered with an error: status, code ("invalid", "not_found", ...) and
    its message, which names the field, the value and the reason."""

    def __init__(self, status, code, message):
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


def anvil_binary():
    """The anvil binary the SDK runs: $ANVIL_BIN, else `anvil` on PATH."""
    return os.environ.get("ANVIL_BIN") or "anvil"


def _client_file():
    home = os.environ.get("ANVIL_HOME") or os.path.join(os.path.expanduser("~"), ".anvil")
    return os.path.join(home, "client.json")


class Client:
    def __init__(self, server=None, token=None, timeout=30, retry_for=60):
        server = server or os.environ.get("ANVIL_SERVER")
        token = token or os.environ.get("ANVIL_TOKEN")
        if not server or not token:
            path = _client_file()
            try:
                with open(path) as f:
                    saved = json.load(f)
            except OSError as e:
                raise AnvilError(0, "unreachable",
                                 f"no server: pass server= and token=, set ANVIL_SERVER and "
                                 f"ANVIL_TOKEN, or start one with `anvil up` ({path}: {e})")
            server = server or saved.get("server")
            token = token or saved.get("token")
        self.server = server.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retry_for = retry_for

    def request(self, method, path, body=None, create=False):
        """One call; the answer's JSON (or text for logs). Raises AnvilError. create: the
        call makes something (a job, an execution): it carries an Idempotency-Key, and is
        sent again with that key while its answer is lost, for up to retry_for seconds."""
        data = json.dumps(body).encode() if body is not None else None
        if not create:
            return self._send(method, path, data, {})
        headers = {"Idempotency-Key": secrets.token_hex(16)}
        deadline = time.monotonic() + self.retry_for
        pause, tries = RETRY_FIRST, 0
        while True:
            tries += 1
            try:
                return self._send(method, path, data, headers)
            except AnvilError as e:
                lost = e.status == 0 or e.status in LOST_ANSWER
                left = deadline - time.monotonic()
                if not lost or left <= 0:
                    if lost and tries > 1:
                        e.message += (f" (sent {tries} times with one Idempotency-Key; the "
                                      f"server makes it at most once: look before sending "
                                      f"it again)")
                        e.args = (f"HTTP {e.status} {e.code}: {e.message}",)
                    raise
                time.sleep(min(pause, left))
                pause = min(pause * 2, RETRY_GAP)

    def _send(self, method, path, data, headers):
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.token)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for k, v in headers.items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                raw = r.read()
                if "json" in r.headers.get("Content-Type", ""):
                    return json.loads(raw)
                return raw.decode(errors="replace")
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                err = json.loads(text)["error"]
                raise AnvilError(e.code, err.get("code", ""), err.get("message", text)) from None
            except (ValueError, KeyError, TypeError):
                raise AnvilError(e.code, "", text) from None
        except urllib.error.URLError as e:
            raise AnvilError(0, "unreachable", f"{self.server}: {e.reason}") from None
        except (http.client.HTTPException, OSError) as e:  # the answer cut off, or late
            raise AnvilError(0, "unreachable", f"{self.server}: no answer: {e!r}") from None

    # ---- jobs ----
    def submit(self, command, **fields):
        """Submits a job (POST /v1/jobs): command a list, or a string run by /bin/sh -c;
        fields as the API names them (gpus, nodes, queue, priority, env, ...)."""
        if isinstance(command, str):
            command = ["/bin/sh", "-c", command]
        return self.request("POST", "/v1/jobs", dict(fields, command=list(command)),
                            create=True)["job"]

    def job(self, job_id):
        return self.request("GET", f"/v1/jobs/{int(job_id)}")["job"]

    def jobs(self, state=None, limit=100):
        q = f"?limit={int(limit)}" + (f"&state={state}" if state else "")
        return self.request("GET", "/v1/jobs" + q)["jobs"]

    def cancel_job(self, job_id):
        return self.request("POST", f"/v1/jobs/{int(job_id)}/cancel")["job"]

    def logs(self, job_id, rank=0, stream="stdout"):
        """A rank's whole output so far, as text."""
        return self.request("GET", f"/v1/jobs/{int(job_id)}/logs?rank={int(rank)}"
                                   f"&stream={stream}")

    def wait_job(self, job_id, timeout=None):
        """The job once it is final (succeeded, failed, cancelled or lost)."""
        return self._wait(lambda: self.job(job_id), lambda j: j["state"] in FINAL_JOB, timeout,
                          f"job {job_id}")

    # ---- workflows ----
    def run_workflow(self, wf, no_cache=False, bundle=None, code=".", **inputs):
        """Submits a workflow (POST /v1/workflows): a @workflow (compiled here with inputs
        as -i overrides) or an already compiled dict. Returns the execution.

        Its tasks run in a code bundle, as with `anvil wf run`: the directory code (default
        the current one) packed and stored by self.bundle(code); code=None sends none
        (`--no-code`: tasks run in their agent's directory); bundle="sha256/..." sends one
        stored already (self.bundle's key) and packs nothing."""
        spec = wf.compile(**inputs) if hasattr(wf, "compile") else dict(wf)
        if inputs and not hasattr(wf, "compile"):
            spec["inputs"] = dict(spec.get("inputs", {}), **{k: str(v) for k, v in
                                                            inputs.items()})
        body = {"workflow": spec, "no_cache": bool(no_cache)}
        if bundle is None and code is not None:
            bundle = self.bundle(code)
        if bundle:
            body["bundle"] = bundle
        return self.request("POST", "/v1/workflows", body, create=True)["workflow"]

    def bundle(self, code="."):
        """Packs the directory code into a code bundle and stores it on the server, as `anvil
        wf run --code CODE` does; returns its key ("sha256/..."). The anvil binary does it
        (`anvil wf bundle`, with this client's server and token), so the bundle, and its key,
        are the CLI's own. Raises AnvilError: code "bundle" when the tree cannot be packed
        (with the CLI's reason) or the binary is missing, "unreachable" when the server
        cannot be reached."""
        env = dict(os.environ, ANVIL_SERVER=self.server, ANVIL_TOKEN=self.token)
        if 0 <= self.retry_for <= 3600:  # the CLI's own bounds for ANVIL_RETRY_FOR
            env["ANVIL_RETRY_FOR"] = "%ds" % int(self.retry_for)
        argv = [anvil_binary(), "wf", "bundle", "--code", str(code)]
        hint = "code=None submits the workflow without a bundle"
        try:
            p = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        except OSError as e:
            raise AnvilError(0, "bundle", f"the code bundle of {code}: cannot run {argv[0]} "
                                          f"({e.strerror}): the anvil binary packs it: set "
                                          f"ANVIL_BIN or put anvil on PATH ({hint})") from None
        key = p.stdout.strip()
        if p.returncode != 0 or not key.startswith("sha256/"):
            why = p.stderr.strip() or f"{argv[0]} wf bundle exited {p.returncode}"
            raise AnvilError(0, "unreachable" if p.returncode == 3 else "bundle",
                             f"{why} ({hint})")
        return key

    def execution(self, exec_id):
        """One execution with every run (run_list)."""
        return self.request("GET", f"/v1/workflows/{int(exec_id)}")["workflow"]

    def executions(self, limit=20):
        return self.request("GET", f"/v1/workflows?limit={int(limit)}")["workflows"]

    def cancel(self, exec_id):
        return self.request("POST", f"/v1/workflows/{int(exec_id)}/cancel")["workflow"]

    def recover(self, exec_id):
        return self.request("POST", f"/v1/workflows/{int(exec_id)}/recover",
                            create=True)["workflow"]

    def wait(self, exec_id, timeout=None):
        """The execution once it has ended (succeeded, failed or cancelled)."""
        return self._wait(lambda: self.execution(exec_id), lambda x: x["state"] != "running",
                          timeout, f"workflow {exec_id}")

    def outputs(self, exec_id):
        """{run label: {output: value or object key}} of an execution's runs."""
        from . import outputs_of
        return outputs_of(self.execution(exec_id))

    @staticmethod
    def _wait(get, done, timeout, what):
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.05
        while True:
            v = get()
            if done(v):
                return v
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"{what} did not end within {timeout} s")
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
