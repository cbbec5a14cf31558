"""`anvil fleet bootstrap` over real SSH to two machines made here: each a
network namespace joined to this one by a veth pair (10.213.X.1 here,
10.213.X.2 there) running its own sshd (a test key, its own config), with
a mount namespace of its own in which the test's "machine" directory is
that host's private one, so that the two hosts do not share the binary,
the config or the agent's work dir, and nothing under the machine's real
/etc or /usr/local is touched.

The server runs here, listening on every address. One bootstrap from a
cluster spec installs the binary, agent.yaml, the join token (0600) and
the unit on both and starts the agents (no systemd in a namespace: the
agent detached), which join, and a 2-node job runs a rank on each; a
second bootstrap changes nothing; --dry-run says what would change and
changes nothing; with one host's sshd down, that host fails with ssh's
message while the other is changed and restarted.

Needs root, `ip netns`, openssh-server and openssh-client: without them
the test says so and passes."""
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

from harness import ANVIL, cluster, run_tests, wait_for

SSHD = "/usr/sbin/sshd"


def missing():
    """Why the test cannot run here, or None."""
    if os.geteuid() != 0:
        return "not root"
    for tool in ("ip", "ssh", "ssh-keygen", "unshare"):
        if not shutil.which(tool):
            return "no %s" % tool
    if not os.access(SSHD, os.X_OK):
        return "no %s (openssh-server)" % SSHD
    if subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0:
        return "`ip netns` does not work here"
    return None


def sh(*argv):
    p = subprocess.run(list(argv), capture_output=True, text=True)
    if p.returncode != 0:
        raise AssertionError("%s: exit %d: %s" % (" ".join(argv), p.returncode, p.stderr))
    return p.stdout


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class Hosts:
    """Two SSH hosts in network namespaces; host i's machine directory
    (self.root, the same path on both) is self.dir/host-i there."""

    def __init__(self, n=2):
        self.dir = os.path.realpath(os.environ.get("TMPDIR", "/tmp"))
        self.dir = os.path.join(self.dir, "anvil-boot-%d" % os.getpid())
        os.makedirs(self.dir)
        self.root = os.path.join(self.dir, "machine")
        os.makedirs(self.root)
        tag = os.getpid() % 100000
        # a third octet of our own: another run's namespaces keep theirs
        base = 10 + (os.getpid() % 60) * 4
        self.hosts = [{"ns": "anvboot-%d-%d" % (tag, i), "veth": "anvb%d%d" % (tag, i),
                       "net": "10.213.%d" % (base + i), "sshd": None,
                       "dir": os.path.join(self.dir, "host-%d" % i)} for i in range(n)]
        self.key = os.path.join(self.dir, "client")
        self.made = []
        try:
            self._keys()
            for h in self.hosts:
                self._host(h)
        except BaseException:
            self.stop()
            raise

    def _keys(self):
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", self.key)
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(self.dir, "host_key"))
        shutil.copy(self.key + ".pub", os.path.join(self.dir, "authorized_keys"))
        # sshd's privilege separation directory: sshd refuses one that is group- or
        # world-writable, which the harness's umask 0 would make of a new one
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        os.chmod("/run/sshd", 0o755)

    def addr(self, i):
        return self.hosts[i]["net"] + ".2"

    def server_side(self, i):
        return self.hosts[i]["net"] + ".1"

    def _host(self, h):
        ns, veth, net = h["ns"], h["veth"], h["net"]
        os.makedirs(h["dir"])
        sh("ip", "netns", "add", ns)
        self.made.append(ns)
        sh("ip", "link", "add", veth + "h", "type", "veth", "peer", "name", veth + "n")
        sh("ip", "link", "set", veth + "n", "netns", ns)
        sh("ip", "addr", "add", net + ".1/24", "dev", veth + "h")
        sh("ip", "link", "set", veth + "h", "up")
        for cmd in (["ip", "link", "set", "lo", "up"],
                    ["ip", "addr", "add", net + ".2/24", "dev", veth + "n"],
                    ["ip", "link", "set", veth + "n", "up"],
                    ["ip", "route", "add", "default", "via", net + ".1"]):
            sh("ip", "netns", "exec", ns, *cmd)
        self.start_sshd(h)

    def start_sshd(self, h):
        conf = os.path.join(h["dir"], "sshd_config")
        with open(conf, "w") as f:
            f.write("ListenAddress %s.2\nPort 22\nHostKey %s\nAuthorizedKeysFile %s\n"
                    "PidFile none\nStrictModes no\nPermitRootLogin yes\nUsePAM no\n"
                    "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                    "PrintMotd no\n" % (h["net"], os.path.join(self.dir, "host_key"),
                                        os.path.join(self.dir, "authorized_keys")))
        log = open(os.path.join(h["dir"], "sshd.log"), "ab")
        # its own mount namespace: the machine directory is this host's
        script = "mount --bind %s %s && exec %s -D -e -f %s" % (h["dir"], self.root, SSHD, conf)
        h["sshd"] = subprocess.Popen(["ip", "netns", "exec", h["ns"], "unshare", "-m",
                                      "--propagation", "private", "sh", "-c", script],
                                     stdout=log, stderr=log, start_new_session=True)
        wait_for(lambda: self._listening(h["net"] + ".2") or h["sshd"].poll() is not None,
                 what="sshd on %s.2" % h["net"])
        assert h["sshd"].poll() is None, "sshd exited: " + self.log(h, "sshd.log")

    @staticmethod
    def _listening(addr):
        try:
            socket.create_connection((addr, 22), timeout=0.5).close()
            return True
        except OSError:
            return False

    def stop_sshd(self, i):
        p = self.hosts[i]["sshd"]
        p.send_signal(signal.SIGTERM)
        p.wait(10)

    def file(self, i, rel):
        return os.path.join(self.hosts[i]["dir"], rel)

    def agent_pid(self, i):
        try:
            with open(self.file(i, "work/agent.pid")) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    def log(self, h, name):
        try:
            with open(os.path.join(h["dir"], name), errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def dump_logs(self):
        for i, h in enumerate(self.hosts):
            for name in ("sshd.log", "work/agent.log"):
                sys.stderr.write("\n===== host %d %s =====\n%s\n" % (i, name, self.log(h, name)))

    def stop(self):
        for i, h in enumerate(self.hosts):
            pid = self.agent_pid(i) if os.path.isdir(h["dir"]) else None
            if pid:
                try:
                    os.kill(pid, signal.SIGTERM)
                    wait_for(lambda: not alive(pid), timeout=15, what="agent %d" % pid)
                except (OSError, AssertionError):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            if h["sshd"] and h["sshd"].poll() is None:
                h["sshd"].kill()
                h["sshd"].wait(10)
        for ns in self.made:  # the veth pair goes with its end in the namespace
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def spec(path, hosts):
    with open(path, "w") as f:
        f.write("name: boot\npools:\n  onprem: {kind: on-prem}\nprofiles:\n  cpu: {}\n"
                "groups:\n  boxes:\n    pool: onprem\n    profile: cpu\n"
                "    nodes: box-[1-2]\n    addresses: [%s, %s]\n" % (hosts.addr(0), hosts.addr(1)))


def bootstrap(c, hosts, *args, env=None, token_file=True):
    m = hosts.root
    token = ["--join-token-file", os.path.join(c.state_dir, "join.token")] if token_file else []
    argv = ["fleet", "bootstrap", "--agent-server", "http://%s:%d" % (hosts.server_side(0), c.port),
            ] + token + ["-i", hosts.key,
            "--ssh-option", "StrictHostKeyChecking=no", "--ssh-option",
            "UserKnownHostsFile=/dev/null", "--prefix", m + "/bin", "--config-dir", m + "/etc",
            "--unit-dir", m + "/systemd", "--work-dir", m + "/work", "--agent-option",
            "gpu-backend=none", "--timeout", "60s"] + list(args)
    return c.cli(*argv, timeout=180, env=env)


def files_of(hosts, i):
    return {rel: sha256(hosts.file(i, rel))
            for rel in ("bin/anvil", "etc/agent.yaml", "etc/join.token",
                        "systemd/anvil-agent.service")}


def check_installed(c, hosts, i, name):
    m = hosts.root
    assert sha256(hosts.file(i, "bin/anvil")) == sha256(ANVIL)
    assert os.stat(hosts.file(i, "bin/anvil")).st_mode & 0o777 == 0o755
    token = hosts.file(i, "etc/join.token")
    assert os.stat(token).st_mode & 0o777 == 0o600, oct(os.stat(token).st_mode)
    assert open(token).read().strip() == c.join_token
    conf = open(hosts.file(i, "etc/agent.yaml")).read()
    for line in ("address: '%s'" % hosts.addr(i), "name: '%s'" % name,
                 "join-token-file: '%s/etc/join.token'" % m, "work-dir: '%s/work'" % m,
                 "gpu-backend: 'none'", "listen: '0.0.0.0:7071'"):
        assert line in conf.splitlines(), (line, conf)
    assert c.join_token not in conf
    unit = open(hosts.file(i, "systemd/anvil-agent.service")).read()
    assert "ExecStart=%s/bin/anvil agent --config %s/etc/agent.yaml\n" % (m, m) in unit, unit
    assert "Delegate=yes" in unit and "KillMode=process" in unit, unit
    assert alive(hosts.agent_pid(i)), "no agent runs on host %d" % i


def test_bootstrap_two_hosts():
    why = missing()
    if why:
        print("SKIP test_bootstrap_two_hosts: %s" % why)
        return
    hosts = Hosts()
    ok = False
    try:
        with cluster(agents=0, name="boot", server_args=["--listen", "0.0.0.0:0"]) as c:
            path = os.path.join(hosts.dir, "fleet.yaml")
            spec(path, hosts)

            # --dry-run on machines that have nothing: says all, makes nothing
            p = bootstrap(c, hosts, "--dry-run", path)
            assert p.returncode == 0, (p.stdout, p.stderr)
            assert "box-1 %s: would change" % hosts.addr(0) in p.stdout, p.stdout
            assert "not run with --dry-run" in p.stdout, p.stdout
            assert "2 would change, 0 ok, 0 failed" in p.stdout, p.stdout
            for h in hosts.hosts:
                assert sorted(os.listdir(h["dir"])) == ["sshd.log", "sshd_config"], h

            # the first bootstrap: everything installed, both agents join
            p = bootstrap(c, hosts, path)
            assert p.returncode == 0, (p.stdout, p.stderr)
            out = p.stdout
            for i, name in enumerate(("box-1", "box-2")):
                assert "%s %s: changed" % (name, hosts.addr(i)) in out, out
                assert "%s: joined as node %s" % (hosts.addr(i), name) in out, out
                check_installed(c, hosts, i, name)
            assert "started without systemd" in out, out
            assert "2 changed, 0 ok, 0 failed; 2 of 2 nodes registered" in out, out
            nodes = {n["name"]: n for n in c.nodes()}
            assert nodes["box-1"]["address"] == hosts.addr(0), nodes
            assert nodes["box-2"]["address"] == hosts.addr(1), nodes

            # a rank on each node
            p = c.cli("run", "--gpus", "0", "--nodes", "2", "--wait", "--", "sh", "-c",
                      'echo "on=$ANVIL_NODE"', timeout=120)
            assert p.returncode == 0, (p.stdout, p.stderr)
            assert "on=box-1" in p.stdout and "on=box-2" in p.stdout, p.stdout

            # again: nothing to change, the agents left running
            before = [hosts.agent_pid(i) for i in range(2)]
            p = bootstrap(c, hosts, path)
            assert p.returncode == 0, (p.stdout, p.stderr)
            assert " changed " not in p.stdout, p.stdout
            assert "0 changed, 2 ok, 0 failed; 2 of 2 nodes registered" in p.stdout, p.stdout
            assert "running (no systemd)" in p.stdout, p.stdout
            assert [hosts.agent_pid(i) for i in range(2)] == before

            # --dry-run with another option: says what, changes nothing
            held = [files_of(hosts, i) for i in range(2)]
            p = bootstrap(c, hosts, "--dry-run", "--agent-option", "log-level=debug", path)
            assert p.returncode == 0, (p.stdout, p.stderr)
            assert "config        would change  %s/etc/agent.yaml differs" % hosts.root \
                in p.stdout, p.stdout
            assert "binary        ok" in p.stdout, p.stdout
            assert "no systemd: restart the agent detached" in p.stdout, p.stdout
            assert [files_of(hosts, i) for i in range(2)] == held
            assert [hosts.agent_pid(i) for i in range(2)] == before

            # one host's sshd down: it fails with ssh's message, the other
            # gets the new config and a restarted agent that joins again
            hosts.stop_sshd(1)
            p = bootstrap(c, hosts, "--agent-option", "log-level=debug",
                          "%s=box-1" % hosts.addr(0), "%s=box-2" % hosts.addr(1))
            assert p.returncode == 1, (p.stdout, p.stderr)
            assert "box-2 %s: failed" % hosts.addr(1) in p.stdout, p.stdout
            assert "inspect       failed        ssh: connect to host %s port 22: " \
                "Connection refused" % hosts.addr(1) in p.stdout, p.stdout
            assert "box-1 %s: changed" % hosts.addr(0) in p.stdout, p.stdout
            assert "restarted without systemd" in p.stdout, p.stdout
            assert "%s: joined as node box-1" % hosts.addr(0) in p.stdout, p.stdout
            assert "1 changed, 0 ok, 1 failed; 1 of 1 node registered" in p.stdout, p.stdout
            assert hosts.agent_pid(0) != before[0] and alive(hosts.agent_pid(0))
            assert not alive(before[0])
            assert "log-level: 'debug'" in open(hosts.file(0, "etc/agent.yaml")).read()
            assert files_of(hosts, 1) == held[1]

            # later, the join token has expired (it lives 24h by default): a
            # bootstrap that takes the token from the server has it rotated
            # first, and installs the valid one
            p = c.cli("node", "token", "--rotate", "--ttl", "1s")
            assert p.returncode == 0, p.stderr
            wait_for(lambda: c.api("GET", "/v1/join-token")["expired"], what="the expiry")
            p = bootstrap(c, hosts, "--agent-option", "log-level=debug",
                          "%s=box-1" % hosts.addr(0), token_file=False)
            assert p.returncode == 0, (p.stdout, p.stderr)
            assert "the join token had expired; rotated it" in p.stderr, p.stderr
            current = c.api("GET", "/v1/join-token")
            assert not current["expired"], current
            assert open(hosts.file(0, "etc/join.token")).read().strip() == current["token"]
            assert "%s: joined as node box-1" % hosts.addr(0) in p.stdout, p.stdout
        ok = True
    finally:
        if not ok:
            hosts.dump_logs()
        hosts.stop()
        if ok:
            shutil.rmtree(hosts.dir, ignore_errors=True)
        else:
            sys.stderr.write("kept test directory %s\n" % hosts.dir)


if __name__ == "__main__":
    run_tests([test_bootstrap_two_hosts])
