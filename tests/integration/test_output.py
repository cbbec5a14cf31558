"""Every rank's output, as `srun -l` prints it: `anvil run --wait` and
`anvil logs [-f] [--rank R] [--tail N]` against a real 2-agent cluster.
Lines labeled "R: " when the job has several ranks, stdout and stderr kept
apart end to end (the agent's two logs, the API's stream=, the CLI's two
streams), whole lines across chunk boundaries, the failing rank's last
lines, and logs that survive an agent restart; and against a fake server
whose X-Anvil-Next-Offset does not advance, a CLI that stops saying so."""
import http.server
import json
import os
import re
import subprocess
import tempfile
import threading
import time
import urllib.parse

from harness import ANVIL, ApiError, cluster, run_tests, wait_for

RANK1_FAILS = ('if [ "$NODE_RANK" = 1 ]; then echo out-1; sleep 1; echo boom >&2; exit 3; fi; '
               'echo zero-out; sleep 30')


def submitted_id(p):
    return int(re.search(r"submitted job (\d+)", p.stderr + p.stdout).group(1))


def test_run_wait_labels_every_rank_and_exits_with_the_failing_code():
    with cluster(agents=2, gpus=1, name="outwait") as c:
        p = c.cli("run", "--wait", "--nodes", "2", "--", "sh", "-c", RANK1_FAILS)
        assert p.returncode == 3, (p.returncode, p.stdout, p.stderr)
        err = p.stderr.splitlines()
        assert "1: boom" in err, p.stderr
        assert "1: out-1" in p.stdout.splitlines(), p.stdout
        assert "boom" not in p.stdout, p.stdout
        # every rank was shown: no tail of the failing rank repeated
        assert "last lines" not in p.stderr, p.stderr
        assert "rank 1 on node-" in p.stderr, p.stderr


def test_a_quickly_failing_gang_keeps_its_start_time():
    """Rank 1 exits at once, before every rank was reported running: the job
    never got to running, yet it started, and show and the API say when."""
    with cluster(agents=2, gpus=1, name="outquick") as c:
        p = c.cli("run", "--wait", "--nodes", "2", "--", "sh", "-c",
                  'if [ "$NODE_RANK" = 1 ]; then exit 4; fi; sleep 30')
        assert p.returncode == 4, (p.returncode, p.stdout, p.stderr)
        jid = submitted_id(p)
        job = c.job(jid)
        assert job["state"] == "failed", job
        assert job["start_time_ms"] and job["end_time_ms"] >= job["start_time_ms"], job
        show = c.cli("show", str(jid), check=True).stdout
        started = [ln for ln in show.splitlines() if ln.strip().startswith("started")]
        assert started and "-" != started[0].split()[-1], show


def test_run_wait_on_one_rank_ends_with_the_failing_ranks_last_lines():
    with cluster(agents=2, gpus=1, name="outtail") as c:
        p = c.cli("run", "--wait", "--rank", "0", "--nodes", "2", "--", "sh", "-c", RANK1_FAILS)
        assert p.returncode == 3, (p.returncode, p.stdout, p.stderr)
        # rank 0 alone, unlabeled
        assert "zero-out" in p.stdout.splitlines(), p.stdout
        assert "1: " not in p.stdout, p.stdout
        # then rank 1's last lines on stderr, under a line that says whose
        err = p.stderr.splitlines()
        head = [i for i, line in enumerate(err) if "rank 1 failed" in line]
        assert head, p.stderr
        assert err[head[0] + 1:] == ["1: out-1", "1: boom"], p.stderr


def test_stdout_and_stderr_stay_apart():
    with cluster(agents=1, gpus=1, name="outstreams") as c:
        p = c.cli("run", "--wait", "--", "sh", "-c",
                  "echo to-out; echo to-err >&2; echo more-out; echo more-err >&2")
        assert p.returncode == 0, p.stderr
        assert p.stdout == "to-out\nmore-out\n", p.stdout
        assert "to-err\nmore-err\n" in p.stderr and "to-out" not in p.stderr, p.stderr
        jid = submitted_id(p)
        p = c.cli("logs", str(jid), check=True)
        assert (p.stdout, p.stderr) == ("to-out\nmore-out\n", "to-err\nmore-err\n"), p
        # the API: one stream per request, stdout by default
        base = "/v1/jobs/%d/logs" % jid
        assert c.api("GET", base) == b"to-out\nmore-out\n"
        assert c.api("GET", base + "?stream=stderr") == b"to-err\nmore-err\n"
        assert c.api("GET", base + "?stream=stderr&offset=7") == b"more-err\n"
        assert c.api("GET", base + "?stream=stdout&tail=1") == b"more-out\n"
        assert c.api("GET", base + "?stream=stderr&attempt=1&tail=5") == b"to-err\nmore-err\n"
        # a tail within the last `limit` bytes never starts with a cut line
        assert c.api("GET", base + "?tail=5&limit=12") == b"more-out\n"
        assert c.api("GET", base + "?tail=5&limit=10") == b"more-out\n"
        assert c.api("GET", base + "?tail=5&limit=16") == b"to-out\nmore-out\n"
        for query, field in [("?stream=both", "'stream'"), ("?tail=0", "'tail'"),
                             ("?tail=1&offset=0", "'tail'"), ("?attempt=0", "'attempt'")]:
            try:
                c.api("GET", base + query)
                raise AssertionError("%s accepted" % query)
            except ApiError as e:
                assert e.status == 400 and field in str(e.body), (query, e.body)
        try:
            c.api("GET", base + "?attempt=2")
            raise AssertionError("attempt 2 of a job with one")
        except ApiError as e:
            assert e.status == 404 and "1 attempt" in str(e.body), e.body


def test_rank_selects_one_and_labels_mark_many():
    with cluster(agents=2, gpus=1, name="outrank") as c:
        j = c.submit(["sh", "-c", "echo r$NODE_RANK-a; echo e$NODE_RANK >&2; echo r$NODE_RANK-b"],
                     gpus=1, nodes=2)
        assert c.wait_job(j["id"])["state"] == "succeeded"
        p = c.cli("logs", str(j["id"]), check=True)
        assert sorted(p.stdout.splitlines()) == ["0: r0-a", "0: r0-b", "1: r1-a", "1: r1-b"], p
        assert sorted(p.stderr.splitlines()) == ["0: e0", "1: e1"], p
        # each rank's lines in their order
        out = p.stdout.splitlines()
        assert out.index("1: r1-a") < out.index("1: r1-b"), out
        p = c.cli("logs", "--rank", "1", str(j["id"]), check=True)
        assert (p.stdout, p.stderr) == ("r1-a\nr1-b\n", "e1\n"), p
        p = c.cli("logs", "--rank", "2", str(j["id"]))
        assert p.returncode == 1 and "ranks 0 to 1" in p.stderr, p.stderr


def test_tail_per_rank_and_with_follow():
    with cluster(agents=2, gpus=1, name="outtailn") as c:
        j = c.submit(["sh", "-c", "for i in $(seq 1 50); do echo $i; echo e$i >&2; done"],
                     gpus=1, nodes=2)
        assert c.wait_job(j["id"])["state"] == "succeeded"
        p = c.cli("logs", "--tail", "2", str(j["id"]), check=True)
        assert sorted(p.stdout.splitlines()) == ["0: 49", "0: 50", "1: 49", "1: 50"], p.stdout
        assert sorted(p.stderr.splitlines()) == ["0: e49", "0: e50", "1: e49", "1: e50"], p
        p = c.cli("logs", "--tail", "3", "--rank", "1", str(j["id"]), check=True)
        assert (p.stdout, p.stderr) == ("48\n49\n50\n", "e48\ne49\ne50\n"), p
        assert c.cli("logs", "--tail", "0", str(j["id"])).returncode == 2
        # -f with --tail: the last lines so far, then what comes
        gate = os.path.join(c.dir, "gate")
        j = c.submit(["sh", "-c", "seq 1 10; while [ ! -e %s ]; do sleep 0.05; done; echo late"
                      % gate], gpus=1)
        wait_for(lambda: c.api("GET", "/v1/jobs/%d/logs?tail=1" % j["id"]) == b"10\n",
                 what="the first ten lines")
        follower = c.cli_popen("logs", "-f", "--tail", "2", str(j["id"]))
        time.sleep(1)
        open(gate, "w").close()
        out, err = follower.communicate(timeout=30)
        assert follower.returncode == 0, err
        assert out == "9\n10\nlate\n", out


def test_follow_a_running_multi_rank_job_until_it_ends():
    with cluster(agents=2, gpus=1, name="outfollow") as c:
        j = c.submit(["sh", "-c", "for i in 1 2 3; do echo r$NODE_RANK-$i; sleep 0.3; done; "
                      "echo done-$NODE_RANK >&2"], gpus=1, nodes=2)
        p = c.cli("logs", "-f", str(j["id"]), check=True, timeout=30)
        out = p.stdout.splitlines()
        for r in (0, 1):
            assert [x for x in out if x.startswith("%d: " % r)] == \
                ["%d: r%d-%d" % (r, r, i) for i in (1, 2, 3)], out
        assert sorted(p.stderr.splitlines()) == ["0: done-0", "1: done-1"], p.stderr
        assert c.job(j["id"])["state"] == "succeeded"


# 16383 lines of 64 bytes end 64 bytes before the 1 MiB chunk the CLI asks
# for: the next line crosses into the second chunk.
STRADDLE = ("import sys; sys.stdout.write(('x' * 63 + '\\n') * 16383 + 'S' * 150 + "
            "'-straddle\\n' + 'tail\\n')")


def test_a_line_split_across_chunks_comes_out_whole():
    with cluster(agents=2, gpus=1, name="outsplit") as c:
        j = c.submit(["python3", "-c", STRADDLE], gpus=1, nodes=2)
        assert c.wait_job(j["id"])["state"] == "succeeded"
        p = c.cli("logs", str(j["id"]), check=True)
        out = p.stdout.splitlines()
        for r in (0, 1):
            assert "%d: %s-straddle" % (r, "S" * 150) in out, [x for x in out if "S" in x]
            assert out.count("%d: %s" % (r, "x" * 63)) == 16383
        assert len(out) == 2 * (16383 + 2), len(out)
        # while it is written: half a line waits for the rest, with the other
        # rank's lines passing by
        gate = os.path.join(c.dir, "gate")
        j = c.submit(["sh", "-c", 'if [ "$NODE_RANK" = 0 ]; then printf half-; '
                      'while [ ! -e %s ]; do sleep 0.05; done; echo whole; '
                      'else echo one-line; sleep 1; echo other-line; fi' % gate],
                     gpus=1, nodes=2)
        wait_for(lambda: c.api("GET", "/v1/jobs/%d/logs?rank=0" % j["id"]) == b"half-",
                 what="half a line written")
        follower = c.cli_popen("logs", "-f", str(j["id"]))
        time.sleep(1.5)
        open(gate, "w").close()
        out, err = follower.communicate(timeout=30)
        assert follower.returncode == 0, err
        lines = out.splitlines()
        assert "0: half-whole" in lines, out
        assert sorted(lines) == ["0: half-whole", "1: one-line", "1: other-line"], out


def test_logs_survive_an_agent_restart():
    with cluster(agents=1, gpus=1, name="outrestart") as c:
        gate = os.path.join(c.dir, "gate")
        j = c.submit(["sh", "-c", "echo before; echo before-err >&2; "
                      "while [ ! -e %s ]; do sleep 0.05; done; echo after; echo after-err >&2"
                      % gate], gpus=1)
        wait_for(lambda: c.api("GET", "/v1/jobs/%d/logs" % j["id"]) == b"before\n",
                 what="the first line")
        c.kill_agent(0)
        open(gate, "w").close()
        time.sleep(0.3)
        c.start_agent(0)
        assert c.wait_job(j["id"], timeout=30)["state"] == "succeeded"
        p = c.cli("logs", str(j["id"]), check=True)
        assert (p.stdout, p.stderr) == ("before\nafter\n", "before-err\nafter-err\n"), p


def test_follow_goes_on_to_the_next_attempt():
    with cluster(agents=2, gpus=1, name="outretry") as c:
        j = c.submit(["sh", "-c", "echo attempt-$ANVIL_ATTEMPT; echo err-$ANVIL_ATTEMPT >&2; "
                      "printf partial-$ANVIL_ATTEMPT; [ $ANVIL_ATTEMPT = 2 ] || exec sleep 60"],
                     gpus=1, grace_ms=200)
        wait_for(lambda: c.api("GET", "/v1/jobs/%d/logs" % j["id"]) == b"attempt-1\npartial-1",
                 what="attempt 1's output")
        follower = c.cli_popen("logs", "-f", str(j["id"]))
        time.sleep(0.5)
        node = c.job(j["id"])["attempts"][0]["ranks"][0]["node"]
        c.cli("node", "drain", node, check=True)
        out, err = follower.communicate(timeout=30)
        assert follower.returncode == 0, err
        # attempt 1's output whole (its partial line ended), then attempt 2's
        assert out == "attempt-1\npartial-1\nattempt-2\npartial-2\n", out
        lines = err.splitlines()
        assert lines == ["err-1", "anvil: job %d: attempt 2 started; its output follows" % j["id"],
                         "err-2"], err


class StuckOffsetServer(http.server.ThreadingHTTPServer):
    """A server that answers a job and, for its logs, bytes with an
    X-Anvil-Next-Offset that stays where the read began (a peer's mistake:
    a client that believed it would read the same bytes for ever)."""

    def __init__(self, state, tail_next=None):
        super().__init__(("127.0.0.1", 0), StuckOffsetHandler)
        self.state = state
        self.tail_next = tail_next  # the offset a tail read answers; None: 0
        self.log_reads = 0


class StuckOffsetHandler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, body, ctype, headers=()):
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        q = urllib.parse.parse_qs(url.query)
        if url.path == "/v1/jobs/1":
            job = {"id": 1, "state": self.server.state, "nodes": 1, "exit_code": 0,
                   "reason": "", "attempts": [{"number": 1, "ranks": []}]}
            self.answer(json.dumps({"job": job}), "application/json")
        elif url.path == "/v1/jobs/1/logs":
            self.server.log_reads += 1
            at = q.get("offset", ["0"])[0]
            if "tail" in q:
                at = str(self.server.tail_next or 0)
            self.answer("the same line again\n", "text/plain",
                        [("X-Anvil-Next-Offset", at), ("X-Anvil-Attempt", "1"),
                         ("X-Anvil-Job-State", self.server.state)])
        else:
            self.send_error(404)


def logs_against(srv, *args):
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        with tempfile.TemporaryDirectory() as home:
            env = dict(os.environ, ANVIL_HOME=home, ANVIL_TOKEN="t",
                       ANVIL_SERVER="http://127.0.0.1:%d" % srv.server_address[1])
            start = time.time()
            p = subprocess.run([ANVIL, "logs"] + list(args) + ["1"], capture_output=True,
                               text=True, env=env, timeout=20)
            return p, time.time() - start
    finally:
        srv.shutdown()
        srv.server_close()


def test_logs_stop_when_the_next_offset_does_not_advance():
    """`anvil logs` (and -f, and --tail) against a server whose next offset
    stays put: exits 1 at once, naming the offset that did not advance,
    instead of reading the same bytes for ever."""
    for state, args, tail_next in [("succeeded", [], None), ("running", ["-f"], None),
                                   ("succeeded", ["--tail", "5"], 3)]:
        srv = StuckOffsetServer(state, tail_next)
        p, took = logs_against(srv, *args)
        assert p.returncode == 1, (args, p.returncode, p.stdout[-500:], p.stderr)
        want = "X-Anvil-Next-Offset %d, which does not advance" % (tail_next or 0)
        assert want in p.stderr and "rank 0's stdout" in p.stderr, (args, p.stderr)
        assert took < 10 and srv.log_reads <= 3, (args, took, srv.log_reads)
        assert "the same line again" not in p.stdout, (args, p.stdout[-500:])


run_tests([test_run_wait_labels_every_rank_and_exits_with_the_failing_code,
           test_a_quickly_failing_gang_keeps_its_start_time,
           test_run_wait_on_one_rank_ends_with_the_failing_ranks_last_lines,
           test_stdout_and_stderr_stay_apart, test_rank_selects_one_and_labels_mark_many,
           test_tail_per_rank_and_with_follow, test_follow_a_running_multi_rank_job_until_it_ends,
           test_a_line_split_across_chunks_comes_out_whole, test_logs_survive_an_agent_restart,
           test_follow_goes_on_to_the_next_attempt,
           test_logs_stop_when_the_next_offset_does_not_advance])
