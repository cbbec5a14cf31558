"""Slow and many clients do not stop the API (src/base/connguard.h). Against the server and
against an agent at once (slowclients.py: connections that send a header byte a second and
never finish, from loopback addresses other than 127.0.0.1, each reopened once closed):

  1. a hog: 400 from one address (127.0.0.2): 150 are taken (--http-max-per-address), the
     rest refused at once, and the taken ones are cut at the 2 s header deadline;
  2. then a crowd: 5,000 more from 127.0.0.3-127.0.0.22, past --http-max-connections (1,000
     here): each newcomer makes room by closing the connection that waited longest;

and all along `anvil jobs` and `anvil logs` (which the server reads through the agent's port)
answer. Each daemon counts every kind of drop on /metrics (valid for promtool) and logs each
kind at most once a minute: a handful of lines for tens of thousands of drops."""
import os
import re
import subprocess
import tempfile
import time
import urllib.request

from harness import cluster, run_tests, wait_for
from slowclients import SlowClients

PROMTOOL = "/usr/bin/promtool"
MAX, PER_ADDRESS = 1000, 150
LIMITS = ["--http-max-connections", str(MAX), "--http-max-per-address", str(PER_ADDRESS),
          "--http-header-timeout", "2s"]
# what the daemons log about drops (connguard.c): one line per kind and interval
DROP_LINE = re.compile(r"connections (refused|closed|not accepted)|libmicrohttpd")


def metrics(url):
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        return r.read().decode()


def sample(text, name, reason=None):
    key = name + ('{reason="%s"}' % reason if reason else "")
    for line in text.splitlines():
        if line.startswith(key + " "):
            return float(line.split()[-1])
    raise AssertionError("no sample %s in:\n%s" % (key, text))


def drops(url, prefix, reason):
    return sample(metrics(url), prefix + "_http_connection_drops_total", reason)


def promtool_ok(text):
    assert os.access(PROMTOOL, os.X_OK), "promtool missing: scripts/deps.sh installs prometheus"
    with tempfile.TemporaryFile("w+") as f:
        f.write(text)
        f.seek(0)
        p = subprocess.run([PROMTOOL, "check", "metrics"], stdin=f, capture_output=True,
                           text=True)
    # the agent's GPU series keep the DCGM exporter's names, which promtool lints
    lints = [l for l in (p.stdout + p.stderr).splitlines() if l.strip()
             and not l.startswith("DCGM_FI_")]
    assert not lints and (p.returncode == 0 or "DCGM_FI_" in text), lints


def answers(c, jid):
    """`anvil jobs` lists the job, `anvil logs` (through the agent) prints its output."""
    p = c.cli("jobs", check=True)
    assert re.search(r"\b%d\b.*succeeded" % jid, p.stdout), p.stdout
    p = c.cli("logs", str(jid), check=True)
    assert p.stdout.splitlines() == ["out-1", "out-2"], p.stdout


def test_the_api_answers_under_slow_clients():
    with cluster(agents=1, gpus=1, name="slow", server_args=LIMITS, agent_args=LIMITS) as c:
        j = c.submit(["sh", "-c", "echo out-1; echo out-2"], gpus=0)
        c.wait_job(j["id"])
        agent_url = c.nodes()[0]["agent_url"]
        daemons = ((c.url, "anvil", "server.log"), (agent_url, "anvil_agent", "node-1.log"))
        targets = [("127.0.0.1", int(u.rsplit(":", 1)[1])) for u, _, _ in daemons]
        with SlowClients(targets, per_target=400, addresses=1, first=2) as hog:
            for url, prefix, _ in daemons:
                for reason in ("per_address", "header_deadline"):
                    wait_for(lambda: drops(url, prefix, reason) > 0, timeout=60,
                             what="%s drops at %s" % (reason, url))
            answers(c, j["id"])
            with SlowClients(targets, per_target=5000, addresses=20, first=3) as crowd:
                for url, prefix, _ in daemons:
                    wait_for(lambda: drops(url, prefix, "evicted") > 0, timeout=60,
                             what="a full table at %s" % url)
                rounds = 0
                end = time.monotonic() + 10  # a few waves of reopened connections
                while time.monotonic() < end or rounds < 3:
                    answers(c, j["id"])
                    rounds += 1
                held = crowd.open_now() + hog.open_now()
                reopened = crowd.opened - 2 * 5000
        assert held > MAX and reopened > 0, (held, reopened)

        for url, prefix, log in daemons:
            text = metrics(url)
            promtool_ok(text)
            assert sample(text, prefix + "_http_connections_max") == MAX, text
            # never more open than the limit and those being closed to make room
            assert sample(text, prefix + "_http_connections") <= MAX + MAX // 8 + 64, text
            total = sum(drops(url, prefix, r) for r in ("per_address", "evicted",
                                                        "header_deadline"))
            lines = [l for l in c.log(log).splitlines() if DROP_LINE.search(l)]
            kinds = {}
            for l in lines:
                kind = re.sub(r" count=.*", "", l.split(None, 3)[3])
                kinds[kind] = kinds.get(kind, 0) + 1
            assert total > 1000 and lines, (total, lines)
            assert max(kinds.values()) <= 2 and len(kinds) <= 4, lines
            assert all(re.search(r"count=\d+ since_s=\d+ total=\d+ last_addr=127\.0\.0\.", l)
                       for l in lines), lines


if __name__ == "__main__":
    run_tests([test_the_api_answers_under_slow_clients])
