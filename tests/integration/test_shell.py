#!/usr/bin/env python3
"""Interactive work: anvil shell, attach and exec on a real terminal (a pty),
through the real server and agent, and the streams' edges (tokens, bad
frames, agent restarts)."""
import json
import os
import signal
import subprocess
import time

import harness
from harness import (EXEC, ERROR, EXIT, STDERR, STDIN, STDOUT, cluster, frame, node_pids,
                     read_frames, run_tests, scratch_dir, wait_for)

PROMPT = "anvil-prompt\\$ "
BASH = ["--", "bash", "--norc", "--noprofile"]


def shell_env(extra=None):
    env = {"PS1": "anvil-prompt$ ", "TERM": "xterm"}
    env.update(extra or {})
    return env


def only_job(c):
    jobs = c.api("GET", "/v1/jobs")["jobs"]
    assert len(jobs) == 1, jobs
    return jobs[0]


def rank_pid(c, jid, rank=0):
    return c.job(jid)["attempts"][-1]["ranks"][rank]["pid"]


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open("/proc/%d/stat" % pid) as f:  # a zombie is gone for us
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_shell_is_a_terminal_on_the_node():
    """Prompt, env and cwd of the rank, window size, Ctrl-C, detach, attach
    with the earlier output, two clients at once, exit status."""
    with cluster(agents=1, gpus=1, name="shell") as c:
        work = scratch_dir("anvil-shell-cwd-")
        with c.term("shell", "--gpus", "1", *BASH, env=shell_env(), cwd=work) as t:
            t.expect("Ctrl-] detaches")
            t.expect(PROMPT, 60)
            t.send("echo X${CUDA_VISIBLE_DEVICES}X; pwd\r")
            t.expect("X0X")
            t.expect(work)
            t.resize(33, 101)  # the kernel sends the CLI SIGWINCH
            t.send("stty size\r")
            t.expect("33 101")
            t.send("sleep 100\r")
            time.sleep(0.5)
            t.send("\x03")  # Ctrl-C: interrupts sleep, the shell stays
            t.expect(PROMPT)
            t.send("echo still-$((40+2))\r")
            t.expect("still-42")
            t.send("\x1d")  # Ctrl-]: detach
            assert t.wait() == 0, t.seen
            assert b"detached from job" in t.seen
        job = only_job(c)
        assert job["state"] == "running" and job["session"] and job["name"] == "shell", job
        jid = job["id"]
        with c.term("attach", str(jid), env=shell_env()) as gone:
            gone.expect("still-42")
        # killed (SIGKILL) while attached: the session does not notice
        with c.term("attach", str(jid), env=shell_env()) as a, \
                c.term("attach", str(jid), env=shell_env()) as b:
            a.expect("still-42")  # the scrollback: where the session was
            b.expect("still-42")
            a.send("echo from-a-$((1+1))\r")
            a.expect("from-a-2")
            b.expect("from-a-2")  # every client sees the output
            b.send("exit 7\r")
            assert a.wait() == 7
            assert b.wait() == 7
            assert b"was stopped" not in a.seen + b.seen  # its own exit
        done = c.wait_job(jid)
        assert done["state"] == "failed" and done["exit_code"] == 7, done
        log = c.cli("logs", str(jid)).stdout
        assert "still-42" in log and "from-a-2" in log, log  # the rank's log holds the session


def test_shell_waits_saying_why_and_ctrl_c_cancels():
    with cluster(agents=1, gpus=1, name="shell-wait") as c:
        blocker = c.submit(["sleep", "1000"], gpus=1)
        c.wait_job(blocker["id"], states=("running",))
        with c.term("shell", *BASH, env=shell_env()) as t:
            t.expect("pending: ")  # the job's reason, as it waits
            t.send("\x03")  # still queued: Ctrl-C cancels it
            assert t.wait() == 130, t.seen
        waiting = [j for j in c.api("GET", "/v1/jobs")["jobs"] if j["id"] != blocker["id"]][0]
        assert waiting["state"] == "cancelled", waiting
        with c.term("shell", *BASH, env=shell_env()) as t:
            t.expect("pending: ")
            c.api("POST", "/v1/jobs/%d/cancel" % blocker["id"])
            t.expect(PROMPT, 60)  # placed once the GPU is free
            t.send("exit\r")
            assert t.wait() == 0, t.seen


def test_default_shell_and_fallback():
    """No CMD: the client's $SHELL, falling back to bash where the node lacks it."""
    with cluster(agents=1, gpus=1, name="shell-default") as c:
        env = shell_env({"SHELL": "/no/such/zsh", "PS1": "anvil-prompt$ "})
        with c.term("shell", env=env) as t:
            t.expect("/no/such/zsh is not on this node; running /bin/bash")
            t.send("echo ok-$((1+2)) $0\r")
            t.expect("ok-3 /bin/bash")
            t.send("exit 3\r")
            assert t.wait() == 3


def test_shell_ends_at_its_time_limit():
    with cluster(agents=1, gpus=1, name="shell-time") as c:
        with c.term("shell", "--time", "3s", "--grace", "1s", *BASH, env=shell_env()) as t:
            t.expect(PROMPT, 60)
            status = t.wait(40)
            # said while the attempt ends, or once the job has (the CLI asks
            # after the session's exit: either may be what it finds)
            assert (b"was stopped: reached its time limit" in t.seen or
                    b"stopped at its time limit" in t.seen), t.seen
            assert status != 0
        # the CLI ends with the session's command; the job, once the agent reports it
        assert c.wait_job(only_job(c)["id"], timeout=30)["state"] == "failed"


def test_exec_into_a_batch_rank():
    """Same env, cwd and cgroups as the rank; stdout and stderr apart; the
    exit status passed on; -i, -it."""
    with cluster(agents=1, gpus=1, name="exec") as c:
        work = scratch_dir("anvil-exec-cwd-")
        job = c.submit(["sleep", "1000"], gpus=1, cwd=work, env={"FOO": "bar"})
        jid = job["id"]
        c.wait_job(jid, states=("running",))
        p = c.cli("exec", str(jid), "--", "sh", "-c",
                  "echo cvd=$CUDA_VISIBLE_DEVICES foo=$FOO job=$ANVIL_JOB_ID cwd=$(pwd); "
                  "echo to-stderr >&2; exit 3")
        assert p.returncode == 3, (p.returncode, p.stdout, p.stderr)
        assert p.stdout == "cvd=0 foo=bar job=%d cwd=%s\n" % (jid, work), p.stdout
        assert p.stderr == "to-stderr\n", p.stderr
        metrics = c.api("GET", "/metrics").decode()
        assert "anvil_http_streams_total 1\n" in metrics, metrics  # the server's count
        # in every cgroup of the rank's command
        p = c.cli("exec", str(jid), "--", "cat", "/proc/self/cgroup")
        with open("/proc/%d/cgroup" % rank_pid(c, jid)) as f:
            assert p.stdout == f.read(), p.stdout
        p = subprocess.run([harness.ANVIL, "exec", "-i", str(jid), "--", "tr", "a-z", "A-Z"],
                           input="hello\n", capture_output=True, text=True, env=c.cli_env(),
                           timeout=60)
        assert p.returncode == 0 and p.stdout == "HELLO\n", (p.returncode, p.stdout, p.stderr)
        p = c.cli("exec", str(jid), "--", "no-such-command-xyz")
        assert p.returncode == 127 and "no-such-command-xyz" in p.stderr, p
        with c.term("exec", "-it", str(jid), "--", "sh", env={"TERM": "xterm", "PS1": "$ "}) as t:
            t.send("echo hi$((1+1)); tty\r")
            t.expect("hi2")
            t.expect("/dev/pts/")
            t.send("exit 4\r")
            assert t.wait() == 4, t.seen
        p = c.cli("exec", "--rank", "1", str(jid), "--", "true")
        assert p.returncode == 1 and "has ranks 0 to 0" in p.stderr, p
        p = c.cli("exec", str(jid), "true")
        assert p.returncode == 2 and "after --" in p.stderr, p
        c.api("POST", "/v1/jobs/%d/cancel" % jid)
        c.wait_job(jid)
        p = c.cli("exec", str(jid), "--", "true")
        assert p.returncode == 1 and "has ended" in p.stderr, p


def test_exec_processes_end_with_the_rank():
    with cluster(agents=1, gpus=1, name="exec-kill") as c:
        jid = c.submit(["sleep", "1000"], gpus=1)["id"]
        c.wait_job(jid, states=("running",))
        p = c.cli("exec", str(jid), "--", "sh", "-c", "sleep 1000 >/dev/null 2>&1 & echo $!")
        assert p.returncode == 0, p
        # the node's pids: the rank has a PID namespace of its own, and exec enters it
        rank = c.rank_pid(jid)
        [left] = node_pids(rank, [int(p.stdout)])
        assert alive(left)  # it outlives the exec...
        # ...and a command whose client goes away is hung up
        q = c.cli_popen("exec", str(jid), "--", "sh", "-c", "echo $$; exec sleep 1000")
        [hung] = node_pids(rank, [int(q.stdout.readline())])
        assert alive(hung)
        q.send_signal(signal.SIGTERM)
        q.communicate(timeout=20)
        wait_for(lambda: not alive(hung), what="the exec'd command hung up")
        c.api("POST", "/v1/jobs/%d/cancel" % jid)
        c.wait_job(jid)
        wait_for(lambda: not alive(left), what="the background process to end with the rank")


def test_exec_ends_with_the_rank_without_cgroups():
    """A node without cgroups: the helper watches the rank's command, and a
    command still running in the exec is killed when the rank ends."""
    with cluster(agents=1, gpus=1, name="exec-nocg", agent_env={"ANVIL_CGROUP": "off"}) as c:
        jid = c.submit(["sleep", "1000"], gpus=1)["id"]
        c.wait_job(jid, states=("running",))
        q = c.cli_popen("exec", str(jid), "--", "sh", "-c", "echo $$; exec sleep 1000")
        [pid] = node_pids(c.rank_pid(jid), [int(q.stdout.readline())])
        assert alive(pid)
        c.api("POST", "/v1/jobs/%d/cancel" % jid)
        out, err = q.communicate(timeout=30)
        assert q.returncode == 137, (q.returncode, out, err)  # SIGKILL, with the rank
        assert not alive(pid)
        assert "without cgroups" in c.log("node-1.log")


def test_streams_need_the_token():
    with cluster(agents=1, gpus=1, name="exec-auth") as c:
        jid = c.submit(["sleep", "1000"], gpus=1)["id"]
        c.wait_job(jid, states=("running",))
        for token in ("", "wrong"):
            for route in ("exec", "attach"):
                status, sock, body = c.stream("/v1/jobs/%d/%s" % (jid, route), token=token)
                assert status == 401 and sock is None, (status, body)
        agent = c.nodes()[0]["agent_url"]
        attempt = c.job(jid)["attempts"][-1]["id"]
        for token in ("", c.token):  # the agent wants the node secret, not the admin token
            status, sock, body = c.stream("/v1/exec?attempt=%d&rank=0" % attempt, token=token,
                                          url=agent)
            assert status == 401 and sock is None, (status, body)
        p = c.cli("exec", str(jid), "--", "true", env={"ANVIL_TOKEN": "wrong"})
        assert p.returncode == 1 and "token" in p.stderr, p
        status, sock, body = c.stream("/v1/jobs/%d/attach" % jid)
        assert status == 409 and b"not an interactive session" in body, (status, body)
        # the node secret opens the agent's side directly
        status, sock, rest = c.stream("/v1/exec?attempt=%d&rank=0" % attempt,
                                      token=c.node_secret(), url=agent)
        assert status == 101
        sock.sendall(frame(EXEC, json.dumps({"command": ["echo", "direct"]}).encode()))
        frames = read_frames(sock, rest)
        assert (STDOUT, b"direct\n") in frames and frames[-1] == (EXIT, b"\0\0\0\0"), frames
        sock.close()


def test_bad_frames_break_only_their_stream():
    with cluster(agents=1, gpus=2, name="exec-garbage") as c:
        jid = c.submit(["sleep", "1000"], gpus=1)["id"]
        c.wait_job(jid, states=("running",))
        path = "/v1/jobs/%d/exec" % jid
        for garbage in (b"\xff" * 64, frame(STDIN, b"x")[:1] + b"\xff\xff\xff\xff" + b"x" * 100,
                        os.urandom(4096)):
            status, sock, rest = c.stream(path)
            assert status == 101
            sock.sendall(garbage)
            frames = read_frames(sock, rest)
            assert frames and frames[-1][0] == ERROR, frames  # said, then closed
            sock.close()
        status, sock, rest = c.stream(path)  # a request that breaks its table
        sock.sendall(frame(EXEC, b'{"command": ["true"], "bogus": 1}'))
        frames = read_frames(sock, rest)
        assert frames[-1][0] == ERROR and b"bogus" in frames[-1][1], frames
        sock.close()
        status, sock, rest = c.stream(path)  # garbage after a good start
        sock.sendall(frame(EXEC, json.dumps({"command": ["cat"], "stdin": True}).encode()))
        sock.sendall(frame(STDIN, b"fine\n") + b"\x42" * 5000)
        frames = read_frames(sock, rest, timeout=10)
        sock.close()
        # the server and the agent are fine, and so is the next exec
        assert c.api("GET", "/healthz")["status"] == "ok"
        p = c.cli("exec", str(jid), "--", "echo", "after")
        assert p.returncode == 0 and p.stdout == "after\n", p
        # a session: garbage from one client drops that client only
        with c.term("shell", *BASH, env=shell_env()) as t:
            t.expect(PROMPT, 60)
            sid = [j for j in c.api("GET", "/v1/jobs")["jobs"] if j["session"]][0]["id"]
            status, sock, rest = c.stream("/v1/jobs/%d/attach" % sid)
            assert status == 101
            sock.sendall(b"\x00" * 32)
            read_frames(sock, rest, until=())  # closed by the holder
            sock.close()
            t.send("echo survived-$((2*3))\r")
            t.expect("survived-6")
            t.send("exit\r")
            assert t.wait() == 0


def test_session_survives_an_agent_restart():
    """The holder is the rank's process: it outlives its agent, and a new
    agent attaches to it and rebuilds its environment for exec."""
    with cluster(agents=1, gpus=1, name="shell-restart") as c:
        with c.term("shell", *BASH, env=shell_env()) as t:
            t.expect(PROMPT, 60)
            t.send("echo before-restart\r")
            t.expect("before-restart")
            t.send("\x1d")
            assert t.wait() == 0
        jid = only_job(c)["id"]
        c.kill_agent(0)
        c.start_agent(0)
        c.wait_ready(1)
        p = wait_for(lambda: (lambda r: r if r.returncode == 0 else None)(
            c.cli("exec", str(jid), "--", "sh", "-c", "echo cvd=$CUDA_VISIBLE_DEVICES")),
            timeout=30, what="exec after the agent's restart")
        assert p.stdout == "cvd=0\n", p.stdout
        with c.term("attach", str(jid), env=shell_env()) as t:
            t.expect("before-restart")
            t.send("exit 5\r")
            assert t.wait() == 5


run_tests([
    test_shell_is_a_terminal_on_the_node,
    test_shell_waits_saying_why_and_ctrl_c_cancels,
    test_default_shell_and_fallback,
    test_shell_ends_at_its_time_limit,
    test_exec_into_a_batch_rank,
    test_exec_processes_end_with_the_rank,
    test_exec_ends_with_the_rank_without_cgroups,
    test_streams_need_the_token,
    test_bad_frames_break_only_their_stream,
    test_session_survives_an_agent_restart,
])
