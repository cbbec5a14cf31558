"""Integration test harness: real anvil daemons on 127.0.0.1 with ephemeral
ports and temporary directories.

A Cluster starts `anvil server` and N `anvil agent`s (simulated GPUs), talks
to the API over real HTTP, and runs the real CLI. Given hosts (netns.py), it
runs each agent on a host of its own instead: a network namespace with its
own address. Daemon logs are kept in the
cluster's directory and printed when a test fails. Standard library only.
"""
import atexit
import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import termios
import time
import traceback
import urllib.error
import urllib.request

# Ranks run as the unprivileged account anvil-job (scripts/deps.sh makes
# it), each with a /tmp of its own (docs/security.md): what a test shares
# with its jobs lives outside /tmp and is open to that account, so the
# directories a test makes are 0777 (mkdtemp's too) under a umask of 0. The
# daemons inherit the umask: every mode that matters is theirs to set.
TEST_ROOT = "/var/tmp/anvil-tests"
os.makedirs(TEST_ROOT, exist_ok=True)
os.chmod(TEST_ROOT, 0o1777)
tempfile.tempdir = TEST_ROOT
os.umask(0)
_mkdtemp = tempfile.mkdtemp


def _open_mkdtemp(*args, **kwargs):
    d = _mkdtemp(*args, **kwargs)
    os.chmod(d, 0o777)
    return d


tempfile.mkdtemp = _open_mkdtemp

ANVIL = os.environ.get("ANVIL_BIN") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build", "debug", "anvil")


def wait_for(pred, timeout=20.0, interval=0.05, what="condition"):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError("timed out after %.1fs waiting for %s (last: %r)" % (timeout, what, last))


def sim_gpus(path, count, model="NVIDIA H200", node=0, topo=False, reset_ms=None):
    """A sim file (src/gpu/sim.h). topo: an HGX-like board, NVLink islands of
    4 GPUs, a PCIe switch per pair, NUMA 0 for the first half. reset_ms: how
    long a GPU reset takes (None: the sim's default)."""
    gpus = [{"index": i, "uuid": "GPU-sim-%04d-%04d" % (node, i), "name": model,
             "memory_bytes": 150754820096, "pci_bus_id": "00000000:%02x:00.0" % (0x18 + i)}
            for i in range(count)]
    if topo:
        for g in gpus:
            i = g["index"]
            island = range(i - i % 4, min(count, i - i % 4 + 4))
            g.update({"minor": i, "numa_node": 0 if i < count // 2 else 1,
                      "pcie_switch": i // 2,
                      "nvlink_peers": [j for j in island if j != i]})
    board = {"driver_version": "sim-550.54.15", "cuda_version": "12.4", "gpus": gpus}
    if reset_ms is not None:
        board["reset_ms"] = reset_ms
    with open(path, "w") as f:
        json.dump(board, f)


class ApiError(Exception):
    def __init__(self, status, body):
        super().__init__("HTTP %d: %s" % (status, body))
        self.status = status
        self.body = body


class Cluster:
    """hosts: a netns.Hosts: agent i runs inside host i, listening on and
    reporting that host's address, and the server listens on the hosts'
    gateway (where they reach it); without it, everything is on 127.0.0.1."""

    def __init__(self, agents=2, gpus=4, node_timeout="30s", name="cluster", server_args=(),
                 agent_args=(), topo=False, gpu_reset_ms=None, agent_env=None, hosts=None,
                 server_env=None, state_tmpfs=None):
        self.dir = tempfile.mkdtemp(prefix="anvil-it-%s-" % name)
        self.home = os.path.join(self.dir, "home")
        self.state_dir = os.path.join(self.dir, "state")
        self.logs = os.path.join(self.dir, "logs")
        os.makedirs(self.logs)
        self.node_timeout = node_timeout
        self.server_args = list(server_args)
        self.agent_args = list(agent_args)
        self.agent_env = dict(agent_env or {})
        self.server_env = dict(server_env or {})  # e.g. ANVIL_FAILPOINT (src/base/failpoint.h)
        self.topo = topo
        self.gpu_reset_ms = gpu_reset_ms
        self.ngpus = gpus
        self.hosts = hosts
        self.server = None
        self.port = 0
        self.agents = {}
        # state_tmpfs: a size ("4m"): STATE_DIR is a file system of its own,
        # which fill_state_disk() fills (unmounted by stop())
        self.state_mounted = False
        try:
            if state_tmpfs:
                os.makedirs(self.state_dir)
                subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + state_tmpfs, "tmpfs",
                                self.state_dir], check=True)
                self.state_mounted = True
            self.start_server()
            for i in range(agents):
                self.start_agent(i)
            self.wait_ready(agents)
        except BaseException:
            self.dump_logs()
            self.stop()
            raise

    # ---- processes ----
    def _spawn(self, args, logname, extra_env=None, host=None):
        log = open(os.path.join(self.logs, logname), "ab")
        env = dict(os.environ, ANVIL_HOME=self.home, **(extra_env or {}))
        argv = [ANVIL] + args
        if host is not None:
            argv = self.hosts.wrap(host, argv)
        return subprocess.Popen(argv, stdout=log, stderr=log, env=env, start_new_session=True)

    def start_server(self):
        client = os.path.join(self.home, "client.json")
        if os.path.exists(client):
            os.unlink(client)
        # --no-config: what the test says, whatever /etc/anvil holds on this machine
        self.server = self._spawn(["server", "--no-config", "--state-dir", self.state_dir,
                                   "--listen", "%s:%d" % (self.listen_host(), self.port),
                                   "--home", self.home, "--node-timeout", self.node_timeout]
                                  + self.server_args,
                                  "server.log", self.server_env)
        wait_for(lambda: os.path.exists(client) or self.server.poll() is not None,
                 what="server client file")
        assert self.server.poll() is None, "server exited:\n" + self.log("server.log")
        with open(client) as f:
            c = json.load(f)
        self.url = c["server"]
        self.token = c["token"]
        self.port = int(self.url.rsplit(":", 1)[1])
        with open(os.path.join(self.state_dir, "join.token")) as f:
            self.join_token = f.read().strip()

    def listen_host(self):
        return self.hosts.gateway if self.hosts else "127.0.0.1"

    def start_agent(self, i, args=()):
        name = "node-%d" % (i + 1)
        work = self.work_dir(i)
        os.makedirs(work, exist_ok=True)
        gpus = os.path.join(work, "gpus.json")
        if not os.path.exists(gpus):
            sim_gpus(gpus, self.ngpus, node=i, topo=self.topo, reset_ms=self.gpu_reset_ms)
        where = []
        if self.hosts:
            addr = self.hosts.address(i)
            where = ["--listen", addr + ":0", "--address", addr]
        self.agents[i] = self._spawn(["agent", "--no-config", "--server", self.url,
                                      "--join-token", self.join_token, "--name", name,
                                      "--work-dir", work,
                                      "--gpus-file", gpus, "--log-level", "debug"]
                                     + where + self.agent_args + list(args),
                                     "%s.log" % name, self.agent_env,
                                     host=i if self.hosts else None)
        return self.agents[i]

    def work_dir(self, i):
        return os.path.join(self.dir, "node-%d" % (i + 1))

    def node_secret(self, i=0):
        """Agent i's node secret, from its identity file (written once it has
        registered: a moment after the server lists the node)."""
        path = os.path.join(self.dir, "node-%d" % (i + 1), "node.json")
        wait_for(lambda: os.path.exists(path), what="%s" % path)
        with open(path) as f:
            return json.load(f)["secret"]

    def kill_server(self, sig=signal.SIGKILL):
        self.server.send_signal(sig)
        self.server.wait(10)

    def kill_agent(self, i, sig=signal.SIGKILL):
        self.agents[i].send_signal(sig)
        self.agents[i].wait(10)

    def wait_ready(self, n, timeout=20):
        wait_for(lambda: len([x for x in self.nodes() if x["state"] == "ready"]) >= n,
                 timeout=timeout, what="%d ready nodes" % n)

    def stop(self):
        for p in list(self.agents.values()):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in list(self.agents.values()):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        if self.server and self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
            try:
                self.server.wait(15)
            except subprocess.TimeoutExpired:
                self.server.kill()
        if self.state_mounted:
            subprocess.run(["umount", self.state_dir], check=False)
            self.state_mounted = False

    def fill_state_disk(self):
        """Fills STATE_DIR's file system (state_tmpfs) to its last byte with a
        file of its own; free_state_disk() removes it."""
        fd = os.open(os.path.join(self.state_dir, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * 65536)
        except OSError:
            pass
        finally:
            os.close(fd)

    def free_state_disk(self):
        os.unlink(os.path.join(self.state_dir, "filler"))

    def log(self, name):
        try:
            with open(os.path.join(self.logs, name), errors="replace") as f:
                return f.read()[-6000:]
        except OSError:
            return ""

    def dump_logs(self):
        for name in sorted(os.listdir(self.logs)):
            sys.stderr.write("\n===== %s (tail) =====\n%s\n" % (name, self.log(name)))

    # ---- API ----
    def api(self, method, path, body=None, token=None, raw=None, headers=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + (token if token is not None else self.token))
        req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                text = r.read()
                ctype = r.headers.get("Content-Type", "")
                return json.loads(text) if "json" in ctype else text
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                text = json.loads(text)
            except ValueError:
                pass
            raise ApiError(e.code, text)

    def submit(self, command, **kw):
        body = dict(kw, command=command)
        return self.api("POST", "/v1/jobs", body)["job"]

    def job(self, jid):
        return self.api("GET", "/v1/jobs/%d" % jid)["job"]

    def nodes(self):
        try:
            return self.api("GET", "/v1/nodes")["nodes"]
        except (OSError, ApiError):
            return []

    def rank_pid(self, job_id, rank=0, timeout=20):
        """The node's pid of a running rank's command, once reported."""
        def pid():
            att = self.job(job_id).get("attempts") or [{}]
            ranks = att[-1].get("ranks") or []
            return next((r.get("pid") for r in ranks if r["rank"] == rank), None)
        return wait_for(pid, timeout=timeout, what="job %d rank %d's pid" % (job_id, rank))

    def wait_job(self, jid, states=("succeeded", "failed", "cancelled", "lost"), timeout=60):
        return wait_for(lambda: (lambda j: j if j["state"] in states else None)(self.job(jid)),
                        timeout=timeout, what="job %d in %s" % (jid, states))

    def cli_env(self, env=None):
        e = dict(os.environ, ANVIL_HOME=self.home)
        e.pop("ANVIL_SERVER", None)
        e.pop("ANVIL_TOKEN", None)
        e.update(env or {})
        return e

    def cli(self, *args, env=None, check=False, timeout=60, cwd=None):
        p = subprocess.run([ANVIL] + list(args), capture_output=True, text=True,
                           env=self.cli_env(env), timeout=timeout, cwd=cwd)
        if check and p.returncode != 0:
            raise AssertionError("anvil %s exited %d: %s%s" % (" ".join(args), p.returncode,
                                                             p.stdout, p.stderr))
        return p

    def term(self, *args, env=None, cwd=None, rows=24, cols=80):
        """The CLI on a terminal of its own (a pty), as a user runs it."""
        return Term([ANVIL] + list(args), self.cli_env(env), cwd=cwd, rows=rows, cols=cols)

    def stream(self, path, token=None, url=None):
        """A raw stream (HTTP Upgrade: anvil-stream) to path on the server (or
        url): (status, socket or None, bytes after the headers or the body)."""
        return open_stream(url or self.url, path, self.token if token is None else token)

    def cli_popen(self, *args, env=None):
        """The CLI started in the background, stdout and stderr piped (text):
        for `-f` while the test changes what it follows. communicate() it."""
        return subprocess.Popen([ANVIL] + list(args), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=self.cli_env(env))


class Term:
    """A program on a real terminal (a pty): what a user's terminal shows,
    keystrokes in, window-size changes (the kernel sends SIGWINCH)."""

    def __init__(self, argv, env, cwd=None, rows=24, cols=80):
        pid, fd = pty.fork()
        if pid == 0:
            try:
                if cwd:
                    os.chdir(cwd)
                os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        self.pid, self.fd = pid, fd
        self.buf = b""
        self.seen = b""
        self.status = None
        self.resize(rows, cols)

    def resize(self, rows, cols):
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def send(self, data):
        os.write(self.fd, data.encode() if isinstance(data, str) else data)

    def _read(self, timeout):
        r, _, _ = select.select([self.fd], [], [], max(timeout, 0))
        if not r:
            return False
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            return None
        self.buf += chunk
        self.seen += chunk
        return True

    def expect(self, pattern, timeout=20):
        """Waits for pattern (a regex) in what the terminal showed since the
        last match; returns the match."""
        rx = re.compile(pattern.encode() if isinstance(pattern, str) else pattern)
        deadline = time.time() + timeout
        while True:
            m = rx.search(self.buf)
            if m:
                self.buf = self.buf[m.end():]
                return m
            if self._read(deadline - time.time()) is None or time.time() > deadline:
                raise AssertionError("timed out waiting for %r; the terminal shows:\n%r"
                                     % (pattern, self.buf[-3000:]))

    def wait(self, timeout=30):
        """The program's exit status (128+N for signal N)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            self._read(0.05)
            pid, st = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(st)
                while self._read(0.05):
                    pass
                return self.status if self.status >= 0 else 128 - self.status
        raise AssertionError("still running; the terminal shows:\n%r" % self.buf[-3000:])

    def close(self):
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except OSError:
                pass
            self.status = -1
        try:
            os.close(self.fd)
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def frame(kind, payload=b""):
    """One stream frame (src/proto/stream.h)."""
    return bytes([kind]) + struct.pack(">I", len(payload)) + payload


STDIN, STDIN_EOF, STDOUT, STDERR, RESIZE, EXIT, NOTICE, EXEC, ERROR = range(1, 10)


def open_stream(url, path, token):
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=20)
    auth = ("Authorization: Bearer %s\r\n" % token) if token else ""
    s.sendall(("POST %s HTTP/1.1\r\nHost: %s\r\n%sConnection: Upgrade\r\n"
               "Upgrade: anvil-stream\r\nContent-Length: 0\r\n\r\n"
               % (path, host, auth)).encode())
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1]) if head.startswith(b"HTTP/") else 0
    if status == 101:
        return status, s, rest
    m = re.search(rb"Content-Length: *(\d+)", head, re.I)
    while m and len(rest) < int(m.group(1)):
        chunk = s.recv(65536)
        if not chunk:
            break
        rest += chunk
    s.close()
    return status, None, rest


def read_frames(sock, rest=b"", until=(EXIT, ERROR), timeout=20):
    """Frames from a stream until one of the types in until (or EOF):
    [(type, payload)]."""
    frames, buf = [], rest
    deadline = time.time() + timeout
    while True:
        while len(buf) >= 5:
            n = struct.unpack(">I", buf[1:5])[0]
            if len(buf) < 5 + n:
                break
            frames.append((buf[0], buf[5:5 + n]))
            buf = buf[5 + n:]
            if frames[-1][0] in until:
                return frames
        left = deadline - time.time()
        if left <= 0:
            raise AssertionError("no end of stream; frames so far: %r" % frames[-20:])
        sock.settimeout(left)
        chunk = sock.recv(65536)
        if not chunk:
            return frames
        buf += chunk


_scratch = []


def node_pids(rank_pid, ns_pids):
    """The node's pids of processes that a fenced rank (its own PID
    namespace: agent/fence.h) knows as ns_pids; rank_pid is the rank's
    command as the API reports it (the node's pid)."""
    ns = os.stat("/proc/%d/ns/pid" % rank_pid).st_ino
    seen = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.stat("/proc/%s/ns/pid" % d).st_ino != ns:
                continue
            with open("/proc/%s/status" % d) as f:
                for line in f:
                    if line.startswith("NSpid:"):
                        ids = line.split()[1:]
                        seen[int(ids[-1])] = int(ids[0])
        except OSError:
            pass
    return [seen[p] for p in ns_pids if p in seen]


def scratch_dir(prefix):
    """A new temporary directory that is removed when this test process exits (the
    processes started in it have been stopped by then)."""
    d = tempfile.mkdtemp(prefix=prefix)
    _scratch.append(d)
    return d


def _remove_scratch():
    for d in _scratch:
        shutil.rmtree(d, ignore_errors=True)


atexit.register(_remove_scratch)

# The CLI sends its working directory as a job's: wherever the checkout is
# (under /tmp, under /root), jobs run in a directory of this test process's
# that the rank account reaches.
os.chdir(scratch_dir("anvil-cwd-"))


def run_tests(tests):
    """Runs test functions in order; each gets a fresh context via its own
    Cluster. Prints 'N passed, N failed' and exits non-zero on failure."""
    passed = failed = 0
    only = sys.argv[1:]
    for t in tests:
        if only and t.__name__ not in only:
            continue
        start = time.time()
        try:
            t()
            passed += 1
            print("PASS %s (%.1fs)" % (t.__name__, time.time() - start), flush=True)
        except Exception:
            failed += 1
            print("FAIL %s" % t.__name__, flush=True)
            traceback.print_exc()
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


class cluster:
    """with cluster(...) as c: ...  - stops the daemons, dumps logs on failure,
    and removes the directory on success."""

    def __init__(self, **kw):
        self.kw = kw
        self.c = None

    def __enter__(self):
        self.c = Cluster(**self.kw)
        return self.c

    def __exit__(self, et, ev, tb):
        if et is not None:
            self.c.dump_logs()
        self.c.stop()
        if et is None:
            shutil.rmtree(self.c.dir, ignore_errors=True)
        else:
            sys.stderr.write("kept test directory %s\n" % self.c.dir)
        return False
