"""The fleet as code end to end with real `anvil agent`s (simulated GPUs),
each on a host of its own: a network namespace with its own address on a
bridge, made by the test (netns.py), the server listening on the bridge.
The scenarios of test_fleet_apply.py that depend on what agents do run here
over real agents: plan on an empty cluster, apply, re-apply (no changes),
a driver pin rolled out node by node with running jobs requeued, a failing
node check stopping a rollout with that node cordoned, rollback; then
drift: a kernel setting of the profile changed by hand on one host, the GPU
set of another changed across an agent restart. The server sees each node
at its host's address and reaches its agent there; hosts reach each other
directly, and nothing of them outlives a test that failed.

The profile's steps are harmless: a cache directory under the test's
directory, and (on hosts only) net.core.somaxconn, a setting each network
namespace has for itself. Where namespaces cannot be made (not root, no
iproute2), the agents run on loopback, without the kernel setting, and the
test says so. Every validation error class of the spec is covered by the
unit tests in tests/unit/fleet/."""
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import netns
from harness import cluster, run_tests, sim_gpus, wait_for
from test_fleet_apply import (Fleet, plan_apply_history_idempotence,
                              rollout_requeues_stops_at_a_failure_and_rolls_back, running_jobs)

SOMAXCONN = "/proc/sys/net/core/somaxconn"


class HostFleet(Fleet):
    """node-1 and node-2, real agents on hosts 0 and 1 (node-3 of the spec
    never joins). Their simulated driver is sim-550.54.15, which the pins
    550 and 550.54 both match. Each agent's GPU check program passes unless
    its node's fail file exists: how one node fails its node check."""

    drivers = ("550", "550.54")
    failure = "no node check passed within 10s: gpu0.compute: "

    def __init__(self, c):
        self.c, self.hosts = c, c.hosts
        self.dir = tempfile.mkdtemp(prefix="anvil-fleet-hosts-")
        self.cache = os.path.join(c.dir, "cache")
        for i in range(2):
            self.start(i)
        wait_for(lambda: len([n for n in c.nodes() if n["state"] == "ready"]) == 2,
                 what="2 ready nodes")

    @property
    def steps(self):
        s = "    cache_dir: %s\n" % self.cache
        if self.hosts:
            s += "    sysctl: {net.core.somaxconn: 1234}\n"
        return s

    def addresses(self):
        return "    addresses: %s.[2-4]\n" % self.hosts.net if self.hosts else ""

    def address(self, i):
        return self.hosts.address(i) if self.hosts else "127.0.0.1"

    def fail_file(self, i):
        return os.path.join(self.c.work_dir(i), "check-fails")

    def start(self, i):
        work = self.c.work_dir(i)
        os.makedirs(work, exist_ok=True)
        check = os.path.join(work, "gpu-check")
        with open(check, "w") as f:
            f.write("#!/bin/sh\nexec test ! -e '%s'\n" % self.fail_file(i))
        os.chmod(check, 0o755)
        self.c.start_agent(i, ["--gpu-check-program", check, "--profile-check-interval", "1s"])

    def restart(self, i, gpus):
        """Agent i stopped, its node given `gpus` GPUs, and started again."""
        self.c.kill_agent(i, signal.SIGTERM)
        sim_gpus(os.path.join(self.c.work_dir(i), "gpus.json"), gpus, node=i)
        self.start(i)

    def assert_checked(self, i):
        # 12 checks: the GPU count and model the profile gives, each GPU's
        # health and compute check, the driver and the node's faults
        log = "node-%d.log" % (i + 1)
        wait_for(lambda: 'node check ok=1 summary="12 checks, 0 failed"' in self.c.log(log),
                 what="a node check with the profile's expectations in " + log)

    def fail_rollout(self):
        open(self.fail_file(0), "w").close()

    def repair(self):
        os.unlink(self.fail_file(0))

    def somaxconn(self, i):
        return self.hosts.run(i, ["cat", SOMAXCONN], check=True).stdout.strip()

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def with_hosts(test):
    def run():
        ok, why = netns.available()
        if not ok:
            print("%s: agents on loopback: %s" % (test.__name__, why), flush=True)
        with netns.Hosts(2, "fleet") if ok else contextlib.nullcontext() as h, \
                cluster(agents=0, name="fleethosts", hosts=h) as c:
            f = HostFleet(c)
            try:
                test(c, f)
            finally:
                f.close()
    run.__name__ = test.__name__
    return run


def flat(text):
    """text with each run of spaces made one: columns that width the longest
    state sets."""
    return "\n".join(" ".join(line.split()) for line in text.splitlines())


def steps_of(n):
    return [(s["name"], s["status"]) for s in n["profile_status"]["steps"]]


def apply_on_hosts(c, f):
    with open(SOMAXCONN) as fd:
        before = fd.read().strip()
    plan_apply_history_idempotence(c, f)
    # each node where its host is: the address it reports, its agent reached there
    for i in range(2):
        n = f.node("node-%d" % (i + 1))
        assert n["address"] == f.address(i), n
        assert n["agent_url"].startswith("http://%s:" % f.address(i)), n
        # changed by the run that converged, ok in the periodic checks since
        steps = [(name, "ok" if st == "changed" else st) for name, st in steps_of(n)]
        assert steps[:3] == [("gpu", "ok"), ("driver", "ok"), ("cache_dir " + f.cache, "ok")], n
        assert steps[3:] == ([("sysctl net.core.somaxconn", "ok")] if f.hosts else []), n
    assert os.path.isdir(f.cache)
    p = c.cli("nodes")
    assert f.address(0) in p.stdout and f.address(1) in p.stdout, p.stdout
    if f.hosts:
        assert p.stdout.count(f.hosts.net + ".") == 2, p.stdout
        # node-3 waits at the address the spec gives it
        p = f.fleet("plan", f.spec())
        assert "node-3" in p.stdout and f.hosts.net + ".4" in p.stdout, p.stdout
        assert [f.somaxconn(i) for i in range(2)] == ["1234", "1234"]  # the profile's, in each
    with open(SOMAXCONN) as fd:
        assert fd.read().strip() == before  # the machine's own setting untouched


def rollout_requeues_running_jobs(c, f):
    assert f.fleet("apply", f.spec()).returncode == 0
    old = f.node("node-1")["profile"]["hash"]
    jobs = running_jobs(c, 2)
    p = f.fleet("apply", "--timeout", "90s", f.spec(driver=f.drivers[1]), timeout=120)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "driver %s -> %s (needs a drain)" % f.drivers in p.stdout, p.stdout
    assert p.stdout.index("  node-1  done") < p.stdout.index("  node-2  done"), p.stdout
    assert "rollout of revision 2: done" in p.stdout, p.stdout
    for name in ("node-1", "node-2"):
        n = f.node(name)
        assert n["state"] == "ready" and n["reason"] == "", n
        assert n["profile"]["hash"] != old, n
        assert n["profile_status"]["hash"] == n["profile"]["hash"], n
        assert n["profile_status"]["state"] == "converged", n
    # each job was stopped on its node's turn and runs again
    for j in jobs:
        j = wait_for(lambda: (lambda x: x if x["state"] == "running" else None)(c.job(j)),
                     what="job %d running again" % j)
        assert len(j["attempts"]) == 2, j["attempts"]
        assert "rollout of revision 2" in j["attempts"][0]["end_reason"], j["attempts"]


def drift_on_hosts(c, f):
    assert f.fleet("apply", f.spec()).returncode == 0
    p = f.fleet("refresh")
    assert p.returncode == 0 and "2 converged" in p.stdout and "no drift." in p.stdout, p.stdout
    if f.hosts:  # changed by hand on node-2: the agent's next check finds it
        f.hosts.run(1, ["sh", "-c", "echo 999 > " + SOMAXCONN], check=True)
        wait_for(lambda: f.node("node-2")["state"] == "held", what="node-2 held")
    f.restart(0, gpus=2)  # node-1 comes back with two GPUs fewer
    wait_for(lambda: f.node("node-1")["gpus_total"] == 2 and f.node("node-1")["state"] == "held",
             what="node-1 held with 2 GPUs")
    p = f.fleet("refresh")
    out = flat(p.stdout)
    assert "1 failed" in out, out
    assert ("node-1 failed profile h200 failed at step 'gpu': 2 GPUs, the profile wants 4 x "
            "NVIDIA H200\n- - GPUs: the profile expects 4, the node reports 2") in out, out
    if f.hosts:
        assert "1 drifted" in out, out
        assert ("node-2 drifted drifted from profile h200 at step 'sysctl net.core.somaxconn': "
                "net.core.somaxconn is 999, the profile wants 1234") in out, out
    assert f.fleet("history").stdout.count("\n") == 2  # refresh changed nothing
    # an apply of the same spec asks both agents to converge again: node-2's
    # setting is put back; node-1 still lacks its GPUs and stays held
    p = f.fleet("apply", f.spec())
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "converge again (in place): profile h200 failed at step 'gpu'" in p.stdout, p.stdout
    if f.hosts:
        assert "converge again (in place): drifted from profile h200" in p.stdout, p.stdout
        assert "  node-2  ready" in p.stdout, p.stdout
        assert f.somaxconn(1) == "1234"
    assert f.node("node-1")["state"] == "held"
    # its GPUs back: the restarted agent converges and the node is in service
    f.restart(0, gpus=4)
    wait_for(lambda: f.node("node-1")["state"] == "ready", timeout=30, what="node-1 ready")
    p = f.fleet("refresh")
    assert "2 converged" in p.stdout and "no drift." in p.stdout, p.stdout


def hosts_reach_each_other_and_leave_nothing_behind():
    ok, why = netns.available()
    if not ok:
        print("skipped: " + why)
        return
    serve = ("import socket,sys; s=socket.create_server(('', 7999)); print('up', flush=True); "
             "c, peer = s.accept(); c.sendall(peer[0].encode())")
    ask = "import socket,sys; print(socket.create_connection((sys.argv[1], 7999), 10).recv(64))"
    try:
        with netns.Hosts(2, "probe") as h:
            names, bridge = list(h.names), h.bridge
            server = h.popen(0, [sys.executable, "-c", serve], stdout=subprocess.PIPE, text=True)
            assert server.stdout.readline() == "up\n"
            p = h.run(1, [sys.executable, "-c", ask, h.address(0)], check=True)
            assert p.stdout.strip() == repr(h.address(1).encode()), p.stdout  # as host 0 saw it
            h.popen(1, ["sleep", "600"])
            raise KeyboardInterrupt  # a test that fails half way
    except KeyboardInterrupt:
        pass
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(n in listed for n in names), listed
    assert subprocess.run(["ip", "link", "show", bridge], capture_output=True).returncode != 0
    assert server.poll() is not None


if __name__ == "__main__":
    run_tests([hosts_reach_each_other_and_leave_nothing_behind,
               with_hosts(apply_on_hosts),
               with_hosts(rollout_requeues_running_jobs),
               with_hosts(rollout_requeues_stops_at_a_failure_and_rolls_back),
               with_hosts(drift_on_hosts)])
