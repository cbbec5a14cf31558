#!/usr/bin/env python3
"""wf_bench.py - what a workflow costs on top of its jobs.

    python3 bench/wf_bench.py [--chain 200] [--array 1000] [--fan 1000] [--sweep 30] [--reps 3]

Against `anvil up` with 4 agents x 8 simulated GPUs (cluster_bench.py's cluster), every
task `true` on 1 GPU, each workflow POSTed compiled (POST /v1/workflows), as `anvil wf run`
sends it:

  * chain: N tasks, each needing the previous one. Submit to the execution's end.
  * array: a sweep of M children (map list, no concurrency limit). Submit to end.
  * fan: a fan-out/fan-in DAG of F tasks: one root, F - 2 tasks needing it, one sink
    needing them all. Submit to end, and that divided by F: the orchestration cost per task
    (a trivial task's whole life: its job's start and end included).
  * rerun: the same fan DAG with `cache: true` everywhere, run once to fill the cache, then
    again: submit to end of the all-hit rerun (nothing runs).
  * sweep start: a sweep of S children, each `sleep 30`: submit until every child's job is
    running (its ranks reported running by their agents).

With --bundle, every workflow carries a code bundle (a small tar stored once, as `anvil wf
run` stores the working tree), so every task runs under the task wrapper (`anvil _task`:
the bundle unpacked once per node, the command run in it); without it, trivial tasks with
nothing to move run their command directly. Medians over --reps. The Slurm side of the
chain and the array is deps_bench.py's. Standard library only.
"""
import argparse
import hashlib
import http.client
import io
import os
import tarfile
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import cluster_bench as cb  # noqa: E402

POLL_S = 0.02  # how often a wait asks whether the work has ended


def task(name, needs=(), cache=False, command=("true",), **kw):
    t = {"name": name, "command": list(command), "resources": {"gpus": 1}}
    if needs:
        t["needs"] = list(needs)
    if cache:
        t["cache"] = {"enabled": True}
    t.update(kw)
    return t


def chain(n, name):
    return {"name": name, "tasks": [task("t0")] +
            [task("t%d" % i, needs=["t%d" % (i - 1)]) for i in range(1, n)]}


def array(m, name, command=("true",)):
    return {"name": name, "tasks": [task("each", command=command,
                                         map={"list": [{"i": i} for i in range(m)]})]}


def fan(f, name, cache):
    mid = ["m%d" % i for i in range(f - 2)]
    return {"name": name, "tasks": [task("root", cache=cache)] +
            [task(m, needs=["root"], cache=cache) for m in mid] +
            [task("sink", needs=mid, cache=cache)]}


def store_bundle(a):
    """A small code bundle PUT into the object store; its key."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        data = b"print('the code')\n"
        info = tarfile.TarInfo("train.py")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    body = buf.getvalue()
    hexd = hashlib.sha256(body).hexdigest()
    c = http.client.HTTPConnection(a.host, a.port, timeout=30)
    c.request("PUT", "/v1/objects/sha256/" + hexd, body=body,
              headers={"Authorization": "Bearer " + a.token})
    r = c.getresponse()
    r.read()
    if r.status not in (200, 201):
        raise RuntimeError("bundle upload: HTTP %d" % r.status)
    return "sha256/" + hexd


class Bench:
    def __init__(self, a, bundle=None):
        self.a = a
        self.bundle = bundle

    def submit(self, wf):
        body = {"workflow": wf}
        if self.bundle:
            body["bundle"] = self.bundle
        return self.a.request("POST", "/v1/workflows", body)["workflow"]["id"]

    def wait_end(self, xid, timeout=600):
        """Polls every 20 ms (as the Slurm side is polled) until the execution ends; the
        execution as listed then (its end_ms is the server's wall clock at its end)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            x = self.a.request("GET", "/v1/workflows?limit=%d" % 50)["workflows"]
            w = next((w for w in x if w["id"] == xid), {"state": "running"})
            if w["state"] != "running":
                if w["state"] != "succeeded":
                    raise RuntimeError("workflow %d ended %s" % (xid, w["state"]))
                return w
            time.sleep(POLL_S)
        raise RuntimeError("workflow %d not done after %d s" % (xid, timeout))

    def timed(self, wf):
        """Submit to the execution's end as the server recorded it (end_ms), not to when
        the poll saw it: the poll's period is no part of the figure, and it can be slow
        enough (20 ms) not to take the CPU of the 2-core machine from the cluster."""
        t0 = time.time()
        xid = self.submit(wf)
        return self.wait_end(xid)["end_ms"] / 1000.0 - t0

    def sweep_start(self, s, rep):
        wf = array(s, "sweep-%d" % rep, command=("sleep", "30"))
        t0 = time.monotonic()
        xid = self.submit(wf)
        while True:
            runs = self.a.request("GET", "/v1/workflows/%d" % xid)["workflow"]["run_list"]
            jobs = [r.get("job_id") for r in runs]
            if all(jobs):
                js = self.a.request("GET", "/v1/jobs?state=running&limit=1000")["jobs"]
                running = {j["id"] for j in js}
                if all(j in running for j in jobs):
                    took = time.monotonic() - t0
                    break
            if time.monotonic() - t0 > 60:
                raise RuntimeError("sweep children not all running after 60 s")
            time.sleep(0.005)
        self.a.request("POST", "/v1/workflows/%d/cancel" % xid)
        self.wait_cancelled(xid)
        return took

    def wait_cancelled(self, xid):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.a.request("GET", "/v1/workflows/%d" % xid)["workflow"]["state"] != "running":
                return
            time.sleep(0.05)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chain", type=int, default=200)
    ap.add_argument("--array", type=int, default=1000)
    ap.add_argument("--fan", type=int, default=1000)
    ap.add_argument("--sweep", type=int, default=30)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--bundle", action="store_true", help="every workflow with a code bundle")
    ap.add_argument("--anvil", default=os.path.join(ROOT, "build/release/anvil"))
    args = ap.parse_args()
    res = {k: [] for k in ("chain", "array", "fan", "rerun", "sweep")}
    with tempfile.TemporaryDirectory(prefix="anvil-wf-bench-") as work:
        job = cb.Job("bash", 0, work)
        a = cb.Anvil(args.anvil, 4, 8, work, job, 1)
        try:
            a.start()
            b = Bench(a, store_bundle(a) if args.bundle else None)
            for r in range(args.reps):
                res["chain"].append(b.timed(chain(args.chain, "chain-%d" % r)))
                res["array"].append(b.timed(array(args.array, "array-%d" % r)))
                res["fan"].append(b.timed(fan(args.fan, "fan-%d" % r, False)))
                b.timed(fan(args.fan, "cached-%d" % r, True))  # fills the cache
                res["rerun"].append(b.timed(fan(args.fan, "cached-%d" % r, True)))
                res["sweep"].append(b.sweep_start(args.sweep, r))
                cb.log("rep %d: %s" % (r, ", ".join("%s %.3f s" % (k, v[-1])
                                                       for k, v in res.items())))
        finally:
            a.stop()
    med = {k: statistics.median(v) for k, v in res.items()}
    print(f"{'metric':<64} {'median':>9}  target")
    rows = (("chain", f"{args.chain}-task chain workflow, submit to end (s)", "-"),
            ("array", f"{args.array}-child sweep workflow, submit to end (s)", "-"),
            ("fan", f"{args.fan}-task fan-out/fan-in DAG, submit to end (s)", "-"))
    for key, what, target in rows:
        print(f"{what:<64} {med[key]:>9.3f}  {target}")
    print(f"{'... per task (ms)':<64} {med['fan'] * 1000 / args.fan:>9.2f}  < 5 ms")
    print(f"{'all-hit rerun of the DAG, submit to end (s)':<64} {med['rerun']:>9.3f}  < 1 s")
    print(f"{f'{args.sweep}-child sweep, submit to all running (s)':<64} {med['sweep']:>9.3f}"
          "  < 0.5 s")
    print("medians over %d reps; 4 agents x 8 simulated GPUs, 1 GPU per task; %s" %
          (args.reps, "with a code bundle (the task wrapper)" if args.bundle else
           "no code bundle (trivial tasks run without the wrapper)"))


if __name__ == "__main__":
    main()
