#!/usr/bin/env python3
"""slow_clients.py - how long `anvil jobs` takes while 10,000 slow connections are held against
the server (docs/benchmarks.md, "Slow clients").

    python3 bench/slow_clients.py [--anvil build/release/anvil] [--conns 10000] [--calls 20]
                                  [--spacing 1.5]

What it does:

  * anvil: `anvil up --port 0 --agents 1` (cluster_bench.py's Anvil) with the daemons' default
    settings (docs/operations.md: 10,000 connections in all, 1,024 per address, 5 s for a
    request's headers), and --jobs finished jobs for `anvil jobs` to list.
  * without the attack: --calls runs of `anvil jobs` (one warm-up first, not counted), each
    timed from just before the fork to the exit.
  * the attack: tests/integration/slowclients.py, --conns connections to the server from
    127.0.0.2-127.0.0.21 (500 per address), each sending a request line, then a header byte
    a second, never finishing, and opened again 0.1-0.3 s after the server closes it (cut
    at the header deadline, or closed to make room once 10,000 are open). Timing starts
    once the attacker holds 95% of --conns; the same --calls runs are timed, --spacing s apart
    (30 s in all by default: six waves of the header deadline), and how many connections the
    attacker holds is sampled at each call.

Prints medians and maxima (ms), the connections held, the server's drops by reason, its CPU
time and resident memory; JSON in bench/out/. A call that fails counts as failed and is
reported. Standard library only; Debian's /usr/bin/python3 is enough.
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
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import cluster_bench as cb  # noqa: E402  (its Anvil cluster)
from slowclients import SlowClients  # noqa: E402


def log(msg):
    print("[slow-clients %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def timed_calls(a, n, spacing, attack=None, pid=None):
    env = dict(os.environ, ANVIL_HOME=a.home)
    for k in ("ANVIL_SERVER", "ANVIL_TOKEN"):
        env.pop(k, None)
    ms, held, failed, rss = [], [], [], []
    for i in range(n + 1):  # the first warms the caches, not counted
        t0 = time.perf_counter()
        r = subprocess.run([a.binary, "jobs", "--limit", "50"], env=env, capture_output=True,
                           text=True, timeout=120)
        t = (time.perf_counter() - t0) * 1000
        if i == 0:
            continue
        if r.returncode != 0:
            failed.append(r.stderr.strip()[-300:])
        ms.append(t)
        if attack:
            held.append(attack.open_now())
        if pid:
            rss.append(proc_usage(pid)[1])
        time.sleep(spacing)
    return ms, held, failed, rss


def summary(v):
    return {"median": round(statistics.median(v), 1), "max": round(max(v), 1),
            "min": round(min(v), 1)} if v else {}


def server_pid(up_pid):
    """The `anvil server` that `anvil up` started."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if int(st.rsplit(")", 1)[1].split()[1]) == up_pid and b"server" in argv[1:2]:
            return int(d)
    return None


def proc_usage(pid):
    hz = os.sysconf("SC_CLK_TCK")
    with open("/proc/%d/stat" % pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    cpu = (int(parts[11]) + int(parts[12])) / hz
    rss = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
    return cpu, rss


def drops(url):
    """The server's connection counts; {} when it does not answer (a server without the
    guard, under the attack)."""
    out = {}
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
            text = r.read().decode()
    except OSError:
        return out
    for line in text.splitlines():
        if line.startswith("anvil_http_connection_drops_total{"):
            out[line.split('"')[1]] = int(float(line.split()[-1]))
        elif line.startswith("anvil_http_connections "):
            out["open"] = int(float(line.split()[-1]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--anvil", default=os.path.join(HERE, "..", "build", "release", "anvil"))
    ap.add_argument("--conns", type=int, default=10000)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--spacing", type=float, default=1.5,
                    help="seconds between calls: 20 calls span several header deadlines")
    args = ap.parse_args()
    load0 = os.getloadavg()
    result = {"conns": args.conns, "calls": args.calls, "jobs": args.jobs,
              "load_before": load0, "nproc": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="anvil-slow-bench-") as work:
        a = cb.Anvil(args.anvil, 1, 2, work, None, 0)
        try:
            a.start()
            pid = server_pid(a.proc.pid)
            log("submitting %d jobs" % args.jobs)
            for i in range(args.jobs):
                a.request("POST", "/v1/jobs", {"command": ["true"], "gpus": 0,
                                               "name": "b%d" % i})
            ms, _, failed, _ = timed_calls(a, args.calls, args.spacing)
            result["quiet"] = dict(summary(ms), failed=len(failed))
            log("quiet: %s" % result["quiet"])
            cpu0, rss0 = proc_usage(pid)
            result["quiet"]["server_rss_mib"] = round(rss0)
            t0 = time.monotonic()
            with SlowClients([(a.host, a.port)], per_target=args.conns, addresses=20,
                             reopen=0.2) as slow:
                deadline = time.monotonic() + 120
                while slow.open_now() < 0.95 * args.conns:
                    if time.monotonic() > deadline:
                        raise RuntimeError("the attacker holds only %d" % slow.open_now())
                    time.sleep(0.2)
                log("attack on: %d connections held" % slow.open_now())
                before = drops(a.server)
                ms, held, failed, rss = timed_calls(a, args.calls, args.spacing, slow, pid)
                after = drops(a.server)
                cpu1, _ = proc_usage(pid)
                result["attack"] = dict(summary(ms), failed=len(failed), errors=failed[:3],
                                        held=summary(held), opened=slow.opened,
                                        server_open=after.get("open"),
                                        drops_during_calls={k: after[k] - before.get(k, 0)
                                                            for k in after if k != "open"},
                                        server_cpu_s=round(cpu1 - cpu0, 1),
                                        seconds=round(time.monotonic() - t0, 1),
                                        server_rss_mib=round(rss[-1]),
                                        server_rss_mib_first=round(rss[0]),
                                        server_rss_mib_max=round(max(rss)),
                                        server_rss_mib_each=[round(x) for x in rss])
        finally:
            a.stop()
    result["load_after"] = os.getloadavg()
    q, t = result["quiet"], result["attack"]
    print("load average %.2f before, %.2f after; %d CPUs; `anvil jobs` (%d jobs), %d calls "
          "each" % (load0[0], result["load_after"][0], os.cpu_count(), args.jobs, args.calls))
    print("  without the attack     median %7.1f ms   max %7.1f ms   failed %d" %
          (q["median"], q["max"], q["failed"]))
    print("  %5d slow connections median %7.1f ms   max %7.1f ms   failed %d" %
          (args.conns, t["median"], t["max"], t["failed"]))
    print("  held by the attacker at each call: median %d, min %d; server's open connections "
          "after: %s" % (t["held"]["median"], t["held"]["min"], t["server_open"]))
    for e in t["errors"]:
        print("  a failed call said: %s" % e)
    print("  server drops during the calls: %s" %
          ", ".join("%s %d" % kv for kv in t["drops_during_calls"].items() if kv[1]))
    print("  server: %.1f s CPU over %.0f s of attack, %d MiB resident at the last call (%d "
          "at the first, %d before the attack); target (max < 1000 ms): %s" %
          (t["server_cpu_s"], t["seconds"], t["server_rss_mib"], t["server_rss_mib_first"],
           q["server_rss_mib"],
           "met" if t["max"] < 1000 and not t["failed"] else "NOT met"))
    out = os.path.join(HERE, "out")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "slow-clients-%s.json" %
                        datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    log("results in " + path)


if __name__ == "__main__":
    main()
