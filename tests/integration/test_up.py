"""`anvil up` supervises its cluster, as a user runs it: a server or an agent
killed with SIGKILL is started again and the running job goes on and ends
well on its first attempt (the agent re-adopts its rank); a daemon that dies
at once again and again makes `anvil up` give up and stop the cluster, with
a message that says so; Ctrl-C on its terminal still stops every rank, also
one whose agent was just killed."""
import json
import os
import signal
import subprocess
import sys
import urllib.request

from harness import ANVIL, Term, run_tests, scratch_dir, wait_for


def pid_alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def daemons(up_pid):
    """The daemons `anvil up` (up_pid) runs now: {"server": pid, "node-1": pid, ...}."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                ppid = int(f.read().rsplit(")", 1)[-1].split()[1])
            if ppid != up_pid or not pid_alive(int(d)):
                continue
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except (OSError, ValueError, IndexError):
            continue
        if len(argv) > 1 and argv[1] == "server":
            found["server"] = int(d)
        elif len(argv) > 1 and argv[1] == "agent" and "--name" in argv:
            found[argv[argv.index("--name") + 1]] = int(d)
    return found


class Up:
    """`anvil up --port 0` in a home of its own, its output in a file (or,
    with term, on a terminal of its own, where Ctrl-C reaches it and its
    daemons as the terminal sends it)."""

    def __init__(self, name, agents=1, gpus=1, term=False):
        self.home = scratch_dir("anvil-up-%s-" % name)
        self.shared = scratch_dir("anvil-up-%s-files-" % name)  # the jobs' and the test's
        self.logs = os.path.join(self.home, "up", "logs")
        argv = [ANVIL, "up", "--port", "0", "--agents", str(agents),
                "--gpus-per-agent", str(gpus)]
        self.term = Term(argv, self.env()) if term else None
        if term:
            self.pid = self.term.pid
            self.term.expect("anvil up: ready", timeout=60)
        else:
            self.out_path = os.path.join(self.home, "up.out")
            with open(self.out_path, "w") as out:
                self.p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                          env=self.env())
            self.pid = self.p.pid
            wait_for(lambda: "anvil up: ready" in self.output() or self.p.poll() is not None,
                     timeout=60, what="anvil up ready")
            assert "anvil up: ready" in self.output(), self.output()
        with open(os.path.join(self.home, "client.json")) as f:
            c = json.load(f)
        self.url, self.token = c["server"], c["token"]

    def env(self):
        e = dict(os.environ, ANVIL_HOME=self.home)
        e.pop("ANVIL_SERVER", None)
        e.pop("ANVIL_TOKEN", None)
        return e

    def output(self):
        if self.term:
            return self.term.seen.decode(errors="replace")
        with open(self.out_path, errors="replace") as f:
            return f.read()

    def cli(self, *args):
        return subprocess.run([ANVIL] + list(args), capture_output=True, text=True,
                              env=self.env(), timeout=60)

    def api(self, method, path, body=None):
        req = urllib.request.Request(self.url + path, method=method,
                                     data=json.dumps(body).encode() if body else None)
        req.add_header("Authorization", "Bearer " + self.token)
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def job(self, jid):
        try:
            return self.api("GET", "/v1/jobs/%d" % jid)["job"]
        except OSError:
            return None  # the server is not back yet

    def submit_waiting(self, name, gpus=1):
        """A job whose rank runs until the test creates its go file: (id, go)."""
        go = os.path.join(self.shared, name + ".go")
        script = "until [ -e %s ]; do sleep 0.1; done; echo went" % go
        j = self.api("POST", "/v1/jobs", {"command": ["sh", "-c", script], "gpus": gpus,
                                          "name": name})["job"]
        return j["id"], go

    def rank(self, jid):
        """The running rank 0 of job jid once its agent reported it: (node, pid)."""
        def running():
            j = self.job(jid)
            ranks = (j.get("attempts") or [{}])[-1].get("ranks") or [] if j else []
            r = ranks[0] if ranks else {}
            return (r["node"], r["pid"]) if r.get("state") == "running" and r.get("pid") \
                else None
        return wait_for(running, timeout=60, what="job %d's rank running" % jid)

    def wait_job(self, jid):
        return wait_for(lambda: (lambda j: j if j and j["state"] in
                                 ("succeeded", "failed", "cancelled", "lost") else None)(
            self.job(jid)), timeout=60, what="job %d to end" % jid)

    def log(self, name):
        try:
            with open(os.path.join(self.logs, name), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def dump(self):
        sys.stderr.write("\n===== anvil up =====\n%s\n" % self.output()[-6000:])
        for name in sorted(os.listdir(self.logs)):
            sys.stderr.write("\n===== %s (tail) =====\n%s\n" % (name, self.log(name)[-6000:]))

    def stop(self):
        """Ctrl-C, as a user stops it; its exit status."""
        if self.term:
            self.term.send("\x03")
            return self.term.wait(60)
        self.p.send_signal(signal.SIGINT)
        return self.p.wait(60)

    def close(self):
        if self.term:
            self.term.close()
        elif self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
            try:
                self.p.wait(60)
            except subprocess.TimeoutExpired:
                self.p.kill()


class up:
    """with up(...) as u: ... - Ctrl-C at the end; the logs when it fails."""

    def __init__(self, name, **kw):
        self.name, self.kw, self.u = name, kw, None

    def __enter__(self):
        self.u = Up(self.name, **self.kw)
        return self.u

    def __exit__(self, et, ev, tb):
        if et is not None:
            self.u.dump()
        self.u.close()
        return False


def restarted(u, what, old_pid):
    """Waits for up to start daemon what (server, node-1) again: its new pid."""
    def again():
        if u.p.poll() is not None:
            return "exited"
        pid = daemons(u.pid).get(what)
        return pid if pid and pid != old_pid else None
    pid = wait_for(again, timeout=60, what="%s started again" % what)
    assert pid != "exited", "anvil up must keep running:\n" + u.output()
    return pid


def test_a_killed_server_is_started_again_and_the_job_runs_on():
    with up("server") as u:
        jid, go = u.submit_waiting("through-a-crash")
        node, rank_pid = u.rank(jid)
        server = daemons(u.pid)["server"]
        os.kill(server, signal.SIGKILL)
        restarted(u, "server", server)
        assert "the server (pid %d) was killed by signal 9" % server in u.output(), u.output()
        # the cluster answers again, on the same URL, from the same client file
        jobs = wait_for(lambda: (lambda r: r if r.returncode == 0 else None)(u.cli("jobs")),
                        timeout=60, what="anvil jobs answering again")
        assert "through-a-crash" in jobs.stdout and "running" in jobs.stdout, jobs.stdout
        assert pid_alive(rank_pid), "the rank must run on while the server is down"
        assert daemons(u.pid).get(node), "the agent must not have been stopped"
        open(go, "w").close()
        j = u.wait_job(jid)
        assert j["state"] == "succeeded" and j["exit_code"] == 0, j
        assert len(j["attempts"]) == 1, "the job must not have been restarted: %r" % j
        assert "through-a-crash" in u.cli("jobs").stdout
        assert u.stop() == 0


def test_a_killed_agent_is_started_again_and_readopts_its_rank():
    with up("agent") as u:
        jid, go = u.submit_waiting("through-an-agent-crash")
        node, rank_pid = u.rank(jid)
        agent = daemons(u.pid)[node]
        attempt = u.job(jid)["attempts"][-1]["id"]
        os.kill(agent, signal.SIGKILL)
        restarted(u, node, agent)
        assert "agent %s (pid %d) was killed by signal 9" % (node, agent) in u.output(), \
            u.output()
        wait_for(lambda: "rank adopted attempt=%d rank=0" % attempt in u.log(node + ".log"),
                 timeout=60, what="the restarted agent adopting the rank")
        assert pid_alive(rank_pid), "a rank must outlive its agent"
        open(go, "w").close()
        j = u.wait_job(jid)
        assert j["state"] == "succeeded" and j["exit_code"] == 0, j
        assert len(j["attempts"]) == 1, "the job must not have been restarted: %r" % j
        logs = u.cli("logs", str(jid))
        assert logs.stdout == "went\n", logs
        assert u.stop() == 0


def test_a_daemon_that_dies_at_once_again_and_again_is_given_up_on():
    """A server that cannot start (its admin token file broken) after a crash:
    up starts it again with backoff, then gives up, says why and stops the
    agents."""
    with up("giveup", agents=2) as u:
        ds = daemons(u.pid)
        with open(os.path.join(u.home, "up", "server", "admin.token"), "w") as f:
            f.write("not a token\n")
        os.kill(ds["server"], signal.SIGKILL)
        assert u.p.wait(120) == 1, u.output()
        out = u.output()
        assert "anvil up: the server" in out and "exited with status" in out, out
        assert "quick failure 4 of 5" in out, out
        assert "times in a row, so anvil up gives up on it and stops the cluster" in out, out
        assert "server.log" in out, out
        # why, from the server's own log
        said = [l for l in out.splitlines() if l.startswith("anvil up: its log says: ")]
        assert said and "bad token file" in said[0], out
        assert not any(pid_alive(p) for p in ds.values()), "every daemon must be stopped"


def test_ctrl_c_stops_every_rank_even_of_an_agent_just_killed():
    u = Up("ctrlc", agents=2, term=True)
    try:
        ranks = []
        for name in ("a", "b"):
            jid, _ = u.submit_waiting(name)
            ranks.append(u.rank(jid))
        ds = daemons(u.pid)
        os.kill(ds[ranks[1][0]], signal.SIGKILL)  # the second job's agent
        assert u.stop() == 0, u.output()
        out = u.output()
        assert "anvil up: stopping" in out, out
        left = [r for r in ranks if pid_alive(r[1])]
        assert not left, "ranks left running (node, pid): %r" % left
        assert not any(pid_alive(p) for p in ds.values()), "every daemon must be stopped"
        assert not daemons(u.pid)
    except BaseException:
        u.dump()
        raise
    finally:
        u.close()


if __name__ == "__main__":
    run_tests([test_a_killed_server_is_started_again_and_the_job_runs_on,
               test_a_killed_agent_is_started_again_and_readopts_its_rank,
               test_a_daemon_that_dies_at_once_again_and_again_is_given_up_on,
               test_ctrl_c_stops_every_rank_even_of_an_agent_just_killed])
