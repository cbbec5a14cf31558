#!/usr/bin/env python3
"""keystroke_latency.py - keystroke echo latency through `anvil shell`.

    python3 bench/keystroke_latency.py [--anvil build/release/anvil] [--keys 200]

Starts a one-node cluster (tests/integration/harness.py: real server and agent on
loopback), opens `anvil shell -- sh -c 'exec cat'` on a pty and types one byte at a time:
the time from writing a byte to the CLI's terminal to reading its echo back. The echo is the
remote terminal's (cat in canonical mode: the line discipline echoes), so each keystroke
crosses CLI -> server -> agent -> session holder -> PTY and back. Prints p50, p90, p99, max.
bench/shell_bench.py uses echo_latencies() for anvil and for `srun --pty` side by side.
Standard library only.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
import harness  # noqa: E402


def echo_latencies(t, keys, ready):
    """Types keys single bytes, 10 ms apart, into t (a harness.Term running a remote
    `sh -c 'exec cat'` behind some client) once `ready` (a regex) has shown; returns each
    byte's write-to-echo time in seconds. Ends cat with ^D."""
    t.expect(ready, 60)
    time.sleep(1.0)  # the session's start is not a keystroke
    t.buf = b""
    lat = []
    letters = b"abcdefghijklmnopqrstuvwxyz"
    for i in range(keys):
        ch = letters[i % 26:i % 26 + 1]
        start = time.perf_counter()
        t.send(ch)
        t.expect(ch.decode(), 10)
        lat.append(time.perf_counter() - start)
        if i % 40 == 39:  # a line: cat prints it back
            t.send("\r")
            t.expect("\n")
            t.expect("\n")
            t.buf = b""
        time.sleep(0.01)
    t.send("\r\x04")  # the line (if any) ends, then cat's stdin
    t.wait()
    return lat


def percentiles(lat):
    """(p50, p90, p99, max) in ms of latencies in seconds."""
    lat = sorted(lat)

    def pct(q):
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1000

    return pct(.5), pct(.9), pct(.99), lat[-1] * 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--anvil", default="build/release/anvil")
    ap.add_argument("--keys", type=int, default=200)
    args = ap.parse_args()
    harness.ANVIL = os.path.abspath(args.anvil)
    with harness.cluster(agents=1, gpus=1, name="keystrokes") as c:
        with c.term("shell", "--", "sh", "-c", "exec cat", env={"TERM": "xterm"}) as t:
            lat = echo_latencies(t, args.keys, "Ctrl-] detaches")
    print("keystrokes=%d p50=%.2fms p90=%.2fms p99=%.2fms max=%.2fms"
          % ((len(lat),) + percentiles(lat)))


if __name__ == "__main__":
    main()
