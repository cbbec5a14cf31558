#!/usr/bin/env python3
"""cli_bench.py - how long a CLI command takes, start to exit, against a running cluster.

    python3 bench/cli_bench.py [--anvil BIN]... [--jobs 1000] [--rounds 25]

Starts `anvil up --port 0 --agents 2 --gpus-per-agent 8` (cluster_bench.py's cluster, with the
first --anvil binary), submits --jobs jobs of `true` through the API and waits until they have
all ended, then times, --rounds times each and alternating between the binaries given (so that
whatever else the machine does falls on all of them):

  * `anvil version`                      the start-up alone, no HTTP call
  * `anvil jobs`                         start-up, one GET /v1/jobs, the table printed
  * `anvil jobs --limit 1000 --json`     the same with a large answer
  * `anvil jobs` to an unreachable server (ANVIL_SERVER=http://127.0.0.1:1): start-up, the
    HTTP client loaded, a refused connect, the message
  * `/bin/true`, for what starting any program from here costs

Each is timed from just before the fork to the exit (subprocess.run); medians, min and p90 in
ms. Several binaries (`--anvil old --anvil new`) are compared in the same run. Standard
library only; JSON in bench/out/.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cluster_bench as cb  # noqa: E402  (its Anvil cluster)


def log(msg):
    print("[cli-bench %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def timed(argv, env):
    t0 = time.perf_counter()
    r = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.perf_counter() - t0) * 1000, r.returncode


def fill(a, n):
    ids = [a.request("POST", "/v1/jobs", {"command": ["true"], "gpus": 0, "name": "b%d" % i})
           ["job"]["id"] for i in range(n)]
    deadline = time.monotonic() + 600
    while a.request("GET", "/v1/jobs?state=active&limit=1")["jobs"]:
        if time.monotonic() > deadline:
            raise RuntimeError("jobs still active after 600 s")
        time.sleep(0.2)
    return ids


def cases(a, binary):
    env = dict(os.environ, ANVIL_HOME=a.home)
    for k in ("ANVIL_SERVER", "ANVIL_TOKEN"):
        env.pop(k, None)
    away = dict(env, ANVIL_SERVER="http://127.0.0.1:1")
    return [
        ("version", [binary, "version"], env, 0),
        ("jobs", [binary, "jobs"], env, 0),
        ("jobs --limit 1000 --json", [binary, "jobs", "--limit", "1000", "--json"], env, 0),
        ("jobs, unreachable server", [binary, "jobs"], away, 3),
    ]


def summary(v):
    v = sorted(v)
    return {"median": statistics.median(v), "min": v[0], "p90": v[int(0.9 * (len(v) - 1))],
            "n": len(v)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--anvil", action="append")
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=25)
    args = ap.parse_args()
    binaries = [os.path.abspath(b) for b in
                (args.anvil or [os.path.join(HERE, "..", "build", "release", "anvil")])]
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="anvil-cli-bench-") as work:
        a = cb.Anvil(binaries[0], 2, 8, work, None, 0)
        try:
            a.start()
            log("submitting %d jobs" % args.jobs)
            fill(a, args.jobs)
            times = {}
            for rnd in range(args.rounds + 1):  # round 0 warms the caches, not counted
                for b in binaries:
                    for name, argv, env, want in cases(a, b):
                        ms, rc = timed(argv, env)
                        if rc != want:
                            raise RuntimeError("%s: exit %d, expected %d" % (argv, rc, want))
                        if rnd:
                            times.setdefault(b, {}).setdefault(name, []).append(ms)
                ms, _ = timed(["/bin/true"], os.environ)
                if rnd:
                    times.setdefault("/bin/true", {}).setdefault("true", []).append(ms)
        finally:
            a.stop()
    load1 = os.getloadavg()
    result = {"jobs": args.jobs, "rounds": args.rounds, "load_before": load0,
              "load_after": load1,
              "ms": {b: {k: summary(v) for k, v in d.items()} for b, d in times.items()}}
    print("load average %.2f before, %.2f after; %d jobs in the cluster; medians of %d (ms)" %
          (load0[0], load1[0], args.jobs, args.rounds))
    for b in binaries:
        print(b)
        for name, s in result["ms"][b].items():
            print("  %-28s %6.2f   (min %.2f, p90 %.2f)" % (name, s["median"], s["min"], s["p90"]))
    t = result["ms"]["/bin/true"]["true"]
    print("/bin/true                      %6.2f   (min %.2f, p90 %.2f)" %
          (t["median"], t["min"], t["p90"]))
    out = os.path.join(HERE, "out")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "cli-%s.json" % datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    log("results in " + path)


if __name__ == "__main__":
    main()
