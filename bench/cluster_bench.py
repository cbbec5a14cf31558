#!/usr/bin/env python3
"""cluster_bench.py - submit-to-running latency and end-to-end throughput of trivial jobs,
anvil next to Slurm on the same host, in one run.

    python3 bench/cluster_bench.py [--jobs 1000] [--anvil build/release/anvil] [--skip-slurm]

What it does (details and the reasoning in docs/benchmarks.md):

  * anvil: `anvil up --port 0 --agents 2 --gpus-per-agent 8` with a private ANVIL_HOME; jobs
    go through the HTTP API (POST /v1/jobs, keep-alive connections), 1 GPU each, so 16 run at
    once. The same numbers are also taken through the CLI (`anvil run`, one process per
    submit), the like-for-like peer of one `sbatch` process per job.
  * Slurm: bench/slurm.sh configures munged + slurmctld + slurmd for this one host in a private
    directory (16 CPU slots, so 16 one-CPU jobs run at once) and starts them; jobs go through
    one `sbatch` process per job, and (Slurm's best case) one `sbatch --array=1-N`.
  * Every job is the same trivial program, bench/stamp.c built static: its first action reads
    the wall clock and reports "KEY STAMP" to this script's listener over loopback TCP (anvil
    runs it directly; Slurm's batch script has it as its #! interpreter). Both systems run on
    this host, so job and client share one clock. --job bash uses bash + $EPOCHREALTIME.
  * latency: --latency-jobs submitted one at a time at random (Poisson, --latency-rate per
    second) moments on an otherwise idle cluster; submit-to-running = the job's stamp - the
    client clock just before the submit call.
  * throughput: --jobs submitted as fast as --threads submitters can, then wait until the system
    reports every job finished; throughput = jobs / (all reported finished - first submit).

Standard library only; Debian's /usr/bin/python3 is enough. Results: a table on stdout and
JSON in bench/out/. Stops everything it started, also on error or Ctrl-C.
"""

import argparse
import concurrent.futures
import datetime
import http.client
import json
import os
import platform
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def log(msg):
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def now_ns():
    return time.time_ns()


def parse_epochrealtime(s):
    """bash's $EPOCHREALTIME ("1795992900.852574", locale decimal mark) -> ns."""
    s = s.replace(",", ".")
    sec, _, frac = s.partition(".")
    return int(sec) * 1_000_000_000 + int((frac + "000000000")[:9])


def percentile(values, p):
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    v = sorted(values)
    k = max(0, min(len(v) - 1, -(-len(v) * p // 100) - 1))
    return v[int(k)]


def summarize_ms(values_ms):
    if not values_ms:
        return None
    return {
        "n": len(values_ms),
        "p50": round(percentile(values_ms, 50), 3),
        "p90": round(percentile(values_ms, 90), 3),
        "p99": round(percentile(values_ms, 99), 3),
        "max": round(max(values_ms), 3),
        "mean": round(statistics.fmean(values_ms), 3),
    }


# --------------------------------------------------------------------------------------------
# The start listener: every job connects once and sends "KEY STAMP".


class StartListener:
    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4096)
        self.port = self.sock.getsockname()[1]
        self.starts = {}  # key -> job's own start stamp (ns)
        self.cond = threading.Condition()
        self.closed = False
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            try:
                conn.settimeout(5)
                data = b""
                while True:
                    chunk = conn.recv(256)
                    if not chunk:
                        break
                    data += chunk
            except OSError:
                pass
            finally:
                conn.close()
            for line in data.decode(errors="replace").splitlines():
                parts = line.split()
                if len(parts) != 2:
                    continue
                try:
                    stamp = parse_epochrealtime(parts[1])
                except ValueError:
                    continue
                with self.cond:
                    self.starts.setdefault(parts[0], stamp)
                    self.cond.notify_all()

    def wait_for(self, key, timeout):
        deadline = time.monotonic() + timeout
        with self.cond:
            while key not in self.starts:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)
            return self.starts[key]

    def get(self, key):
        with self.cond:
            return self.starts.get(key)

    def close(self):
        self.sock.close()


class Job:
    """The trivial job, identical for both systems. Its first action stamps the wall clock and
    reports "KEY STAMP" to the listener; a Slurm array task appends "-TASKID" to its key.

    kind "stamp" (default): bench/stamp.c built static, exec'd directly (anvil: the command is
    [stamp, PORT, KEY]; Slurm: the batch script's first line is "#!STAMP PORT", so slurmstepd's
    exec of the script is an exec of stamp). No shell: the figure is the scheduler's.
    kind "bash": bash, stamping with the builtin $EPOCHREALTIME (adds bash's start-up, a few ms
    here, to both systems alike)."""

    def __init__(self, kind, port, workdir):
        self.kind = kind
        self.port = port
        self.stamp = os.path.join(workdir, "stamp")
        if kind == "stamp":
            r = subprocess.run(["gcc", "-O2", "-static", "-o", self.stamp,
                                os.path.join(HERE, "stamp.c")],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if r.returncode != 0:
                r = subprocess.run(["gcc", "-O2", "-o", self.stamp, os.path.join(HERE, "stamp.c")],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if r.returncode != 0:
                raise RuntimeError("cannot build bench/stamp.c (use --job bash):\n" + r.stdout)
        self.bash_line = ('echo "$1${SLURM_ARRAY_TASK_ID:+-$SLURM_ARRAY_TASK_ID} $EPOCHREALTIME" '
                          f'>/dev/tcp/127.0.0.1/{port}')

    def command(self, key):
        """anvil's command array for one job."""
        if self.kind == "stamp":
            return [self.stamp, str(self.port), key]
        return ["bash", "-c", self.bash_line, "job", key]

    def batch_script(self):
        """Slurm's batch script (its one argument is the key)."""
        if self.kind == "stamp":
            return f"#!{self.stamp} {self.port}\n"
        return "#!/bin/bash\n" + self.bash_line + "\n"


# --------------------------------------------------------------------------------------------
# anvil


class Anvil:
    name = "anvil"

    def __init__(self, binary, agents, gpus_per_agent, workdir, job, gpus_per_job):
        self.binary = os.path.abspath(binary)
        self.agents = agents
        self.gpus_per_agent = gpus_per_agent
        self.home = os.path.join(workdir, "anvil-home")
        self.job = job
        self.gpus_per_job = gpus_per_job
        self.proc = None
        self.failures = []
        self.out_lines = []
        self.server = None
        self.token = None
        self.local = threading.local()

    def start(self):
        os.makedirs(self.home, exist_ok=True)
        env = dict(os.environ, ANVIL_HOME=self.home)
        for k in ("ANVIL_SERVER", "ANVIL_TOKEN"):
            env.pop(k, None)
        cmd = [self.binary, "up", "--port", "0", "--agents", str(self.agents),
               "--gpus-per-agent", str(self.gpus_per_agent)]
        log("anvil: " + " ".join(cmd))
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        ready = threading.Event()

        def drain():
            for line in self.proc.stdout:
                self.out_lines.append(line.rstrip("\n"))
                if line.startswith("anvil up: ready"):
                    ready.set()
            ready.set()

        threading.Thread(target=drain, daemon=True).start()
        if not ready.wait(60) or self.proc.poll() is not None:
            raise RuntimeError("anvil up did not become ready:\n" + "\n".join(self.out_lines[-30:]))
        with open(os.path.join(self.home, "client.json")) as f:
            client = json.load(f)
        self.server = client["server"]
        self.token = client["token"]
        u = urllib.parse.urlsplit(self.server)
        self.host, self.port = u.hostname, u.port or 80
        log(f"anvil: ready at {self.server}")

    def _conn(self):
        c = getattr(self.local, "conn", None)
        if c is None:
            c = http.client.HTTPConnection(self.host, self.port, timeout=60)
            self.local.conn = c
        return c

    def request(self, method, path, body=None):
        headers = {"Authorization": f"Bearer {self.token}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        for attempt in range(2):
            c = self._conn()
            try:
                c.request(method, path, body=data, headers=headers)
                r = c.getresponse()
                raw = r.read()
                break
            except (http.client.HTTPException, OSError):
                c.close()
                self.local.conn = None
                if attempt:
                    raise
        if r.status >= 300:
            raise RuntimeError(f"anvil {method} {path}: HTTP {r.status}: {raw[:300]!r}")
        return json.loads(raw) if raw else None

    def submit(self, key):
        body = {"command": self.job.command(key),
                "gpus": self.gpus_per_job, "name": key, "grace_ms": 1000}
        return self.request("POST", "/v1/jobs", body)["job"]["id"]

    def submit_cli(self, key):
        env = dict(os.environ, ANVIL_HOME=self.home)
        r = subprocess.run([self.binary, "run", "--gpus", str(self.gpus_per_job), "--name", key,
                            "--json", "--"] + self.job.command(key), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        if r.returncode != 0:
            raise RuntimeError(f"anvil run failed ({r.returncode}): {r.stderr.strip()}")
        try:
            return json.loads(r.stdout)["job"]["id"]
        except (ValueError, KeyError):
            return None

    def wait_all_done(self, ids, timeout):
        """Polls until no job is active; returns (t_done_ns, counts of our jobs by state)."""
        deadline = time.monotonic() + timeout
        while True:
            active = self.request("GET", "/v1/jobs?state=active&limit=1")["jobs"]
            if not active:
                t_done = now_ns()
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"anvil: jobs still active after {timeout}s: {active}")
            time.sleep(0.005)
        want = set(i for i in ids if i is not None)
        jobs = self.request("GET", "/v1/jobs?state=all&limit=100000")["jobs"]
        counts = {}
        for j in jobs:
            if j["id"] in want:
                counts[j["state"]] = counts.get(j["state"], 0) + 1
                if j["state"] != "succeeded" and len(self.failures) < 20:
                    self.failures.append(self.explain(j["id"]))
        return t_done, counts

    def explain(self, job_id):
        """A failed job's state, reason, exit code and log tail (for the JSON and the log)."""
        j = self.request("GET", f"/v1/jobs/{job_id}")["job"]
        out = {k: j.get(k) for k in ("id", "name", "state", "reason", "exit_code")}
        try:
            c = self._conn()
            c.request("GET", f"/v1/jobs/{job_id}/logs?limit=2000",
                      headers={"Authorization": f"Bearer {self.token}"})
            out["log"] = c.getresponse().read().decode(errors="replace")[-500:]
        except (http.client.HTTPException, OSError) as e:
            out["log"] = f"(no log: {e})"
        log(f"anvil: job {job_id} did not succeed: {out}")
        return out

    def breakdown(self, trace):
        """Where the submit-to-running time goes, from the server's own timestamps (ms
        resolution): client -> server accepted (submit_time_ms), accepted -> the agent's
        "running" report processed (start_time_ms), report -> the job's own stamp."""
        ids, t_submit, stamps = trace
        parts = {"client_to_accepted": [], "accepted_to_running_reported": [],
                 "running_reported_to_job_stamp": []}
        for i, t0, st in zip(ids, t_submit, stamps):
            j = self.request("GET", f"/v1/jobs/{i}")["job"]
            sub, start = j.get("submit_time_ms"), j.get("start_time_ms")
            if not sub or not start:
                continue
            parts["client_to_accepted"].append(sub - t0 / 1e6)
            parts["accepted_to_running_reported"].append(start - sub)
            parts["running_reported_to_job_stamp"].append(st / 1e6 - start)
        return {k: summarize_ms(v) for k, v in parts.items()}

    def stop(self):
        if not self.proc:
            return
        if self.proc.poll() is None:
            log("anvil: stopping (SIGINT to anvil up)")
            try:
                self.proc.send_signal(signal.SIGINT)
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                log("anvil: anvil up did not stop in 30s; killing its process group")
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()


# --------------------------------------------------------------------------------------------
# Slurm


class Slurm:
    name = "slurm"

    def __init__(self, workdir, job, slots, proctrack):
        self.dir = os.path.join(workdir, "slurm")
        self.proctrack = proctrack
        self.job = job
        self.slots = slots
        self.env = None
        self.started = False
        self.script = os.path.join(self.dir, "job.sh")

    def start(self):
        os.makedirs(self.dir, exist_ok=True)
        log("slurm: configuring and starting munged, slurmctld, slurmd (bench/slurm.sh)")
        self.started = True
        r = subprocess.run(["bash", os.path.join(HERE, "slurm.sh"), "start", self.dir,
                            str(self.slots), self.proctrack], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError("slurm did not start:\n" + r.stdout + r.stderr)
        self.env = dict(os.environ, SLURM_CONF=os.path.join(self.dir, "slurm.conf"))
        with open(self.script, "w") as f:
            f.write(self.job.batch_script())
        os.chmod(self.script, 0o755)
        v = subprocess.run(["sbatch", "--version"], env=self.env, stdout=subprocess.PIPE, text=True)
        self.version = v.stdout.strip()
        log(f"slurm: ready ({self.version})")

    def _sbatch(self, extra, key):
        cmd = ["sbatch", "--parsable", "-J", "bench", "-n", "1", "-c", "1", "--no-requeue",
               "-o", os.path.join(self.dir, "out", "%j.out")] + extra + [self.script, key]
        r = subprocess.run(cmd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
        if r.returncode != 0:
            raise RuntimeError(f"sbatch failed ({r.returncode}): {r.stderr.strip()}")
        return r.stdout.strip().split(";")[0]

    def submit(self, key):
        return self._sbatch([], key)

    def submit_array(self, n, key):
        return self._sbatch([f"--array=1-{n}"], key)

    def _squeue(self, states):
        r = subprocess.run(["squeue", "-h", "-t", states, "-o", "%i %T"], env=self.env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"squeue failed: {r.stderr.strip()}")
        return [line.split() for line in r.stdout.splitlines() if line.strip()]

    def wait_all_done(self, ids, timeout):
        deadline = time.monotonic() + timeout
        while True:
            if not self._squeue("PD,CF,R,CG,S,RQ,RS,RH,SI,SO,ST"):
                t_done = now_ns()
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"slurm: jobs still active after {timeout}s")
            time.sleep(0.02)
        counts = {}
        want = set(str(i) for i in ids)
        for jid, state in self._squeue("all"):
            base = jid.split("_")[0]
            if jid in want or base in want:
                counts[state.lower()] = counts.get(state.lower(), 0) + 1
        return t_done, counts

    def stop(self):
        if not self.started:
            return
        log("slurm: stopping slurmd, slurmctld, munged")
        subprocess.run(["bash", os.path.join(HERE, "slurm.sh"), "stop", self.dir], timeout=60)
        self.started = False


# --------------------------------------------------------------------------------------------
# Phases


def latency_phase(system, listener, n, tag, rate, seed, submit=None):
    """n jobs submitted one at a time at random (Poisson) moments, `rate` per second on
    average: a lightly loaded cluster. Random arrival times keep the samples from locking onto
    any periodic timer inside the system under test (Slurm schedules once a second)."""
    submit = submit or system.submit
    rnd = random.Random(seed)
    keys = [f"{tag}{i}" for i in range(n)]
    t_submit, ids = [0] * n, [None] * n
    t_next = time.monotonic()
    for i in range(n):
        delay = t_next - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        t_submit[i] = now_ns()
        ids[i] = submit(keys[i])
        t_next += rnd.expovariate(rate)
    lat_ms, stamps = [], []
    for i, k in enumerate(keys):
        t_start = listener.wait_for(k, 60)
        if t_start is None:
            raise RuntimeError(f"{system.name}: job {k} did not start within 60s")
        stamps.append(t_start)
        lat_ms.append((t_start - t_submit[i]) / 1e6)
    # Let the last jobs finish so that the next phase starts on an idle cluster.
    system.wait_all_done(ids, 120)
    return lat_ms, (ids, t_submit, stamps)


HZ = os.sysconf("SC_CLK_TCK")


def machine_cpu():
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]
    return sum(v) - idle, sum(v)


def process_cpu(match):
    """CPU seconds of the live processes whose command line contains match, by
    role: anvil's argv[1] (server, agent, up), "shim" for a forked child of an
    agent; "+children" counts what each role has reaped (exited shims, jobs)."""
    procs = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if not any(match.encode() in a for a in cmd):
            continue
        procs[int(pid)] = (cmd[1].decode(errors="replace") if len(cmd) > 1 else "?",
                           int(fields[1]), [int(x) for x in fields[11:15]])
    out = {}
    for pid, (role, ppid, (ut, st, cut, cst)) in procs.items():
        if role == "agent" and ppid in procs and procs[ppid][0] == "agent":
            role = "shim"
        out[role] = out.get(role, 0.0) + (ut + st) / HZ
        out[role + "+children"] = out.get(role + "+children", 0.0) + (cut + cst) / HZ
    return out


def cpu_per_job(before, after, n):
    """ms of CPU per job by role between two (process_cpu, machine_cpu) readings."""
    (p0, (b0, t0)), (p1, (b1, t1)) = before, after
    res = {k: round(1000 * (p1.get(k, 0.0) - p0.get(k, 0.0)) / n, 3) for k in sorted(p1)}
    res["machine_busy_pct"] = round(100 * (b1 - b0) / max(1, t1 - t0), 1)
    res["machine_ms_per_job"] = round(1000 * (b1 - b0) / HZ / n, 3)
    return res


def burst_phase(system, listener, n, threads, tag, submit=None):
    """n submits from `threads` submitters as fast as they go; throughput to all finished."""
    submit = submit or system.submit
    keys = [f"{tag}{i}" for i in range(n)]
    t_submit = [0] * n
    ids = [None] * n

    def worker(w):
        for i in range(w, n, threads):
            t_submit[i] = now_ns()
            ids[i] = submit(keys[i])

    home = getattr(system, "home", None)
    cpu0 = (process_cpu(home), machine_cpu()) if home else None
    t0 = now_ns()
    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        for f in [ex.submit(worker, w) for w in range(threads)]:
            f.result()
    t_submitted = now_ns()
    t_done, counts = system.wait_all_done(ids, 600)
    res = finish_burst(system, listener, n, keys, t_submit, t0, t_submitted, t_done, counts)
    if cpu0:
        res["cpu_ms_per_job"] = cpu_per_job(cpu0, (process_cpu(home), machine_cpu()), n)
        log(f"{system.name}: CPU ms per job {res['cpu_ms_per_job']}")
    return res


def array_phase(system, listener, n, tag):
    keys = [f"{tag}-{i}" for i in range(1, n + 1)]
    t0 = now_ns()
    jid = system.submit_array(n, tag)
    t_submitted = now_ns()
    t_done, counts = system.wait_all_done([jid], 600)
    return finish_burst(system, listener, n, keys, [t0] * n, t0, t_submitted, t_done, counts)


def finish_burst(system, listener, n, keys, t_submit, t0, t_submitted, t_done, counts):
    # A job's stamp can reach the listener a moment after the system reports it finished.
    deadline = time.monotonic() + 10
    while sum(1 for k in keys if listener.get(k) is not None) < n and time.monotonic() < deadline:
        time.sleep(0.05)
    starts = [listener.get(k) for k in keys]
    started = [s for s in starts if s is not None]
    ok = counts.get("succeeded", 0) + counts.get("completed", 0)
    if len(started) < n or ok < n:
        log(f"{system.name}: WARNING: {len(started)}/{n} jobs reported a start, states {counts}")
    queue_ms = [(s - t) / 1e6 for s, t in zip(starts, t_submit) if s is not None]
    last_start = max(started) if started else t_done
    return {
        "jobs": n,
        "jobs_started": len(started),
        "states": counts,
        "submit_s": round((t_submitted - t0) / 1e9, 3),
        "submit_rate": round(n / max(1e-9, (t_submitted - t0) / 1e9), 1),
        "all_finished_s": round((t_done - t0) / 1e9, 3),
        "throughput": round(n / ((t_done - t0) / 1e9), 1),
        "dispatch_throughput": round(n / max(1e-9, (last_start - t0) / 1e9), 1),
        "burst_submit_to_running_ms": summarize_ms(queue_ms),
    }


def run_system(system, listener, args, reps, extra_variants):
    """Start the system, run `reps` repetitions of every variant, stop it. Returns results."""
    res = {"reps": []}
    system.start()
    try:
        # Warm-up: a few jobs, not measured (first fork/exec of everything, page cache).
        latency_phase(system, listener, 3, f"{system.name[0]}w", args.latency_rate, 0)
        for r in range(reps):
            rep = {}
            log(f"{system.name}: rep {r + 1}/{reps}: latency, {args.latency_jobs} jobs at {args.latency_rate}/s")
            lat, trace = latency_phase(system, listener, args.latency_jobs, f"{system.name[0]}L{r}-",
                                     args.latency_rate, args.seed + r)
            rep["latency_ms"] = summarize_ms(lat)
            if isinstance(system, Anvil):
                rep["latency_breakdown_ms"] = system.breakdown(trace)
            log(f"{system.name}: latency p50 {rep['latency_ms']['p50']} ms, "
                f"p99 {rep['latency_ms']['p99']} ms")
            log(f"{system.name}: rep {r + 1}/{reps}: throughput, {args.jobs} jobs, "
                f"{args.threads} submitters")
            rep["burst"] = burst_phase(system, listener, args.jobs, args.threads,
                                       f"{system.name[0]}T{r}-")
            log(f"{system.name}: {rep['burst']['throughput']} jobs/s "
                f"(all {args.jobs} finished in {rep['burst']['all_finished_s']} s)")
            for name, fn in extra_variants:
                log(f"{system.name}: rep {r + 1}/{reps}: {name}")
                rep[name] = fn(r)
            res["reps"].append(rep)
    finally:
        system.stop()
    return res


def median_of(reps, *path):
    vals = []
    for rep in reps:
        v = rep
        for p in path:
            v = v.get(p) if isinstance(v, dict) else None
            if v is None:
                break
        if isinstance(v, (int, float)):
            vals.append(v)
    return round(statistics.median(vals), 3) if vals else None


# --------------------------------------------------------------------------------------------
# Report


def fmt(v, unit=""):
    if v is None:
        return "-"
    if isinstance(v, float) and v >= 100:
        return f"{v:.0f}{unit}"
    return f"{v:.3g}{unit}" if isinstance(v, float) else f"{v}{unit}"


def ratio(a, b, lower_is_better):
    if a is None or b is None or a == 0 or b == 0:
        return None
    return round(b / a if lower_is_better else a / b, 2)


def build_table(results):
    A = results.get("anvil", {}).get("reps", [])
    S = results.get("slurm", {}).get("reps", [])
    rows = []

    def row(label, a, s, lower):
        rows.append({"metric": label, "anvil": a, "slurm": s, "lower_is_better": lower,
                     "ratio": ratio(a, s, lower)})

    row("submit-to-running p50, light load (ms) [API vs sbatch]",
        median_of(A, "latency_ms", "p50"), median_of(S, "latency_ms", "p50"), True)
    row("submit-to-running p99, light load (ms) [API vs sbatch]",
        median_of(A, "latency_ms", "p99"), median_of(S, "latency_ms", "p99"), True)
    row("throughput, N jobs (jobs/s) [API vs sbatch per job]",
        median_of(A, "burst", "throughput"), median_of(S, "burst", "throughput"), False)
    row("submit-to-running p50, light load (ms) [CLI vs sbatch]",
        median_of(A, "cli_latency", "latency_ms", "p50"), median_of(S, "latency_ms", "p50"), True)
    row("submit-to-running p99, light load (ms) [CLI vs sbatch]",
        median_of(A, "cli_latency", "latency_ms", "p99"), median_of(S, "latency_ms", "p99"), True)
    row("throughput (jobs/s) [CLI vs sbatch, a process per job]",
        median_of(A, "cli_burst", "throughput"), median_of(S, "burst", "throughput"), False)
    row("throughput (jobs/s) [API vs Slurm job array, its best case]",
        median_of(A, "burst", "throughput"), median_of(S, "array", "throughput"), False)
    row("dispatch rate, N jobs (jobs/s) [API vs sbatch per job]",
        median_of(A, "burst", "dispatch_throughput"), median_of(S, "burst", "dispatch_throughput"),
        False)
    return rows


def print_table(rows, facts):
    w = max(len(r["metric"]) for r in rows)
    print()
    print(f"host: {facts['hostname']}  nproc {facts['nproc']}  {facts['date']}  "
          f"load {'/'.join(facts['loadavg_before'])} -> {'/'.join(facts['loadavg_after'])}  "
          f"took {facts['wall_s']} s")
    print(f"jobs: {facts['job']}; anvil: {facts['anvil_cluster']}; slurm: {facts['slurm_cluster']}")
    print(f"latency: {facts['latency_jobs']} jobs at {facts['latency_rate_per_s']}/s (Poisson); "
          f"throughput: {facts['jobs']} jobs, {facts['threads']} submitters; reps {facts['reps']}")
    print(f"{'metric':<{w}}  {'anvil':>9}  {'slurm':>9}  {'ratio':>8}")
    print(f"{'-' * w}  {'-' * 9}  {'-' * 9}  {'-' * 8}")
    for r in rows:
        rt = f"{r['ratio']:.1f}x" if r["ratio"] is not None else "-"
        print(f"{r['metric']:<{w}}  {fmt(r['anvil']):>9}  {fmt(r['slurm']):>9}  {rt:>8}")
    print("ratio = how many times better anvil is (slurm/anvil for latency, anvil/slurm for "
          "throughput); medians over reps")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000, help="jobs in the throughput burst")
    ap.add_argument("--latency-jobs", type=int, default=200,
                    help="jobs for the lightly loaded latency (default 200)")
    ap.add_argument("--latency-rate", type=float, default=5.0,
                    help="mean submits per second (Poisson) during the latency phase (default 5)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the latency arrival times")
    ap.add_argument("--anvil", default=os.path.join(ROOT, "build/release/anvil"))
    ap.add_argument("--agents", type=int, default=2)
    ap.add_argument("--gpus-per-agent", type=int, default=8)
    ap.add_argument("--gpus-per-job", type=int, default=1)
    ap.add_argument("--threads", type=int, default=4, help="concurrent submitters in the burst")
    ap.add_argument("--reps", type=int, default=1, help="repetitions; figures are medians")
    ap.add_argument("--skip-slurm", action="store_true")
    ap.add_argument("--skip-anvil", action="store_true")
    ap.add_argument("--no-cli", action="store_true", help="skip the anvil CLI variant")
    ap.add_argument("--no-array", action="store_true", help="skip the Slurm job-array variant")
    ap.add_argument("--no-deps", action="store_true", help="do not install slurm-wlm/munge")
    ap.add_argument("--slurm-proctrack", choices=("cgroup", "linuxproc"), default="cgroup",
                    help="Slurm's ProctrackType: cgroup (default; jobs in cgroups as in anvil)")
    ap.add_argument("--job", choices=("stamp", "bash"), default="stamp",
                    help="the trivial job: static bench/stamp.c (default) or bash")
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    args = ap.parse_args()

    # SIGTERM/SIGHUP behave like Ctrl-C so that the finally blocks stop every daemon.
    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    if not args.skip_slurm and not args.no_deps:
        subprocess.run(["bash", os.path.join(ROOT, "scripts/deps.sh"), "slurm-wlm", "munge"],
                       check=True)
    if not args.skip_anvil and not os.access(args.anvil, os.X_OK):
        sys.exit(f"cluster_bench: no anvil binary at {args.anvil} "
                 "(cmake --preset release && cmake --build build/release, or pass --anvil)")

    facts = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ"),
        "hostname": socket.gethostname(),
        "nproc": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "jobs": args.jobs,
        "latency_jobs": args.latency_jobs,
        "latency_rate_per_s": args.latency_rate,
        "threads": args.threads,
        "job": args.job,
        "reps": args.reps,
        "anvil_cluster": f"{args.agents} agents x {args.gpus_per_agent} simulated GPUs, "
                         f"{args.gpus_per_job} GPU per job",
        "slurm_cluster": f"1 node, {args.agents * args.gpus_per_agent} CPU slots, 1 CPU per job, "
                         f"proctrack/{args.slurm_proctrack}",
    }
    try:
        facts["git"] = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      text=True).stdout.strip()
    except OSError:
        pass
    with open("/proc/loadavg") as f:
        facts["loadavg_before"] = f.read().split()[:3]

    t_begin = time.monotonic()
    listener = StartListener()
    results = {"facts": facts}
    # Not under /tmp, and open to all: a fenced rank has a /tmp of its own and
    # runs as an unprivileged account (docs/security.md), so stamp must be
    # where that account finds and may execute it.
    with tempfile.TemporaryDirectory(prefix="anvil-bench-", dir="/var/tmp") as work:
        os.chmod(work, 0o755)
        try:
            job = Job(args.job, listener.port, work)
            if not args.skip_anvil:
                a = Anvil(args.anvil, args.agents, args.gpus_per_agent, work, job,
                          args.gpus_per_job)
                variants = []
                if not args.no_cli:
                    def cli_latency(r):
                        lat, _ = latency_phase(a, listener, args.latency_jobs, f"aCL{r}-",
                                               args.latency_rate, args.seed + r,
                                               submit=a.submit_cli)
                        return {"latency_ms": summarize_ms(lat)}

                    def cli_burst(r):
                        return burst_phase(a, listener, args.jobs, args.threads, f"aCT{r}-",
                                           submit=a.submit_cli)
                    variants = [("cli_latency", cli_latency), ("cli_burst", cli_burst)]
                results["anvil"] = run_system(a, listener, args, args.reps, variants)
                results["anvil"]["failed_jobs"] = a.failures
            if not args.skip_slurm:
                s = Slurm(work, job, args.agents * args.gpus_per_agent, args.slurm_proctrack)
                variants = []
                if not args.no_array:
                    variants = [("array", lambda r: array_phase(s, listener, args.jobs,
                                                                f"sA{r}"))]
                try:
                    results["slurm"] = run_system(s, listener, args, args.reps, variants)
                    results["slurm"]["version"] = getattr(s, "version", None)
                except KeyboardInterrupt:
                    raise
                except Exception as e:  # report, keep anvil's figures
                    log(f"slurm: FAILED: {e}")
                    results["slurm"] = {"error": str(e), "reps": []}
        finally:
            listener.close()

    with open("/proc/loadavg") as f:
        facts["loadavg_after"] = f.read().split()[:3]
    facts["wall_s"] = round(time.monotonic() - t_begin, 1)
    rows = build_table(results)
    results["table"] = rows
    print_table(rows, facts)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"cluster-bench-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
    print(f"results: {os.path.relpath(path)}")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as e:
        sys.exit(f"cluster_bench: interrupted ({e or 'Ctrl-C'}); everything it started is stopped")
