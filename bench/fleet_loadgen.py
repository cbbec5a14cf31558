#!/usr/bin/env python3
"""fleet_loadgen.py - many nodes' agents played by one process, through the real agent
protocol (docs/api.md, "Agent protocol"): a load generator for bench/fleet_bench.py, NOT the
agent. Standard library only (asyncio).

    python3 bench/fleet_loadgen.py --server URL --join-token-file F --nodes NODES.json

NODES.json: [{"name", "model", "memory_bytes"}, ...]. For each node, at once:

  * POST /v1/agent/register with the join token and facts shaped as a simulated agent's
    (8 GPUs of the node's model, driver sim-550.54.15, CUDA 12.4; agent/ident.c's keys);
  * then /v1/agent/sync long polls (wait_ms as the real agent's default, 10 s) on one
    keep-alive connection, carrying the facts until answered and the profile status while it
    changed, as src/agent/syncer.c does;
  * a profile in an answer is "converged" after --converge-ms (the real agent runs the steps
    in a worker thread on its own machine; here the steps are not run: the status reports
    every step of the profile ok, with the step names src/fleet/steps.c gives them);
  * its HTTP endpoint (one server for all, each node's agent_url a path under it) answers the
    node check (POST .../v1/check: ok, the 13 checks of the simulated backend) and a request
    to converge again (POST .../v1/profile/converge), with the node secret.

What it does not do that an agent does: run ranks (a desired rank is reported as ended at
once), watch GPUs, send health reports, run the periodic drift checks. Stops on SIGTERM.
"""

import argparse
import asyncio
import json
import signal
import sys
import time
import urllib.parse

WAIT_MS = 10000
BACKOFF = (0.05, 1.0)


def log(msg):
    print(f"[fleet-loadgen {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


async def http(conn, host, port, method, path, body, token):
    """One request on a keep-alive connection [reader, writer] (reopened when closed):
    (status, parsed JSON or None)."""
    data = json.dumps(body).encode() if body is not None else b""
    head = (f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\n\r\n").encode()
    if conn[0] is None:
        conn[0], conn[1] = await asyncio.open_connection(host, port)
    try:
        conn[1].write(head + data)
        await conn[1].drain()
        status, length, chunked, close = await read_head(conn[0])
        raw = await read_body(conn[0], length, chunked)
    except BaseException:
        drop(conn)
        raise
    if close:
        drop(conn)
    return status, (json.loads(raw) if raw else None)


def drop(conn):
    if conn[1] is not None:
        conn[1].close()
    conn[0] = conn[1] = None


async def read_head(reader):
    line = await reader.readline()
    if not line:
        raise ConnectionError("closed")
    status = int(line.split()[1])
    length, chunked, close = None, False, False
    while True:
        h = await reader.readline()
        if h in (b"\r\n", b"\n", b""):
            break
        k, _, v = h.decode("latin-1").partition(":")
        k, v = k.strip().lower(), v.strip().lower()
        if k == "content-length":
            length = int(v)
        elif k == "transfer-encoding" and "chunked" in v:
            chunked = True
        elif k == "connection" and v == "close":
            close = True
    return status, length, chunked, close


async def read_body(reader, length, chunked):
    if not chunked:
        return await reader.readexactly(length or 0)
    out = b""
    while True:
        n = int((await reader.readline()).split(b";")[0], 16)
        if n == 0:
            await reader.readline()
            return out
        out += await reader.readexactly(n)
        await reader.readline()


def step_names(spec):
    """The steps of a compiled profile, in src/fleet/steps.c's order and words."""
    names = []
    gpu = spec.get("gpu") or {}
    if gpu.get("count", 0) > 0:
        names.append(("gpu", "%d GPUs, each %s" % (gpu["count"], gpu.get("model"))))
    if spec.get("driver"):
        names.append(("driver", "driver version sim-550.54.15"))
    if spec.get("cuda"):
        names.append(("cuda", "CUDA version 12.4"))
    if spec.get("agent"):
        names.append(("agent", "agent version 0.1.0-dev"))
    for m in spec.get("mounts") or []:
        names.append(("mount " + m["path"], "%s is %s (%s, rw,relatime)" % (
            m["path"], m["fs"], m["device"])))
    if spec.get("cache_dir"):
        names.append(("cache_dir " + spec["cache_dir"], spec["cache_dir"] + " is a directory"))
    for k, v in (spec.get("sysctl") or {}).items():
        names.append(("sysctl " + k, "%s is %s" % (k, v)))
    if spec.get("packages"):
        names.append(("packages", " ".join("%s 1.0" % p for p in spec["packages"])))
    return names


CHECKS = ["gpu_count", "gpu_model", "driver_version", "cuda_version", "gpu_health",
          "gpu_memory", "ecc_errors", "retired_pages", "xid_errors", "nvlink", "pcie",
          "thermal", "persistence_mode"]


class Node:
    def __init__(self, gen, i, entry):
        self.gen, self.i = gen, i
        self.name, self.model, self.mem = entry["name"], entry["model"], entry["memory_bytes"]
        self.node_id, self.secret = None, None
        self.generation = 0
        self.facts_pending = True
        self.profile = None
        self.status, self.status_version, self.status_acked = None, 0, 0
        self.converging = None  # the task that will report the profile converged
        self.poll, self.poll_carries = None, False  # the request in flight

    def facts(self):
        g = self.gen
        gpus = [{"index": k, "uuid": "GPU-sim-%04d-%04d" % (self.i, k), "name": self.model,
                 "memory_bytes": self.mem, "pci_bus_id": "00000000:%02x:00.0" % (0x18 + k),
                 "links": ["SELF" if j == k else "SYS" for j in range(8)]} for k in range(8)]
        return {"name": self.name, "hostname": self.name, "address": "127.0.0.1",
                "agent_url": "http://127.0.0.1:%d/n/%s" % (g.agent_port, self.name),
                "cpus": 224, "memory_bytes": 2 << 40, "backend": "sim", "rdma": [],
                "gpus": gpus, "gpu_groups": [255], "gpu_near_groups": [],
                "driver_version": "sim-550.54.15", "cuda_version": "12.4"}

    def set_status(self, state, steps):
        self.status = {"hash": self.profile["hash"], "state": state, "steps": steps,
                       "time_ms": int(time.time() * 1000)}
        self.status_version += 1
        self.gen.wake(self)

    async def converge(self):
        """The steps of the profile: after --converge-ms, every one ok."""
        await asyncio.sleep(self.gen.converge_ms / 1000)
        steps = [{"name": n, "status": "ok", "detail": d}
                 for n, d in step_names(self.profile["spec"])]
        self.set_status("converged", steps)

    def on_profile(self, p):
        if not p:
            self.profile, self.status = None, None
            return
        if self.profile and p["hash"] == self.profile["hash"]:
            return
        self.profile = p
        if self.converging:
            self.converging.cancel()
        self.converging = asyncio.ensure_future(self.converge())

    async def run(self):
        g = self.gen
        conn = [None, None]
        delay = BACKOFF[0]
        while self.node_id is None and not g.stopping:
            try:
                st, ans = await http(conn, g.host, g.port, "POST", "/v1/agent/register",
                                     self.facts(), g.join_token)
                if st == 200:
                    self.node_id, self.secret = ans["node_id"], ans["secret"]
                    g.registered += 1
                    self.facts_pending = False  # the registration carried them
                    break
                log(f"{self.name}: register: HTTP {st}: {ans}")
            except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError) as e:
                g.errors += 1
                if g.errors <= 5:
                    log(f"{self.name}: register: {e!r}; retrying")
            await asyncio.sleep(delay)
            delay = min(delay * 2, BACKOFF[1])
        g.by_name[self.name] = self
        delay = BACKOFF[0]
        while not g.stopping:
            body = {"node_id": self.node_id, "generation": self.generation, "wait_ms": WAIT_MS,
                    "ranks": []}
            if self.facts_pending:
                body["facts"] = self.facts()
            sent_version = self.status_version
            if self.status is not None and self.status_acked != self.status_version:
                body["profile_status"] = self.status
            self.poll_carries = "profile_status" in body
            self.poll = asyncio.ensure_future(
                http(conn, g.host, g.port, "POST", "/v1/agent/sync", body, self.secret))
            try:
                st, ans = await self.poll
            except asyncio.CancelledError:
                if g.stopping:
                    return
                drop(conn)  # a status to send while parked: send it on a fresh connection
                continue
            except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError) as e:
                g.errors += 1
                if g.errors <= 5:
                    log(f"{self.name}: sync: {e!r}; retrying")
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF[1])
                continue
            finally:
                self.poll = None
            if st != 200:
                g.errors += 1
                log(f"{self.name}: sync: HTTP {st}: {ans}")
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF[1])
                continue
            delay = BACKOFF[0]
            g.syncs += 1
            self.facts_pending = False
            if "profile_status" in body:
                self.status_acked = sent_version
            self.generation = ans["generation"]
            if ans.get("ranks"):
                g.ranks_ignored += len(ans["ranks"])
            self.on_profile(ans.get("profile"))


class Generator:
    def __init__(self, args, nodes):
        u = urllib.parse.urlsplit(args.server)
        self.host, self.port = u.hostname, u.port
        with open(args.join_token_file) as f:
            self.join_token = f.read().strip()
        self.converge_ms = args.converge_ms
        self.nodes = [Node(self, i, e) for i, e in enumerate(nodes)]
        self.by_name = {}
        self.stopping = False
        self.registered = self.syncs = self.errors = self.checks = self.ranks_ignored = 0

    def wake(self, node):
        """A new status to send: a poll parked at the server is given up (where the real
        agent sends a second request), so that the next request carries it. Not one that
        carries an older status: the server might apply that one after the new one (see
        src/agent/syncer.c); the new one then goes with the next poll."""
        p = getattr(node, "poll", None)
        if p is not None and not p.done() and not node.poll_carries:
            p.cancel()

    async def serve_agent(self, reader, writer):
        """The nodes' agent endpoints: /n/NAME/v1/check and /n/NAME/v1/profile/converge."""
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                method, path = line.decode().split()[:2]
                length, auth = 0, ""
                while True:
                    h = await reader.readline()
                    if h in (b"\r\n", b"\n", b""):
                        break
                    k, _, v = h.decode("latin-1").partition(":")
                    if k.strip().lower() == "content-length":
                        length = int(v)
                    elif k.strip().lower() == "authorization":
                        auth = v.strip()
                body = json.loads(await reader.readexactly(length) or b"{}")
                parts = path.split("/")  # ['', 'n', NAME, 'v1', ...]
                node = self.by_name.get(parts[2]) if len(parts) > 3 else None
                status, out = 404, {"error": "not found"}
                if node and auth != "Bearer " + node.secret:
                    status, out = 401, {"error": "wrong node secret"}
                elif node and method == "POST" and parts[3:] == ["v1", "check"]:
                    self.checks += 1
                    checks = [{"name": c, "ok": True, "detail": "ok"} for c in CHECKS]
                    status, out = 200, {"ok": True, "backend": "sim", "checks": checks,
                                        "summary": "%d checks, 0 failed" % len(checks)}
                elif node and method == "POST" and parts[3:] == ["v1", "profile", "converge"]:
                    if node.profile and body.get("hash") == node.profile["hash"]:
                        if node.converging:
                            node.converging.cancel()
                        node.converging = asyncio.ensure_future(node.converge())
                        status, out = 202, {"converging": node.profile["hash"]}
                    else:
                        status, out = 409, {"error": "not this node's profile"}
                data = json.dumps(out).encode()
                writer.write(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n" % (status, len(data)) + data)
                await writer.drain()
        except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError, IndexError):
            pass
        finally:
            writer.close()

    async def main(self):
        server = await asyncio.start_server(self.serve_agent, "127.0.0.1", 0, backlog=4096)
        self.agent_port = server.sockets[0].getsockname()[1]
        loop = asyncio.get_running_loop()
        done = asyncio.Event()

        def stop():
            self.stopping = True
            done.set()

        loop.add_signal_handler(signal.SIGTERM, stop)
        loop.add_signal_handler(signal.SIGINT, stop)
        t0 = time.monotonic()
        tasks = [asyncio.ensure_future(n.run()) for n in self.nodes]
        log(f"{len(self.nodes)} nodes started; their agent endpoint 127.0.0.1:{self.agent_port}")
        while not done.is_set():
            try:
                await asyncio.wait_for(done.wait(), 5)
            except asyncio.TimeoutError:
                log(f"{time.monotonic() - t0:.1f} s: {self.registered} registered, "
                    f"{self.syncs} syncs, {self.checks} checks, {self.errors} errors")
        for t in tasks:
            t.cancel()
        server.close()
        log(f"stopped: {self.registered} registered, {self.syncs} syncs, {self.checks} checks, "
            f"{self.errors} errors, {self.ranks_ignored} desired ranks ignored")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--join-token-file", required=True)
    ap.add_argument("--nodes", required=True, help="JSON: [{name, model, memory_bytes}]")
    ap.add_argument("--converge-ms", type=int, default=100,
                    help="how long a node takes to converge to a new profile (100)")
    args = ap.parse_args()
    with open(args.nodes) as f:
        nodes = json.load(f)
    asyncio.run(Generator(args, nodes).main())


if __name__ == "__main__":
    main()
