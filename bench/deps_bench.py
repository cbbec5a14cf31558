#!/usr/bin/env python3
"""deps_bench.py - an afterok chain and a job array, anvil next to Slurm on the same host.

    python3 bench/deps_bench.py [--chain 200] [--array 1000] [--reps 1] [--slurm-reps 1]
                                [--skip-slurm]

  * chain: N jobs of `true`, each submitted after the previous one with its id as the
    dependency, one client process per submit: `anvil run --after PREV -- true` against
    `sbatch --dependency=afterok:PREV`. Time from the first submit to the last job's end.
  * array: one submit of M jobs of `true`: `anvil run --array 1-M -- true` against
    `sbatch --array=1-M`. Time from the submit to the last job's end.
  * the same two as workflows (anvil only; Slurm has no workflows): a chain of N tasks,
    each needing the previous one, and a sweep of M children, each POSTed compiled
    (POST /v1/workflows, as `anvil wf run` sends it); submit to the execution's end.

The clusters are cluster_bench.py's: `anvil up` with 2 agents x 8 simulated GPUs (1 GPU per
job) and a one-host Slurm with 16 CPU slots (bench/slurm.sh). Standard library only.

A job's end is the time its system recorded it for anvil (the server's end_time_ms, a
workflow's end_ms; each wait polls every 20 ms) and the time a 20 ms poll of squeue saw it
gone for Slurm (sacct keeps whole seconds). Both clusters live in one temporary directory
(TMPDIR, else /tmp); the log line `a new file takes N us` tells how busy its file system
was (see file_create_us).
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import cluster_bench as cb  # noqa: E402  (its Anvil and Slurm clusters)
import wf_bench as wb  # noqa: E402  (the workflows)


class AnvilDeps:
    def __init__(self, a):
        self.a = a
        self.env = dict(os.environ, ANVIL_HOME=a.home)
        for k in ("ANVIL_SERVER", "ANVIL_TOKEN"):
            self.env.pop(k, None)

    def run(self, *args):
        r = subprocess.run([self.a.binary, "run", "--json"] + list(args) + ["--", "true"],
                           env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise RuntimeError("anvil run failed: " + r.stderr)
        return cb.json.loads(r.stdout)["job"]["id"]

    # Each figure runs from just before the first submit to the last job's end as the
    # server recorded it (end_time_ms, its wall clock), read once a poll every 20 ms (as
    # Slurm's side is polled) sees nothing left to wait for: the poll's period is no part
    # of the figure, and a faster poll would take CPU of this 2-core machine from the
    # cluster it measures.

    def chain(self, n):
        t0 = time.time()
        prev = self.run()
        for _ in range(n - 1):
            prev = self.run("--after", str(prev))
        self.wait_done(f"/v1/jobs/{prev}", lambda o: o["job"]["state"])
        return self.a.request("GET", f"/v1/jobs/{prev}")["job"]["end_time_ms"] / 1000.0 - t0

    def array(self, m):
        t0 = time.time()
        first = self.run("--array", f"1-{m}")
        path = f"/v1/jobs?array={first}&state=active&limit=1"
        self.wait_done(path, lambda o: "active" if o["jobs"] else "succeeded")
        jobs = self.a.request("GET", f"/v1/jobs?array={first}&state=all&limit={m + 1}")["jobs"]
        bad = [j["id"] for j in jobs if j["state"] != "succeeded"]
        if len(jobs) != m or bad:
            raise RuntimeError(f"anvil: array {first}: {len(jobs)} members, not succeeded: {bad}")
        return max(j["end_time_ms"] for j in jobs) / 1000.0 - t0

    def wf_chain(self, n, rep):
        return wb.Bench(self.a).timed(wb.chain(n, "chain-%d" % rep))

    def wf_array(self, m, rep):
        return wb.Bench(self.a).timed(wb.array(m, "array-%d" % rep))

    def wait_done(self, path, state_of):
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            s = state_of(self.a.request("GET", path))
            if s in ("succeeded", "failed", "cancelled", "lost"):
                if s != "succeeded":
                    raise RuntimeError(f"anvil: {path} ended {s}")
                return
            time.sleep(wb.POLL_S)
        raise RuntimeError("anvil: not done after 600 s")


class SlurmDeps:
    def __init__(self, s, workdir):
        self.s = s
        self.script = os.path.join(workdir, "true.sh")
        with open(self.script, "w") as f:
            f.write("#!/bin/sh\ntrue\n")
        os.chmod(self.script, 0o755)
        self.out = os.path.join(s.dir, "out", "%j.out")

    def sbatch(self, *extra):
        r = subprocess.run(["sbatch", "--parsable", "-J", "deps", "-n", "1", "-c", "1",
                            "--no-requeue", "-o", self.out] + list(extra) + [self.script],
                           env=self.s.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            raise RuntimeError("sbatch failed: " + r.stderr)
        return r.stdout.strip().split(";")[0]

    def chain(self, n):
        t0 = time.monotonic()
        prev = self.sbatch()
        for _ in range(n - 1):
            prev = self.sbatch(f"--dependency=afterok:{prev}")
        self.s.wait_all_done([prev], 1200)
        return time.monotonic() - t0

    def array(self, m):
        t0 = time.monotonic()
        jid = self.sbatch(f"--array=1-{m}")
        self.s.wait_all_done([jid], 1200)
        return time.monotonic() - t0


def file_create_us(work, n=200):
    """Microseconds to create an empty file in work (median of n): every rank's logs are new
    files, and on ext4 without a journal (this machine's) a new inode skips each one deleted
    in the same block group in the last 1-6 minutes, so this cost moves with what else on
    the machine deleted files nearby (tests, earlier runs' clean-up): a quiet directory
    makes a file in about 20 us, one after thousands of deletions in 600 us."""
    d = os.path.join(work, "fs-probe")
    os.makedirs(d)
    took = []
    for i in range(n):
        t = time.perf_counter()
        os.close(os.open(os.path.join(d, str(i)), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        took.append(time.perf_counter() - t)
    return statistics.median(took) * 1e6


def cpu_times():
    """The machine's CPU time so far (s): (busy, stolen): stolen is what the hypervisor gave
    to other guests while this one had work, which slows every figure here."""
    v = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / tick, (v[7] if len(v) > 7 else 0) / tick


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chain", type=int, default=200)
    ap.add_argument("--array", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--anvil", default=os.path.join(ROOT, "build/release/anvil"))
    ap.add_argument("--slurm-reps", type=int, default=1,
                    help="Slurm's reps (its chain alone takes over three minutes)")
    ap.add_argument("--skip-slurm", action="store_true")
    args = ap.parse_args()
    if not args.skip_slurm:
        subprocess.run(["bash", os.path.join(ROOT, "scripts/deps.sh"), "slurm-wlm", "munge"],
                       check=True)
    res = {"anvil": {"chain": [], "array": [], "wf_chain": [], "wf_array": []},
           "slurm": {"chain": [], "array": [], "wf_chain": [], "wf_array": []}}
    with tempfile.TemporaryDirectory(prefix="anvil-deps-bench-") as work:
        cb.log(f"work dir {work}: a new file takes {file_create_us(work):.0f} us")
        job = cb.Job("bash", 0, work)
        a = cb.Anvil(args.anvil, 2, 8, work, job, 1)
        s = None
        try:
            a.start()
            ad = AnvilDeps(a)
            t0, (busy0, stolen0) = time.monotonic(), cpu_times()
            for r in range(args.reps):
                res["anvil"]["chain"].append(ad.chain(args.chain))
                res["anvil"]["array"].append(ad.array(args.array))
                res["anvil"]["wf_chain"].append(ad.wf_chain(args.chain, r))
                res["anvil"]["wf_array"].append(ad.wf_array(args.array, r))
                cb.log(f"anvil rep {r}: " + ", ".join(f"{k} {v[-1]:.2f} s"
                                                      for k, v in res["anvil"].items()))
            span, (busy1, stolen1) = time.monotonic() - t0, cpu_times()
            ncpu = os.cpu_count() or 1
            cb.log(f"anvil reps: the machine {100 * (busy1 - busy0) / (span * ncpu):.0f} % busy, "
                   f"{100 * (stolen1 - stolen0) / (span * ncpu):.0f} % of its CPU time stolen "
                   f"by the host")
            a.stop()
            if not args.skip_slurm:
                s = cb.Slurm(work, job, 16, "cgroup")
                s.start()
                sd = SlurmDeps(s, work)
                for r in range(args.slurm_reps):
                    res["slurm"]["chain"].append(sd.chain(args.chain))
                    res["slurm"]["array"].append(sd.array(args.array))
                    cb.log(f"slurm rep {r}: chain {res['slurm']['chain'][-1]:.2f} s, "
                           f"array {res['slurm']['array'][-1]:.2f} s")
        finally:
            a.stop()
            if s:
                s.stop()
    print(f"{'metric':<52} {'anvil':>9} {'slurm':>9} {'ratio':>7}")
    for key, what, peer in (
            ("chain", f"{args.chain}-job afterok chain, first submit to last end (s)", "chain"),
            ("array", f"{args.array}-job array, submit to last end (s)", "array"),
            ("wf_chain", f"... the chain as a workflow, submit to end (s)", "chain"),
            ("wf_array", f"... the array as a workflow sweep, submit to end (s)", "array")):
        av = statistics.median(res["anvil"][key])
        sv = statistics.median(res["slurm"][peer]) if res["slurm"][peer] else None
        ratio = f"{sv / av:.0f}x" if sv else "-"
        print(f"{what:<52} {av:>9.2f} {sv if sv is None else round(sv, 2)!s:>9} {ratio:>7}")
    print("ratio = slurm time / anvil time; medians over reps")


if __name__ == "__main__":
    main()
