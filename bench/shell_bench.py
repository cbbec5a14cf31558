#!/usr/bin/env python3
"""shell_bench.py - an interactive shell's time to a prompt and its keystroke echo,
`anvil shell` next to `srun --pty` on the same host, in one run.

    python3 bench/shell_bench.py [--anvil build/release/anvil] [--runs 7] [--keys 200]
                                 [--skip-slurm]

What it does (the figures and their reading are in docs/benchmarks.md):

  * anvil: a one-node cluster (tests/integration/harness.py: `anvil server` and one
    `anvil agent` with one simulated GPU, on loopback, logging at info), idle between runs.
  * Slurm: bench/slurm.sh starts a private munged + slurmctld + slurmd for this host (the
    node idle between runs).
  * time to a prompt: `anvil shell -- /bin/sh` and `srun --pty /bin/sh`, each started on a
    pty of its own with PS1 set to a marker in its environment (both pass the environment
    on), timed from just before the fork to the moment the marker shows on the pty; then
    `exit`, and the next run waits until the job has ended and its GPU (CPU) is free again.
    One warm-up run each, not counted, then --runs runs alternating anvil and srun, so that
    whatever else the machine does falls on both; medians. For anvil the run is also cut at
    the CLI's own lines and the server's timestamps (see breakdown below), and `anvil
    version` (the CLI's start-up alone) is timed --runs times.
  * keystroke echo: bench/keystroke_latency.py's loop (--keys single bytes, 10 ms apart,
    each timed from the write to the client's pty to the read of its echo) through
    `anvil shell -- sh -c 'exec cat'` and `srun --pty sh -c 'exec cat'`; p50, p90, p99, max.

Standard library only; Debian's /usr/bin/python3 is enough. Prints a table; JSON in
bench/out/. Stops everything it started, also on error.
"""
import argparse
import datetime
import fcntl
import json
import os
import pty
import re
import select
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "integration"))
import harness  # noqa: E402
import keystroke_latency  # noqa: E402

PS1 = "bench-prompt$ "
PROMPT = re.escape(PS1).encode()


def log(msg):
    print("[shell-bench %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


class Timed:
    """A program on a pty of its own: when each part of its output first showed."""

    def __init__(self, argv, env):
        self.wall0 = time.time()
        self.t0 = time.perf_counter()
        pid, fd = pty.fork()
        if pid == 0:
            try:
                os.execvpe(argv[0], argv, env)
            finally:
                os._exit(127)
        self.pid, self.fd, self.out, self.status = pid, fd, b"", None
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))

    def until(self, pattern, timeout=60):
        """Seconds from the start until pattern (bytes regex) first showed; its match."""
        rx = re.compile(pattern)
        deadline = time.time() + timeout
        while True:
            m = rx.search(self.out)
            if m:
                return self.seen_at, m
            r, _, _ = select.select([self.fd], [], [], max(0, deadline - time.time()))
            if not r:
                raise RuntimeError("timed out waiting for %r; output: %r" % (pattern, self.out))
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                raise RuntimeError("ended before %r; output: %r" % (pattern, self.out))
            self.seen_at = time.perf_counter() - self.t0
            self.out += chunk

    def finish(self, timeout=30):
        os.write(self.fd, b"exit\r")
        deadline = time.time() + timeout
        while time.time() < deadline:
            r, _, _ = select.select([self.fd], [], [], 0.05)
            if r:
                try:
                    self.out += os.read(self.fd, 65536)
                except OSError:
                    pass
            pid, st = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(st)
                os.close(self.fd)
                return self.status
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        os.close(self.fd)
        raise RuntimeError("did not exit; output: %r" % self.out)


def median(values):
    return statistics.median(values) if values else float("nan")


# ---- anvil ----

def stream_opened_ms(c, jid):
    """Wall-clock ms at which the server logged the attach stream of job jid open: after
    the agent connected to the session's holder and both answered 101."""
    rx = re.compile(r"^(\S+)Z info  server stream opened job=%d " % jid)
    with open(os.path.join(c.logs, "server.log")) as f:
        for line in f:
            m = rx.match(line)
            if m:
                t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f")
                return t.replace(tzinfo=datetime.timezone.utc).timestamp() * 1000
    return float("nan")


def anvil_prompt(c, env):
    """One `anvil shell -- /bin/sh` to its prompt: times in ms."""
    t = Timed([harness.ANVIL, "shell", "--", "/bin/sh"], env)
    try:
        t_sub, m = t.until(rb"submitted job (\d+)")
        t_run, _ = t.until(rb"is running; Ctrl-\] detaches")
        t_prompt, _ = t.until(PROMPT)
    finally:
        t.finish()
    jid = int(m.group(1))
    job = c.wait_job(jid, timeout=60)
    a = job["attempts"][-1]
    submit_ms = job["submit_time_ms"] - t.wall0 * 1000
    running_ms = a["start_time_ms"] - t.wall0 * 1000
    return {"prompt": t_prompt * 1000, "submitted_line": t_sub * 1000,
            "running_line": t_run * 1000, "server_submit": submit_ms,
            "server_running": running_ms,
            "stream_open": stream_opened_ms(c, jid) - t.wall0 * 1000, "state": job["state"]}


def cli_startup(runs):
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([harness.ANVIL, "version"], stdout=subprocess.DEVNULL, check=True)
        times.append((time.perf_counter() - t) * 1000)
    return times


# ---- Slurm ----

class Slurm:
    def __init__(self, workdir):
        self.dir = os.path.join(workdir, "slurm")
        self.env = None

    def start(self):
        os.makedirs(self.dir, exist_ok=True)
        log("slurm: starting munged, slurmctld, slurmd (bench/slurm.sh)")
        r = subprocess.run(["bash", os.path.join(HERE, "slurm.sh"), "start", self.dir],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError("slurm did not start:\n" + r.stdout + r.stderr)
        self.env = dict(os.environ, SLURM_CONF=os.path.join(self.dir, "slurm.conf"))
        self.version = subprocess.run(["srun", "--version"], env=self.env, capture_output=True,
                                      text=True).stdout.strip()
        log("slurm: ready (%s)" % self.version)

    def idle(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            r = subprocess.run(["squeue", "-h", "-o", "%i"], env=self.env, capture_output=True,
                               text=True)
            if r.returncode == 0 and not r.stdout.strip():
                return
            time.sleep(0.02)
        raise RuntimeError("slurm: jobs still queued after %d s" % timeout)

    def stop(self):
        log("slurm: stopping")
        subprocess.run(["bash", os.path.join(HERE, "slurm.sh"), "stop", self.dir], timeout=60)


def srun_prompt(slurm, env):
    t = Timed(["srun", "--pty", "/bin/sh"], dict(env, SLURM_CONF=slurm.env["SLURM_CONF"]))
    try:
        t_prompt, _ = t.until(PROMPT)
    finally:
        t.finish()
    slurm.idle()
    return {"prompt": t_prompt * 1000}


def srun_echo(slurm, keys):
    env = dict(slurm.env, TERM="xterm")
    with harness.Term(["/usr/bin/srun", "--pty", "sh", "-c", "exec cat"], env) as t:
        time.sleep(0.5)
        lat = keystroke_latency.echo_latencies(t, keys, "")
    slurm.idle()
    return lat


# ---- the run ----

def run(args, workdir):
    env = dict(os.environ, PS1=PS1, TERM="xterm")
    res = {"anvil": [], "srun": [], "date": datetime.datetime.now().isoformat(timespec="seconds"),
           "runs": args.runs, "keys": args.keys}
    slurm = None
    if not args.skip_slurm:
        slurm = Slurm(workdir)
        slurm.start()
        res["slurm_version"] = slurm.version
    try:
        with harness.cluster(agents=1, gpus=1, name="shell-bench",
                             agent_args=["--log-level", "info"]) as c:
            env = c.cli_env(env)
            log("warm-up runs")
            anvil_prompt(c, env)
            if slurm:
                srun_prompt(slurm, env)
            for i in range(args.runs):
                res["anvil"].append(anvil_prompt(c, env))
                if slurm:
                    res["srun"].append(srun_prompt(slurm, env))
                log("run %d: anvil %.1f ms%s" % (
                    i + 1, res["anvil"][-1]["prompt"],
                    ", srun %.1f ms" % res["srun"][-1]["prompt"] if slurm else ""))
            res["cli_startup"] = cli_startup(args.runs)
            log("keystroke echo through anvil shell")
            with c.term("shell", "--", "sh", "-c", "exec cat", env={"TERM": "xterm"}) as t:
                res["anvil_echo"] = keystroke_latency.echo_latencies(t, args.keys,
                                                                     "Ctrl-] detaches")
        if slurm:
            log("keystroke echo through srun --pty")
            res["srun_echo"] = srun_echo(slurm, args.keys)
    finally:
        if slurm:
            slurm.stop()
    return res


def report(res):
    a = res["anvil"]

    def m(key):
        return median([r[key] for r in a])

    lines = ["time to a prompt, median of %d (ms)" % len(a),
             "  anvil shell -- /bin/sh       %7.1f" % m("prompt")]
    if res["srun"]:
        s = median([r["prompt"] for r in res["srun"]])
        lines.append("  srun --pty /bin/sh           %7.1f   (anvil %.1fx sooner)"
                     % (s, s / m("prompt")))
    lines += ["anvil's run, medians (ms from the fork of the CLI)",
              "  CLI start-up (anvil version)  %7.1f" % median(res["cli_startup"]),
              "  the server has the job        %7.1f" % m("server_submit"),
              "  CLI says submitted            %7.1f" % m("submitted_line"),
              "  the server has it running     %7.1f" % m("server_running"),
              "  CLI says running, attaches    %7.1f" % m("running_line"),
              "  holder answers, stream open   %7.1f" % m("stream_open"),
              "  prompt                        %7.1f" % m("prompt"),
              "keystroke echo (ms)            p50     p90     p99     max"]
    for name, key in (("anvil shell", "anvil_echo"), ("srun --pty", "srun_echo")):
        if res.get(key):
            lines.append("  %-26s %7.2f %7.2f %7.2f %7.2f"
                         % ((name,) + keystroke_latency.percentiles(res[key])))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--anvil", default=os.path.join(HERE, "..", "build", "release", "anvil"))
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--keys", type=int, default=200)
    ap.add_argument("--skip-slurm", action="store_true")
    args = ap.parse_args()
    harness.ANVIL = os.path.abspath(args.anvil)
    workdir = tempfile.mkdtemp(prefix="anvil-shell-bench-")
    res = run(args, workdir)
    print(report(res))
    out = os.path.join(HERE, "out")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "shell-%s.json" % time.strftime("%Y%m%d-%H%M%S"))
    with open(path, "w") as f:
        json.dump(res, f, indent=1)
    log("results in %s" % path)
    subprocess.run(["rm", "-rf", workdir])


if __name__ == "__main__":
    main()
