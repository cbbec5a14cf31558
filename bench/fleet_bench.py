#!/usr/bin/env python3
"""fleet_bench.py - how long the part of a fleet rebuild that anvil controls takes: nodes
joining, converging to their profile and passing their node check; a no-op plan; a rolling
profile change.

    python3 bench/fleet_bench.py [--reps 3] [--anvil build/release/anvil] [--skip-large]
    python3 bench/fleet_bench.py --real-nodes 1000 --skip-reference --skip-large

What it does (details and the reasoning in docs/benchmarks.md, "Fleet"):

  * reference fleet, real agents: a fresh `anvil server` is given a spec shaped as
    examples/fleet/reference.yaml (10 nodes of 8 x A100 in block b1, 18 of 8 x H200 in
    block b2, the same queues, teams and upgrade policy) whose profiles' steps are trivial
    and host-safe (below); then 28 real `anvil agent` processes start, each with its --name
    from the spec, its own work dir and a simulated GPU file of 8 GPUs of its group's model.
    Measured: from starting the first agent to every node `ready`, converged to its profile's
    current hash, its node check passed and not held (GET /v1/nodes, polled every 20 ms).
  * no-op plan: the same spec planned again against that fleet, through the API
    (POST /v1/fleet/plan) and the CLI (`anvil fleet plan FILE`, a process each); each must say
    0 changes.
  * rolling profile change: the profiles' driver pin goes "550" -> "550.54" (and back, a
    second sample): the plan classifies a driver change as needing a drain, and both pins
    match the simulated driver sim-550.54.15 by the version rule, so every node converges.
    Measured: from POST /v1/fleet/apply to its rollout `done` (GET /v1/fleet/status, polled
    every 20 ms), paced by the reference policy (max_unavailable 2, 1 per block).
  * 1,000 nodes (--large-nodes): a load generator (bench/fleet_loadgen.py), NOT the real
    agent: one process playing every node through the real agent protocol (register with the
    join token, /v1/agent/sync long polls with facts and profile_status, the node check on
    its HTTP endpoint). Same measure as the reference fleet, from starting the generator.
  * --real-nodes N: N real `anvil agent` processes on a spec of the 1,000-node kind (36 %
    A100, 64 % H200), measured as the reference fleet is. This machine holds 1,000 of them
    (with their spare shims, about 14,000 tasks and 6.6 GB at the peak): heavy, so not run
    unless asked.

The profiles' steps are those of the reference profiles, made trivial and host-safe: GPU
model and count, driver "550" and CUDA "12.4" (the simulated GPUs'), agent "0.1.0" (matches
0.1.0-dev), one mount that is already there (/dev/shm, tmpfs), a cache_dir under it (made by
the first node that converges), the reference's four kernel settings pinned to the values
this host already has (keys it lacks are left out), and three Debian packages that are
installed. Before anything starts, `anvil _converge --check-only` confirms that every step
already holds on this host, so converging changes nothing here but the cache directory; the
agents also run with ANVIL_PROFILE_APT_SIMULATE=1, so a package step could never install.

Standard library only; Debian's /usr/bin/python3 is enough. Results: a table on stdout and
JSON in bench/out/. Stops everything it started, also on error or Ctrl-C.
"""

import argparse
import datetime
import http.client
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MODELS = {"a100": ("NVIDIA A100-SXM4-80GB", 85899345920), "h200": ("NVIDIA H200", 150754820096)}
SYSCTL_KEYS = ("vm.swappiness", "kernel.numa_balancing", "net.core.rmem_max",
               "net.core.wmem_max")
PACKAGES = ("coreutils", "procps", "python3")
CACHE_MOUNT = {"path": "/dev/shm", "device": "tmpfs", "fs": "tmpfs"}

TARGETS = {"reference_ready_s": 10.0, "large_ready_s": 60.0}


def log(msg):
    print(f"[fleet-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# The spec


def host_sysctl():
    """The reference profile's kernel settings, at the values this host has now."""
    out = {}
    for k in SYSCTL_KEYS:
        try:
            with open("/proc/sys/" + k.replace(".", "/")) as f:
                out[k] = f.read().strip()
        except OSError:
            pass
    return out


def installed_packages():
    p = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Status}\\n"] + list(PACKAGES),
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ok = {line.split()[0] for line in p.stdout.splitlines() if line.endswith("install ok installed")}
    return [x for x in PACKAGES if x in ok]


def profile(kind, driver, cache_dir, sysctl, packages):
    p = {"gpu": {"model": MODELS[kind][0], "count": 8}, "driver": driver, "cuda": "12.4",
         "agent": "0.1.0", "mounts": [dict(CACHE_MOUNT)], "cache_dir": cache_dir}
    if sysctl:
        p["sysctl"] = dict(sysctl)
    if packages:
        p["packages"] = list(packages)
    return p


def fleet_spec(name, groups, driver, cache_dir, sysctl, packages):
    """groups: [(kind, node range, block)]. The reference fleet's pools, queues, teams and
    upgrade policy (examples/fleet/reference.yaml), without addresses (every agent here is on
    127.0.0.1)."""
    spec = {
        "name": name,
        "pools": {"onprem": {"kind": "on-prem"},
                  "burst": {"kind": "cloud", "provider": "aws", "region": "us-east-1",
                            "instance_type": "p5en.48xlarge", "max_nodes": 8, "profile": "h200",
                            "queues": ["research", "scavenger"]}},
        "profiles": {k: profile(k, driver, cache_dir, sysctl, packages) for k in MODELS},
        "groups": {},
        "queues": {
            "prod": {"priority": 100, "borrowing": False, "default_time_limit": "72h",
                     "quotas": {"pretrain": 128, "search": 48, "ranking": 48}},
            "research": {"priority": 50, "default_time_limit": "24h", "idle_timeout": "2h",
                         "quotas": {"search": 24, "ranking": 24}},
            "scavenger": {"priority": -100, "default_time_limit": "6h"}},
        "teams": {"pretrain": {"weight": 2}, "search": None, "ranking": None},
        "upgrade": {"max_unavailable": 2, "max_unavailable_per_block": 1,
                    "validation_timeout": "15m"},
    }
    for i, (kind, nodes, block) in enumerate(groups):
        gname = kind if len(groups) == len(MODELS) else f"{kind}-{i}"
        spec["groups"][gname] = {
            "pool": "onprem", "profile": kind, "nodes": nodes,
            "labels": {"gpu": "a100-80gb" if kind == "a100" else "h200-141gb"},
            "topology": {"rack": "r1" if kind == "a100" else "r2",
                         "switch": "leaf-1" if kind == "a100" else "leaf-2", "block": block}}
    return spec


def reference_groups():
    return [("a100", "a100-[01-10]", "b1"), ("h200", "h200-[01-18]", "b2")]


def large_groups(n):
    """n nodes as in docs/benchmarks.md's 1,000-node scheduler runs: 36 % A100, 64 % H200."""
    na = n * 36 // 100
    return [("a100", f"a100-[0001-{na:04d}]", "b1"), ("h200", f"h200-[0001-{n - na:04d}]", "b2")]


def expand(groups):
    """The node names of groups (ranges of one [FIRST-LAST] each), with their kind."""
    out = []
    for kind, pattern, _ in groups:
        head, rng = pattern.split("[")
        lo, hi = rng.rstrip("]").split("-")
        out += [(f"{head}{i:0{len(lo)}d}", kind) for i in range(int(lo), int(hi) + 1)]
    return out


def write_spec(path, spec):
    with open(path, "w") as f:  # JSON is YAML 1.2: `anvil fleet plan` reads it as it is
        json.dump(spec, f, indent=1)
    return path


def sim_gpus(path, kind, node):
    """A simulated 8-GPU board (src/gpu/sim.h), as tests/integration/harness.py writes it."""
    model, mem = MODELS[kind]
    gpus = [{"index": i, "uuid": "GPU-sim-%04d-%04d" % (node, i), "name": model,
             "memory_bytes": mem, "pci_bus_id": "00000000:%02x:00.0" % (0x18 + i)}
            for i in range(8)]
    with open(path, "w") as f:
        json.dump({"driver_version": "sim-550.54.15", "cuda_version": "12.4", "gpus": gpus}, f)


def guard_profiles(anvil, spec, work):
    """Every step of every profile holds on this host already (bar the cache directory, made
    here first), so converging changes nothing on it. Raises with the steps that do not."""
    comp = subprocess.run([anvil, "fleet", "check", "--json", write_spec(
        os.path.join(work, "guard.json"), spec)], stdout=subprocess.PIPE, text=True, check=True)
    for p in json.loads(comp.stdout)["profiles"]:
        d = os.path.join(work, "guard-" + p["name"])
        os.makedirs(d)
        os.makedirs(p["cache_dir"], exist_ok=True)
        with open(os.path.join(d, "profile.json"), "w") as f:
            json.dump(p, f)
        sim_gpus(os.path.join(d, "gpus.json"), p["name"], 0)
        r = subprocess.run([anvil, "_converge", "--check-only", "--profile",
                            os.path.join(d, "profile.json"), "--work-dir", d, "--gpus-file",
                            os.path.join(d, "gpus.json")], stdout=subprocess.PIPE, text=True)
        st = json.loads(r.stdout)
        bad = [s for s in st["steps"] if s["status"] != "ok"]
        if bad:
            raise RuntimeError(f"profile {p['name']}: these steps do not hold on this host, so "
                               f"converging would change it: {bad}")
        shutil.rmtree(p["cache_dir"])
    return [s["name"] for s in st["steps"]]


# --------------------------------------------------------------------------------------------
# The server and the agents


class Api:
    """A keep-alive connection to the server's API."""

    def __init__(self, url, token):
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.token = u.hostname, u.port, token
        self.conn = None

    def __call__(self, method, path, body=None):
        headers = {"Authorization": f"Bearer {self.token}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
            try:
                self.conn.request(method, path, body=data, headers=headers)
                r = self.conn.getresponse()
                raw = r.read()
                break
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        if r.status >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {r.status}: {raw[:400]!r}")
        return json.loads(raw) if raw else None


class Cluster:
    """A fresh `anvil server` (its own state dir and ANVIL_HOME) and the agents started on it."""

    def __init__(self, anvil, work, name):
        self.anvil, self.dir = anvil, os.path.join(work, name)
        self.home = os.path.join(self.dir, "home")
        self.logs = os.path.join(self.dir, "logs")
        os.makedirs(self.logs)
        self.agents = []
        self.others = []
        self.server = None

    def spawn(self, args, logname, env=None):
        out = open(os.path.join(self.logs, logname), "ab")
        e = dict(os.environ, ANVIL_HOME=self.home, **(env or {}))
        for k in ("ANVIL_SERVER", "ANVIL_TOKEN"):
            e.pop(k, None)
        p = subprocess.Popen(args, stdout=out, stderr=out, stdin=subprocess.DEVNULL, env=e,
                             start_new_session=True)
        out.close()
        return p

    def start_server(self, nodes=0):
        """nodes: how many nodes will sync from this machine. Each holds up to two
        connections (a real agent's two long polls; the load generator's one), all from
        127.0.0.1, so the server's per-address limit (docs/operations.md, 1,024 by
        default) is raised to fit them and the bench's own calls."""
        client = os.path.join(self.home, "client.json")
        state = os.path.join(self.dir, "state")
        room = 2 * nodes + 256
        limits = ["--http-max-per-address", str(max(room, 1024)),
                  "--http-max-connections", str(max(room, 10000))]
        self.server = self.spawn([self.anvil, "server", "--no-config", "--state-dir", state,
                                  "--listen", "127.0.0.1:0", "--home", self.home,
                                  "--node-timeout", "30s"] + limits, "server.log")
        deadline = time.monotonic() + 30
        while not os.path.exists(client):
            if self.server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start: " + self.log("server.log"))
            time.sleep(0.02)
        with open(client) as f:
            c = json.load(f)
        self.url, self.token = c["server"], c["token"]
        self.join_token_file = os.path.join(state, "join.token")
        with open(self.join_token_file) as f:
            self.join_token = f.read().strip()
        self.api = Api(self.url, self.token)

    def prepare_agent(self, i, name, kind):
        work = os.path.join(self.dir, "nodes", name)
        os.makedirs(work)
        sim_gpus(os.path.join(work, "gpus.json"), kind, i)
        return [self.anvil, "agent", "--no-config", "--server", self.url, "--join-token-file",
                self.join_token_file, "--name", name, "--work-dir", work, "--gpus-file",
                os.path.join(work, "gpus.json")]

    def start_agents(self, argvs, names):
        env = {"ANVIL_PROFILE_APT_SIMULATE": "1"}  # a package step could never install
        for argv, name in zip(argvs, names):
            self.agents.append(self.spawn(argv, name + ".log", env))

    def log(self, name):
        try:
            with open(os.path.join(self.logs, name), errors="replace") as f:
                return f.read()[-3000:]
        except OSError:
            return ""

    def check_alive(self):
        dead = [p.args for p in [self.server] + self.agents + self.others
                if p.poll() is not None]
        if dead:
            raise RuntimeError(f"{len(dead)} process(es) exited: {dead[:3]}; logs in {self.logs}")

    def stop(self):
        for p in self.others + self.agents:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.others + self.agents:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.server and self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
            try:
                self.server.wait(20)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()


def node_done(n):
    """Ready, converged to its current profile, checked, not held."""
    prof, st = n.get("profile") or {}, n.get("profile_status") or {}
    return (n["state"] == "ready" and not n.get("held") and prof.get("hash") and
            st.get("hash") == prof["hash"] and st.get("state") == "converged" and
            n.get("profile_checked") == prof["hash"])


def wait_fleet_ready(c, names, t0, timeout, poll_s):
    """Polls GET /v1/nodes until every node of names is done; returns seconds since t0 for:
    all registered, all converged (their agent's word), all done."""
    want = set(names)
    marks = {}
    deadline = t0 + timeout
    while True:
        nodes = [n for n in c.api("GET", "/v1/nodes")["nodes"] if n["name"] in want]
        t = time.monotonic() - t0
        if len(nodes) == len(want):
            marks.setdefault("registered_s", t)
            if all((n.get("profile_status") or {}).get("state") == "converged" and
                   (n.get("profile_status") or {}).get("hash") ==
                   (n.get("profile") or {}).get("hash") for n in nodes):
                marks.setdefault("converged_s", t)
            if all(node_done(n) for n in nodes):
                marks["ready_s"] = t
                return {k: round(v, 3) for k, v in marks.items()}
        if time.monotonic() > deadline:
            done = sum(1 for n in nodes if node_done(n))
            some = [n for n in nodes if not node_done(n)][:3]
            raise RuntimeError(f"after {timeout}s: {len(nodes)}/{len(want)} nodes joined, "
                               f"{done} done; e.g. {json.dumps(some)[:1500]}")
        c.check_alive()
        time.sleep(poll_s)


def apply(c, spec, path):
    return c.api("POST", "/v1/fleet/apply", {"spec": spec, "who": "fleet-bench", "file": path})


# --------------------------------------------------------------------------------------------
# The phases


def noop_plans(c, spec, path, api_reps, cli_reps):
    api_s, cli_s = [], []
    for _ in range(api_reps):
        t = time.perf_counter()
        r = c.api("POST", "/v1/fleet/plan", {"spec": spec})
        api_s.append(time.perf_counter() - t)
        if r["plan"]["changes"] != 0:
            raise RuntimeError(f"the no-op plan has changes: {json.dumps(r['plan'])[:800]}")
    env = dict(os.environ, ANVIL_HOME=c.home)
    for k in ("ANVIL_SERVER", "ANVIL_TOKEN"):
        env.pop(k, None)
    for _ in range(cli_reps):
        t = time.perf_counter()
        p = subprocess.run([c.anvil, "fleet", "plan", path], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=env)
        cli_s.append(time.perf_counter() - t)
        if p.returncode != 0 or "0 changes" not in p.stdout and "no changes" not in p.stdout:
            raise RuntimeError(f"anvil fleet plan: {p.returncode}: {p.stdout[-800:]}"
                               f"{p.stderr[-400:]}")
    return {"api_ms": summarize(api_s, 1000), "cli_ms": summarize(cli_s, 1000),
            "cli_last_lines": p.stdout.strip().splitlines()[-2:] if cli_reps else []}


def rolling_change(c, spec, path, names, poll_s, timeout):
    t0 = time.monotonic()
    r = apply(c, spec, path)
    t_applied = time.monotonic() - t0
    if not r.get("rollout"):
        raise RuntimeError(f"the change started no rollout: {json.dumps(r)[:800]}")
    while True:
        st = c.api("GET", "/v1/fleet/status")
        ro = st["rollout"] or {}
        if ro.get("state") == "done":
            t = time.monotonic() - t0
            break
        if ro.get("state") == "stopped":
            raise RuntimeError(f"the rollout stopped: {ro.get('reason')}")
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"the rollout is not done after {timeout}s: {json.dumps(ro)[:800]}")
        c.check_alive()
        time.sleep(poll_s)
    nodes = [n for n in c.api("GET", "/v1/nodes")["nodes"] if n["name"] in set(names)]
    not_done = [n["name"] for n in nodes if not node_done(n)]
    per_node = [x["phase"] for x in ro.get("nodes", [])]
    return {"rollout_done_s": round(t, 3), "apply_call_s": round(t_applied, 3),
            "nodes_rolled": len(per_node), "all_done": per_node.count("done") == len(per_node),
            "nodes_not_ready_after": not_done,
            "per_node_s": round(t / max(1, len(per_node)), 3)}


def summarize(xs, scale=1.0):
    xs = sorted(x * scale for x in xs)
    if not xs:
        return None
    return {"n": len(xs), "median": round(statistics.median(xs), 3),
            "p90": round(xs[min(len(xs) - 1, int(0.9 * len(xs)))], 3),
            "min": round(xs[0], 3), "max": round(xs[-1], 3)}


def rss_mib(pids):
    """Resident memory of the processes and their children (the agents' spare shims)."""
    total = 0
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    kids.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(d))
            except (OSError, IndexError):
                pass
    todo = list(pids)
    while todo:
        pid = todo.pop()
        todo += kids.get(pid, [])
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            pass
    return round(total / (1 << 20), 1)


def cpu_times(pids):
    """user+system seconds of the processes (and their reaped children)."""
    hz = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in parts[11:15]) / hz
        except (OSError, IndexError):
            pass
    return round(total, 2)


def reference_rep(args, work, r, cache_root, sysctl, packages):
    c = Cluster(args.anvil, work, f"ref-{r}")
    res = {}
    try:
        c.start_server()
        cache = os.path.join(cache_root, f"ref-{r}", "anvil-cache")
        spec = fleet_spec("reference", reference_groups(), "550", cache, sysctl, packages)
        path = write_spec(os.path.join(c.dir, "fleet.json"), spec)
        a = apply(c, spec, path)
        if a.get("revision") is None:
            raise RuntimeError(f"the spec was not applied: {json.dumps(a)[:600]}")
        names = expand(reference_groups())
        argvs = [c.prepare_agent(i, n, k) for i, (n, k) in enumerate(names)]
        t0 = time.monotonic()
        c.start_agents(argvs, [n for n, _ in names])
        res["join"] = wait_fleet_ready(c, [n for n, _ in names], t0, args.timeout, 0.02)
        res["join"]["cpu_s"] = {"server": cpu_times([c.server.pid]),
                                "agents": cpu_times([p.pid for p in c.agents])}
        log(f"reference rep {r + 1}: 28 nodes ready in {res['join']['ready_s']} s "
            f"(all registered {res['join']['registered_s']} s, "
            f"all converged {res['join'].get('converged_s')} s)")
        res["noop_plan"] = noop_plans(c, spec, path, args.plan_reps, args.plan_cli_reps)
        log(f"reference rep {r + 1}: no-op plan median "
            f"{res['noop_plan']['api_ms']['median']} ms (API), "
            f"{res['noop_plan']['cli_ms']['median']} ms (CLI)")
        res["rolling"] = []
        for frm, to in (("550", "550.54"), ("550.54", "550")):
            s2 = fleet_spec("reference", reference_groups(), to, cache, sysctl, packages)
            p2 = write_spec(os.path.join(c.dir, f"fleet-{to}.json"), s2)
            rc = rolling_change(c, s2, p2, [n for n, _ in names], 0.02, args.timeout)
            rc["change"] = f"driver {frm} -> {to}"
            res["rolling"].append(rc)
            if rc["nodes_not_ready_after"] or not rc["all_done"]:
                log(f"WARNING: after the rollout, not ready: {rc['nodes_not_ready_after']}")
            log(f"reference rep {r + 1}: rolling change {rc['change']}: "
                f"{rc['nodes_rolled']} nodes in {rc['rollout_done_s']} s")
    except BaseException:
        log(f"reference rep {r + 1} failed; server log tail:\n{c.log('server.log')}")
        raise
    finally:
        c.stop()
        if not args.keep:
            shutil.rmtree(c.dir, ignore_errors=True)
    return res


def large_rep(args, work, r, cache_root, sysctl, packages, real=False):
    """args.large_nodes nodes played by the load generator, or (real) args.real_nodes real
    agents with the same kind of spec."""
    n = args.real_nodes if real else args.large_nodes
    tag = "real" if real else "large"
    c = Cluster(args.anvil, work, f"{tag}-{r}")
    res = {}
    try:
        c.start_server(nodes=n)
        cache = os.path.join(cache_root, f"large-{r}", "anvil-cache")
        groups = large_groups(n)
        spec = fleet_spec(tag, groups, "550", cache, sysctl, packages)
        path = write_spec(os.path.join(c.dir, "fleet.json"), spec)
        apply(c, spec, path)
        names = expand(groups)
        nodes_file = os.path.join(c.dir, "loadgen-nodes.json")
        with open(nodes_file, "w") as f:
            json.dump([{"name": nm, "model": MODELS[k][0], "memory_bytes": MODELS[k][1]}
                       for nm, k in names], f)
        if real:
            argvs = [c.prepare_agent(i, nm, k) for i, (nm, k) in enumerate(names)]
        t0 = time.monotonic()
        if real:
            c.start_agents(argvs, [nm for nm, _ in names])
        else:
            gen = c.spawn([sys.executable, os.path.join(HERE, "fleet_loadgen.py"), "--server",
                           c.url, "--join-token-file", c.join_token_file, "--nodes",
                           nodes_file], "loadgen.log")
            c.others.append(gen)
        res["join"] = wait_fleet_ready(c, [nm for nm, _ in names], t0, args.timeout,
                                       args.large_poll)
        res["join"]["cpu_s"] = {"server": cpu_times([c.server.pid])}
        if real:
            res["join"]["cpu_s"]["agents"] = cpu_times([p.pid for p in c.agents])
            res["join"]["agents_rss_mib"] = rss_mib([p.pid for p in c.agents])
        else:
            res["join"]["cpu_s"]["loadgen"] = cpu_times([gen.pid])
        log(f"{tag} rep {r + 1}: {n} nodes ready in {res['join']['ready_s']} s "
            f"(all registered {res['join']['registered_s']} s, "
            f"all converged {res['join'].get('converged_s')} s)")
        res["noop_plan"] = noop_plans(c, spec, path, max(3, args.plan_reps // 4), 0)
        log(f"{tag} rep {r + 1}: no-op plan median {res['noop_plan']['api_ms']['median']} ms")
    except BaseException:
        log(f"{tag} rep {r + 1} failed; server log tail:\n{c.log('server.log')}\n"
            f"load generator log tail:\n{c.log('loadgen.log')}")
        raise
    finally:
        c.stop()
        if not args.keep:
            shutil.rmtree(c.dir, ignore_errors=True)
    return res


# --------------------------------------------------------------------------------------------
# Report


def med(reps, *path):
    vals = []
    for rep in reps:
        v = rep
        for p in path:
            v = v[p] if isinstance(v, dict) and p in v else (v[p] if isinstance(v, list) and
                                                            isinstance(p, int) and
                                                            p < len(v) else None)
            if v is None:
                break
        if isinstance(v, (int, float)):
            vals.append(v)
    return (round(statistics.median(vals), 3), vals) if vals else (None, [])


def table(results, args):
    ref, big = results.get("reference", []), results.get("large", [])
    rows = []

    def row(label, value, target=None, unit="s"):
        v, vals = value
        met = None if target is None or v is None else v < target
        rows.append({"metric": label, "median": v, "all": vals, "unit": unit,
                     "target": target, "met": met})

    row("reference: agents started -> 28 nodes ready (real agents)", med(ref, "join", "ready_s"),
        TARGETS["reference_ready_s"])
    row("  of which: all 28 registered", med(ref, "join", "registered_s"))
    row("  of which: all 28 converged (agents' word)", med(ref, "join", "converged_s"))
    row("reference: no-op plan, API (POST /v1/fleet/plan)",
        med(ref, "noop_plan", "api_ms", "median"), unit="ms")
    row("reference: no-op plan, CLI (anvil fleet plan FILE)",
        med(ref, "noop_plan", "cli_ms", "median"), unit="ms")
    fwd = med(ref, "rolling", 0, "rollout_done_s")
    back = med(ref, "rolling", 1, "rollout_done_s")
    row("reference: rolling driver change, apply -> rollout done",
        (round(statistics.median(fwd[1] + back[1]), 3) if fwd[1] + back[1] else None,
         fwd[1] + back[1]))
    real = results.get("real", [])
    if real:
        n = args.real_nodes
        row(f"{n} nodes: agents started -> all ready (real agents)", med(real, "join", "ready_s"),
            TARGETS["large_ready_s"] if n >= 1000 else None)
        row(f"  of which: all {n} registered", med(real, "join", "registered_s"))
        row(f"  of which: all {n} converged (agents' word)", med(real, "join", "converged_s"))
    if big:
        n = args.large_nodes
        row(f"{n} nodes: generator started -> all ready (load generator)",
            med(big, "join", "ready_s"), TARGETS["large_ready_s"] if n >= 1000 else None)
        row(f"  of which: all {n} registered", med(big, "join", "registered_s"))
        row(f"  of which: all {n} converged (generator's word)", med(big, "join", "converged_s"))
        row(f"{n} nodes: no-op plan, API", med(big, "noop_plan", "api_ms", "median"), unit="ms")
    return rows


def print_table(rows, facts):
    w = max(len(r["metric"]) for r in rows)
    print()
    print(f"host: {facts['hostname']}  nproc {facts['nproc']}  {facts['date']}  git {facts.get('git')}"
          f"  load {'/'.join(facts['loadavg_before'])} -> {'/'.join(facts['loadavg_after'])}"
          f"  took {facts['wall_s']} s")
    print(f"{'metric':<{w}}  {'median':>9}  {'target':>8}  {'met':>4}  all reps")
    print(f"{'-' * w}  {'-' * 9}  {'-' * 8}  {'-' * 4}  {'-' * 8}")
    for r in rows:
        if r["median"] is None:
            continue  # a phase not run
        v = "-" if r["median"] is None else f"{r['median']:.3g} {r['unit']}"
        t = "-" if r["target"] is None else f"< {r['target']:g} s"
        m = "-" if r["met"] is None else ("yes" if r["met"] else "NO")
        a = ", ".join(f"{x:.3g}" for x in r["all"])
        print(f"{r['metric']:<{w}}  {v:>9}  {t:>8}  {m:>4}  {a}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--anvil", default=os.path.join(ROOT, "build/release/anvil"))
    ap.add_argument("--reps", type=int, default=3, help="repetitions of each phase; medians")
    ap.add_argument("--plan-reps", type=int, default=50, help="no-op plans through the API")
    ap.add_argument("--plan-cli-reps", type=int, default=20, help="no-op plans through the CLI")
    ap.add_argument("--large-nodes", type=int, default=1000)
    ap.add_argument("--large-poll", type=float, default=0.1,
                    help="seconds between GET /v1/nodes polls in the large phase")
    ap.add_argument("--real-nodes", type=int, default=0,
                    help="also join this many real agents with the large phase's kind of spec "
                         "(how far real agents go on this machine); 0: not")
    ap.add_argument("--skip-reference", action="store_true")
    ap.add_argument("--skip-large", action="store_true")
    ap.add_argument("--timeout", type=float, default=300, help="seconds any phase may take")
    ap.add_argument("--keep", action="store_true", help="keep the work dirs (logs)")
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    args = ap.parse_args()
    args.anvil = os.path.abspath(args.anvil)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    if not os.access(args.anvil, os.X_OK):
        sys.exit(f"fleet_bench: no anvil binary at {args.anvil} (make release, or --anvil)")

    facts = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ"),
        "hostname": socket.gethostname(), "nproc": os.cpu_count(),
        "kernel": platform.release(), "python": platform.python_version(), "reps": args.reps,
    }
    facts["git"] = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True).stdout.strip()
    with open("/proc/loadavg") as f:
        facts["loadavg_before"] = f.read().split()[:3]
    t_begin = time.monotonic()
    results = {"facts": facts}
    work = tempfile.mkdtemp(prefix="anvil-fleet-bench-")
    cache_root = tempfile.mkdtemp(prefix="anvil-fleet-bench-", dir=CACHE_MOUNT["path"])
    try:
        sysctl, packages = host_sysctl(), installed_packages()
        spec0 = fleet_spec("reference", reference_groups(), "550",
                           os.path.join(cache_root, "guard", "anvil-cache"), sysctl, packages)
        facts["profile_steps"] = guard_profiles(args.anvil, spec0, work)
        facts["profile"] = spec0["profiles"]["h200"]
        log(f"profile steps (each already holds on this host): {facts['profile_steps']}")
        if not args.skip_reference:
            results["reference"] = []
            for r in range(args.reps):
                results["reference"].append(
                    reference_rep(args, work, r, cache_root, sysctl, packages))
        if args.real_nodes:
            results["real"] = []
            for r in range(args.reps):
                results["real"].append(
                    large_rep(args, work, r, cache_root, sysctl, packages, real=True))
        if not args.skip_large:
            results["large"] = []
            for r in range(args.reps):
                results["large"].append(large_rep(args, work, r, cache_root, sysctl, packages))
    finally:
        shutil.rmtree(cache_root, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"work dirs kept in {work}")
    with open("/proc/loadavg") as f:
        facts["loadavg_after"] = f.read().split()[:3]
    facts["wall_s"] = round(time.monotonic() - t_begin, 1)
    rows = table(results, args)
    results["table"] = rows
    print_table(rows, facts)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"fleet-bench-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
    print(f"results: {os.path.relpath(path)}")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as e:
        sys.exit(f"fleet_bench: interrupted ({e or 'Ctrl-C'}); everything it started is stopped")
