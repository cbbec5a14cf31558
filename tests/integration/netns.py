"""Several hosts on one machine: each a network namespace of its own
(`ip netns`) with one interface, eth0, on a bridge in the root namespace,
and an address of its own on a private /24. The root namespace holds the
bridge's address (the gateway), so a daemon listening there is reached from
every host, and the hosts reach each other over the bridge.

    with Hosts(2, "fleet") as h:
        h.address(0)                        # 10.211.N.2
        h.hostname(0)                       # fleet-0, its own host name
        h.run(0, ["ip", "-br", "addr"])     # inside host 0
        p = h.popen(1, [ANVIL, "agent", ...])

Everything the harness made (processes started in a host, the namespaces,
their links, the bridge) is removed in __exit__, after a failure too, and
what a test process killed before its end left behind is removed by the
next one. Needs root and iproute2; available() says whether they work here.
Standard library only.
"""
import os
import re
import shutil
import signal
import subprocess
import time

_available = None
# `ip netns exec NS` puts the files of ETC_NETNS/NS over /etc's: each host's
# resolv.conf names no name server, so a name lookup there (Open MPI's of
# node names, say) fails at once instead of timing out on the machine's
# name server, which no host can reach.
ETC_NETNS = "/etc/netns"
RESOLV_CONF = "# a test host (tests/integration/netns.py): no name server\n"


def _ip(*args, check=True):
    p = subprocess.run(["ip"] + list(args), capture_output=True, text=True)
    if check and p.returncode != 0:
        raise OSError("ip %s: exit status %d: %s" % (" ".join(args), p.returncode,
                                                   p.stderr.strip()))
    return p


def available():
    """(True, "") when namespaces and bridges can be made here, else
    (False, why): tests print why and run on loopback or skip."""
    global _available
    if _available is None:
        if os.geteuid() != 0:
            _available = (False, "network namespaces need root")
        else:
            name = "anvil-probe-%d" % os.getpid()
            try:
                _ip("netns", "add", name)
                _ip("netns", "del", name)
                _ip("link", "add", "anvp%d" % os.getpid(), "type", "bridge")
                _ip("link", "del", "anvp%d" % os.getpid())
                _available = (True, "")
            except OSError as e:  # no ip(8), or it refused
                _available = (False, "cannot make network namespaces here: %s" % e)
    return _available


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _sweep():
    """Removes the namespaces and bridges of test processes that are gone
    (killed by a timeout before their __exit__ ran)."""
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        m = re.match(r"(anvil-h(\d+)-\S+)", line)
        if m and not _alive(int(m.group(2))):
            _kill_inside(m.group(1))
            _ip("netns", "del", m.group(1), check=False)
            shutil.rmtree(os.path.join(ETC_NETNS, m.group(1)), ignore_errors=True)
    for line in _ip("-o", "link", "show", "type", "bridge", check=False).stdout.splitlines():
        m = re.match(r"\d+: (anvb(\d+)):", line)
        if m and not _alive(int(m.group(2))):
            _ip("link", "del", m.group(1), check=False)


def _kill_inside(ns):
    pids = _ip("netns", "pids", ns, check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
    return len(pids)


def _subnet():
    """A /24 of 10.211.0.0/16 that no interface here uses, starting from
    one derived from the pid, so parallel test processes get their own."""
    used = _ip("-4", "-o", "addr", "show", check=False).stdout
    start = os.getpid() % 250 + 1
    for k in range(250):
        third = (start + k) % 250 + 1
        if " 10.211.%d." % third not in used:
            return "10.211.%d" % third
    raise OSError("no free /24 in 10.211.0.0/16")


class Hosts:
    """n hosts named PREFIX-0 .. PREFIX-(n-1) to the reader, each a network
    namespace anvil-h<pid>-<i>. gateway is the bridge's address in the root
    namespace; address(i) host i's."""

    def __init__(self, n, prefix="host"):
        if n < 1 or n > 200:
            raise ValueError("1 to 200 hosts")
        self.n, self.prefix = n, prefix
        self.pid = os.getpid()
        self.bridge = "anvb%d" % self.pid  # at most 11 characters: IFNAMSIZ is 16
        self.names = ["anvil-h%d-%s-%d" % (self.pid, prefix, i) for i in range(n)]
        self.procs = []
        self.made = False

    def __enter__(self):
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _make(self):
        _sweep()
        self.net = _subnet()
        self.gateway = self.net + ".1"
        self.made = True
        # nf_call_iptables 0: traffic between hosts is not filtered by the
        # machine's own firewall (a FORWARD policy of DROP would stop it)
        _ip("link", "add", self.bridge, "type", "bridge", "nf_call_iptables", "0")
        _ip("addr", "add", self.gateway + "/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, ns in enumerate(self.names):
            outside = "anvv%dh%d" % (self.pid, i)
            _ip("netns", "add", ns)
            os.makedirs(os.path.join(ETC_NETNS, ns), exist_ok=True)
            with open(os.path.join(ETC_NETNS, ns, "resolv.conf"), "w") as f:
                f.write(RESOLV_CONF)
            _ip("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", outside, "master", self.bridge, "up")
            _ip("-n", ns, "addr", "add", self.address(i) + "/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "route", "add", "default", "via", self.gateway)

    def address(self, i):
        return "%s.%d" % (self.net, i + 2)

    def hostname(self, i):
        return "%s-%d" % (self.prefix, i)

    def wrap(self, i, argv):
        """argv run inside host i, under the host's own host name (a UTS
        namespace of its own, as a machine has: Open MPI, for one, tells
        nodes apart by it). ip netns exec, unshare and sh each exec the
        next: the same pid."""
        return (["ip", "netns", "exec", self.names[i], "unshare", "--uts", "--", "sh", "-c",
                 'hostname "$0" && exec "$@"', self.hostname(i)] + list(argv))

    def run(self, i, argv, **kw):
        """subprocess.run of argv inside host i (capture_output and text by
        default)."""
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("timeout", 60)
        return subprocess.run(self.wrap(i, argv), **kw)

    def popen(self, i, argv, **kw):
        """subprocess.Popen of argv inside host i, stopped at the end."""
        p = subprocess.Popen(self.wrap(i, argv), **kw)
        self.procs.append(p)
        return p

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        if not self.made:
            return
        for ns in self.names:
            # what the processes started inside left running (a job's ranks)
            deadline = time.time() + 10
            while _kill_inside(ns) and time.time() < deadline:
                time.sleep(0.05)
            _ip("netns", "del", ns, check=False)  # takes its end of the veth with it
            shutil.rmtree(os.path.join(ETC_NETNS, ns), ignore_errors=True)
        _ip("link", "del", self.bridge, check=False)
        self.made = False
