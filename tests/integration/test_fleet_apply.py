"""`anvil fleet plan/apply/history/rollback/refresh/status/stop` against a
real server, with agents that speak the real agent protocol (fakeagent.py:
they report their profile status as a converging agent does, and answer the
node check): plan on a cluster, apply, idempotence, queue and quota changes,
a saved plan refused once the cluster changed, a profile change rolled out
node by node with a running job requeued, a failing node stopping the
rollout, rollback, drift, a server restart in the middle of a rollout, and
bad input named; a saved plan of a spec whose mappings are not in
alphabetical order applies as it was saved (an edited one is refused) and
`history REV` prints the spec as its YAML; work a rollout drains off a node
goes to a node it will not drain, not to the next one. test_fleet_hosts.py runs the scenarios that depend on
what the agents do (apply, a rollout stopped by a failing node, rollback)
with real agents, each on a host of its own."""
import json
import os
import shutil
import tempfile

from fakeagent import FakeAgent
from harness import ApiError, cluster, run_tests, wait_for

SPEC = """\
name: lab
pools: {onprem: }
profiles:
  h200:
    gpu: {model: NVIDIA H200, count: 4}
    driver: "%(driver)s"
%(steps)sgroups:
  h:
    pool: onprem
    profile: h200
    nodes: node-[1-3]
%(addresses)s    labels: {gpu: h200}
    topology: {rack: r1, block: b1}
queues:
  prod: {priority: 100, borrowing: false, quotas: {search: %(quota)d}}
teams:
  search: {weight: 2}
upgrade: {max_unavailable: 1, max_unavailable_per_block: 1, validation_timeout: 10s}
"""


class Fleet:
    """A server, two agents (node-1, node-2; node-3 of the spec never
    joins) and a directory for spec files. What differs between these fake
    agents and real ones (test_fleet_hosts.py's HostFleet) is here: the
    scenarios below run over both."""

    drivers = ("550.1", "560.2")  # a driver pin, and the one a rollout changes it to
    steps = "    sysctl: {vm.swappiness: 1}\n"  # the profile's steps after its driver
    # why node-1 fails its turn in a rollout once fail_rollout() was called
    failure = "profile h200 failed at step 'package nvidia-driver'"

    def __init__(self, c, mode="converge"):
        self.c = c
        self.dir = tempfile.mkdtemp(prefix="anvil-fleet-")
        self.agents = [FakeAgent(c.url, c.join_token, "node-%d" % (i + 1), mode=mode)
                       for i in range(2)]
        wait_for(lambda: len(c.nodes()) == 2, what="2 nodes")

    def spec(self, driver=None, quota=8, name="fleet.yaml"):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(SPEC % {"driver": driver or self.drivers[0], "quota": quota,
                            "steps": self.steps, "addresses": self.addresses()})
        return path

    def addresses(self):
        """The group's addresses key, if any."""
        return ""

    def assert_checked(self, i):
        """Agent i's node check was asked for the profile's GPUs; its driver
        was judged by its own step, by its rule."""
        assert self.agents[i].checks[-1] == {"gpus": 4, "gpu_model": "NVIDIA H200"}, \
            self.agents[i].checks

    def fail_rollout(self):
        for a in self.agents:  # the new driver cannot be installed anywhere
            a.mode = "fail"

    def repair(self):
        for a in self.agents:
            a.mode = "converge"

    def fleet(self, *args, timeout=90):
        return self.c.cli("fleet", *args, timeout=timeout, env={"USER": "alice"})

    def node(self, name):
        return self.c.api("GET", "/v1/nodes/" + name)["node"]

    def close(self):
        for a in self.agents:
            a.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def with_fleet(test, mode="converge"):
    def run():
        with cluster(agents=0, name="fleetapply") as c:
            f = Fleet(c, mode)
            try:
                test(c, f)
            finally:
                f.close()
    run.__name__ = test.__name__
    return run


def plan_apply_history_idempotence(c, f):
    spec = f.spec()
    p = f.fleet("plan", spec)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "fleet lab: planned against a cluster no spec was applied to" in p.stdout, p.stdout
    assert "  + node-3  group h, pool onprem, profile h200" in p.stdout, p.stdout
    assert "  ~ node-1" in p.stdout, p.stdout
    assert "driver none -> %s (needs a drain)" % f.drivers[0] in p.stdout, p.stdout
    assert "rolling upgrade: 2 nodes, at most 1 out at once" in p.stdout, p.stdout
    assert "  + prod" in p.stdout and "  + search" in p.stdout, p.stdout
    j = json.loads(f.fleet("plan", "--json", spec).stdout)
    assert j["plan"]["changes"] == 4 and len(j["fingerprint"]) == 64, j
    # apply: the rollout, followed node by node
    p = f.fleet("apply", spec)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "revision 1 applied" in p.stdout, p.stdout
    assert "  node-1  " in p.stdout and "  node-2  done" in p.stdout, p.stdout
    assert "rollout of revision 1: done" in p.stdout, p.stdout
    n = f.node("node-1")
    assert n["state"] == "ready" and n["pool"] == "onprem", n
    assert n["labels"] == {"gpu": "h200", "rack": "r1", "block": "b1"}, n["labels"]
    assert n["profile"]["name"] == "h200" and n["profile_status"]["state"] == "converged", n
    assert n["profile_checked"] == n["profile"]["hash"], n
    f.assert_checked(0)
    q = {x["name"]: x for x in c.api("GET", "/v1/queues")["queues"]}["prod"]
    assert q["priority"] == 100 and q["borrowing"] is False, q
    assert q["quotas"][0]["team"] == "search" and q["quotas"][0]["nominal_gpus"] == 8, q
    teams = {t["name"]: t for t in c.api("GET", "/v1/teams")["teams"]}
    assert teams["search"]["weight"] == 2, teams
    # again: nothing
    p = f.fleet("apply", spec)
    assert p.returncode == 0 and "no changes: the cluster already matches this spec" in p.stdout
    # a quota change is a queue change, applied as such
    p = f.fleet("apply", f.spec(quota=16))
    assert p.returncode == 0 and "  ~ prod  quotas.search 8 -> 16" in p.stdout, p.stdout
    q = {x["name"]: x for x in c.api("GET", "/v1/queues")["queues"]}["prod"]
    assert q["quotas"][0]["nominal_gpus"] == 16, q
    p = f.fleet("history")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split()[:3] == ["REV", "APPLIED", "WHO"], lines
    assert lines[1].split()[0] == "2" and "alice" in lines[1] and "1 queue" in lines[1], lines
    assert "rolled out to 2 node(s)" in lines[2], lines
    p = f.fleet("history", "1")
    assert "revision 1 of fleet lab" in p.stdout, p.stdout
    assert "driver: \"%s\"" % f.drivers[0] in p.stdout, p.stdout
    p = c.cli("nodes", "show", "node-1")
    assert "  profile     h200 (" in p.stdout and "): converged, checked" in p.stdout, p.stdout
    p = f.fleet("status")
    assert "fleet lab, revision 2" in p.stdout, p.stdout
    assert "nodes: 3 in the spec, 2 joined, 2 ready" in p.stdout, p.stdout
    assert "node-3  h200     not joined  waiting for its agent to join" in p.stdout, p.stdout


def saved_plan_refused_when_the_cluster_changed(c, f):
    spec = f.spec()
    out = os.path.join(f.dir, "plan.json")
    p = f.fleet("plan", "--out", out, spec)
    assert p.returncode == 0 and "plan saved to %s" % out in p.stdout, (p.stdout, p.stderr)
    c.api("POST", "/v1/queues", {"name": "prod", "priority": 5})
    c.api("POST", "/v1/nodes/node-2", {"labels": {"extra": "x"}})
    p = f.fleet("apply", out)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "the cluster changed since the plan was made" in p.stderr, p.stderr
    assert "node node-2 changed" in p.stderr and "queue prod was added" in p.stderr, p.stderr
    assert c.api("GET", "/v1/fleet/revisions")["revisions"] == []
    p = f.fleet("plan", "--out", out, spec)
    assert "  ~ prod  priority 5 -> 100" in p.stdout, p.stdout
    assert "labels: set gpu=h200, set rack=r1, set block=b1, remove extra" in p.stdout, p.stdout
    p = f.fleet("apply", "--no-wait", out)
    assert p.returncode == 0 and "revision 1 applied" in p.stdout, (p.stdout, p.stderr)
    rev = c.api("GET", "/v1/fleet/revisions/1")["revision"]
    assert rev["who"] == "alice" and rev["file"] == spec, rev
    assert "node-[1-3]" in rev["text"], rev


# Mappings out of alphabetical order: groups (and so nodes and the rollout's
# order), queues; the compiled spec keeps the file's order.
UNSORTED = """\
name: lab
pools: {onprem: }
profiles:
  h200:
    gpu: {model: NVIDIA H200, count: 4}
    driver: "550.1"
groups:
  h: {pool: onprem, profile: h200, nodes: node-2, labels: {gpu: h200}}
  b: {pool: onprem, profile: h200, nodes: node-1, labels: {gpu: h200}}
queues:
  zeta: {priority: 100, quotas: {search: 8}}
  alpha: {priority: %(alpha)d}
teams:
  search: {weight: 2}
upgrade: {max_unavailable: 1, max_unavailable_per_block: 1, validation_timeout: 10s}
"""


def unsorted_plan(f, alpha=10):
    """The spec file UNSORTED and its plan saved with --out: their paths."""
    spec = os.path.join(f.dir, "unsorted.yaml")
    with open(spec, "w") as fd:
        fd.write(UNSORTED % {"alpha": alpha})
    out = os.path.join(f.dir, "plan.json")
    p = f.fleet("plan", "--out", out, spec)
    assert p.returncode == 0, (p.stdout, p.stderr)
    return spec, out


def saved_plan_of_unsorted_yaml_applies_unchanged(c, f):
    spec, out = unsorted_plan(f)
    p = f.fleet("apply", out)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "revision 1 applied" in p.stdout and "rollout of revision 1: done" in p.stdout, \
        p.stdout
    assert p.stdout.index("  node-2  done") < p.stdout.index("  node-1  done"), p.stdout
    q = {x["name"]: x for x in c.api("GET", "/v1/queues")["queues"]}
    assert q["zeta"]["priority"] == 100 and q["alpha"]["priority"] == 10, q
    # the spec applied from the plan is the file's: applying the file changes nothing
    p = f.fleet("apply", spec)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "no changes: the cluster already matches this spec" in p.stdout, p.stdout
    # a plan file an earlier anvil wrote, its keys sorted, applies as its text reads
    spec, out = unsorted_plan(f, alpha=30)
    with open(out) as fd:
        saved = json.load(fd)
    with open(out, "w") as fd:
        json.dump(saved, fd, indent=1, sort_keys=True)
    p = f.fleet("apply", out)
    assert p.returncode == 0 and "revision 2 applied" in p.stdout, (p.stdout, p.stderr)
    assert "  ~ alpha  priority 10 -> 30" in p.stdout, p.stdout


def an_edited_plan_is_refused(c, f):
    spec, out = unsorted_plan(f)
    with open(out) as fd:
        saved = json.load(fd)

    def edited(name, change):
        d = json.loads(json.dumps(saved))
        change(d)
        path = os.path.join(f.dir, name)
        with open(path, "w") as fd:
            json.dump(d, fd, indent=1)
        return path

    def set_alpha(d):  # the spec and its text alike: its plan is another
        d["spec"]["queues"]["alpha"]["priority"] = 20
        d["text"] = d["text"].replace("alpha: {priority: 10}", "alpha: {priority: 20}")
    p = f.fleet("apply", edited("spec.json", set_alpha))
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "the changes it lists are not what its spec gives" in p.stderr, p.stderr
    assert "the plan file was edited" in p.stderr, p.stderr

    def drop_change(d):  # the reviewed changes themselves
        d["plan"]["queues"]["add"] = d["plan"]["queues"]["add"][:1]
    p = f.fleet("apply", edited("changes.json", drop_change))
    assert p.returncode == 1 and "the plan file was edited" in p.stderr, (p.stdout, p.stderr)

    def spec_only(d):  # its text left as it was
        d["spec"]["queues"]["alpha"]["priority"] = 30
    path = edited("spec-only.json", spec_only)
    p = f.fleet("apply", path)
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert ("%s: field 'spec' is not what field 'text' reads as: the plan file was edited"
            % path) in p.stderr, p.stderr
    assert c.api("GET", "/v1/fleet/revisions")["revisions"] == []
    p = f.fleet("apply", "--no-wait", out)  # the file as saved still applies
    assert p.returncode == 0 and "revision 1 applied" in p.stdout, (p.stdout, p.stderr)


def history_shows_the_spec_as_its_yaml(c, f):
    spec, _ = unsorted_plan(f)
    assert f.fleet("apply", "--no-wait", spec).returncode == 0
    p = f.fleet("history", "1")
    assert p.returncode == 0, p.stderr
    assert "revision 1 of fleet lab\n" in p.stdout, p.stdout
    assert "\n\n" + UNSORTED % {"alpha": 10} in p.stdout, p.stdout


def running_jobs(c, n):
    """The ids of n checkpointing jobs of 4 GPUs each, once all run."""
    jobs = [c.submit(["sleep", "600"], gpus=4, checkpointing=True, grace_ms=1000)["id"]
            for _ in range(n)]
    wait_for(lambda: all(c.job(j)["state"] == "running" for j in jobs), what="jobs running")
    return jobs


def rollout_requeues_stops_at_a_failure_and_rolls_back(c, f):
    assert f.fleet("apply", f.spec()).returncode == 0
    jobs = running_jobs(c, 2)
    on1 = [j for j in jobs if c.job(j)["attempts"][-1]["ranks"][0]["node"] == "node-1"][0]
    f.fail_rollout()
    p = f.fleet("apply", f.spec(driver=f.drivers[1]))
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "  ~ node-1" in p.stdout, p.stdout
    assert "driver %s -> %s (needs a drain)" % f.drivers in p.stdout, p.stdout
    assert "  node-1  failed: " + f.failure in p.stdout, p.stdout
    assert "rollout of revision 2: stopped: node node-1:" in p.stdout, p.stdout
    n = f.node("node-1")
    assert n["state"] == "cordoned", n
    assert n["reason"].startswith("rollout of revision 2 stopped here: " + f.failure), n
    assert f.node("node-2")["state"] == "ready"  # never taken out
    # node-1's job was drained off it (its checkpoint kept) and waits: node-2 is busy
    j = c.job(on1)
    assert j["state"] == "pending" and len(j["attempts"]) == 1, j
    assert j["attempts"][0]["end_reason"].startswith(
        "node node-1 draining: rollout of revision 2"), j["attempts"][0]
    p = f.fleet("status")
    assert "rollout of revision 2: stopped" in p.stdout, p.stdout
    f.repair()
    p = f.fleet("rollback", "1")
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "revision 3 applied" in p.stdout, p.stdout
    assert "driver %s -> %s" % (f.drivers[1], f.drivers[0]) in p.stdout, p.stdout
    assert "rollout of revision 3: done" in p.stdout, p.stdout
    n = f.node("node-1")
    assert n["state"] == "ready" and n["reason"] == "", n
    j = wait_for(lambda: (lambda x: x if x["state"] == "running" else None)(c.job(on1)),
                 what="the job running again")
    assert j["attempts"][-1]["ranks"][0]["node"] == "node-1", j
    hist = c.api("GET", "/v1/fleet/revisions")["revisions"]
    assert [r["id"] for r in hist] == [3, 2, 1] and hist[0]["rollback_of"] == 1, hist
    assert hist[1]["result"].startswith("rollout stopped: node node-1"), hist


# node-1 and node-2 take a new driver; node-3, in a group of its own, keeps
# its profile: the rollout never touches it.
THREE = """\
name: lab
pools: {onprem: }
profiles:
  h200:
    gpu: {model: NVIDIA H200, count: 4}
    driver: "%(driver)s"
  spare:
    gpu: {model: NVIDIA H200, count: 4}
    driver: "550.1"
groups:
  h: {pool: onprem, profile: h200, nodes: "node-[1-2]", topology: {block: b1}}
  s: {pool: onprem, profile: spare, nodes: node-3, topology: {block: b1}}
upgrade: {max_unavailable: 1, max_unavailable_per_block: 1, validation_timeout: 10s}
"""


def drained_work_avoids_the_next_node_to_drain():
    with cluster(agents=0, name="fleetnext") as c:
        f = Fleet(c)
        try:
            f.agents.append(FakeAgent(c.url, c.join_token, "node-3"))
            wait_for(lambda: len(c.nodes()) == 3, what="3 nodes")

            def spec(driver):
                path = os.path.join(f.dir, "three.yaml")
                with open(path, "w") as fd:
                    fd.write(THREE % {"driver": driver})
                return path
            p = f.fleet("apply", spec("550.1"))
            assert p.returncode == 0, (p.stdout, p.stderr)
            # one job, on node-1 (every node free: ties go to the first)
            job = running_jobs(c, 1)[0]
            assert c.job(job)["attempts"][-1]["ranks"][0]["node"] == "node-1", c.job(job)
            p = f.fleet("apply", spec("560.2"))
            assert p.returncode == 0, (p.stdout, p.stderr)
            assert "rollout of revision 2: done" in p.stdout, p.stdout
            assert p.stdout.index("  node-1  done") < p.stdout.index("  node-2  done"), \
                p.stdout
            j = wait_for(lambda: (lambda x: x if x["state"] == "running" else None)(c.job(job)),
                         what="the job running again")
            # drained off node-1 once, and run on node-3, which the rollout never
            # drains, not on node-2, free too but the next to drain
            a = j["attempts"]
            assert len(a) == 2, a
            assert a[0]["end_reason"].startswith(
                "node node-1 draining: rollout of revision 2"), a[0]
            assert a[1]["ranks"][0]["node"] == "node-3", a[1]
        finally:
            f.close()


def refresh_reports_drift(c, f):
    assert f.fleet("apply", f.spec()).returncode == 0
    p = f.fleet("refresh")
    assert p.returncode == 0 and "2 converged" in p.stdout and "no drift." in p.stdout, p.stdout
    f.agents[1].set_status("drifted", "vm.swappiness is 60")
    f.agents[0].driver = "535.9"  # its facts change under it
    wait_for(lambda: f.node("node-2")["state"] == "held", what="node-2 held")
    wait_for(lambda: f.node("node-1")["driver_version"] == "535.9", what="node-1's facts")
    p = f.fleet("refresh")
    assert "1 drifted" in p.stdout, p.stdout
    assert ("node-2  drifted    drifted from profile h200 at step 'sysctl vm.swappiness': "
            "vm.swappiness is 60") in p.stdout, p.stdout
    assert "node-1  converged  driver: the profile pins 550.1, the node reports 535.9" \
        in p.stdout, p.stdout
    j = json.loads(f.fleet("refresh", "--json").stdout)
    assert j["counts"]["drifted"] == 1 and j["counts"]["mismatched"] == 1, j
    assert f.fleet("history").stdout.count("\n") == 2  # refresh changed nothing
    # the agent never fixes drift by itself: an apply of the same spec asks it to
    p = f.fleet("apply", f.spec())
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "converge again (in place): drifted from profile h200" in p.stdout, p.stdout
    assert "  node-2  ready" in p.stdout, p.stdout
    assert f.agents[1].converges == [{"hash": f.node("node-2")["profile"]["hash"]}]
    assert f.agents[0].converges == []


def restart_mid_rollout(c, f):
    assert f.fleet("apply", f.spec()).returncode == 0
    for a in f.agents:
        a.mode = "hold"
    p = f.fleet("apply", "--no-wait", f.spec(driver="560.2"))
    assert p.returncode == 0, (p.stdout, p.stderr)
    wait_for(lambda: f.node("node-1")["state"] == "drained" and
             f.agents[0].status and f.agents[0].status["state"] == "converging",
             what="node-1 converging")
    c.kill_server()
    c.start_server()
    st = c.api("GET", "/v1/fleet/status")
    assert st["rollout"]["state"] == "running", st
    assert [n["phase"] for n in st["rollout"]["nodes"]] == ["converging", "queued"], st
    # asked while the agents still hold it: once they converge, the rollout
    # may end before a status call comes
    p = f.fleet("status")
    assert "rollout of revision 2: running" in p.stdout, p.stdout
    for a in f.agents:
        a.mode = "converge"
    f.agents[0].set_status("converged")
    f.agents[0].driver = "560.2"
    wait_for(lambda: c.api("GET", "/v1/fleet/status")["rollout"]["state"] == "done",
             timeout=60, what="the rollout to finish")
    assert f.node("node-1")["state"] == "ready" and f.node("node-2")["state"] == "ready"
    assert f.agents[1].profile["spec"]["driver"] == "560.2"


def stop_a_rollout(c, f):
    assert f.fleet("apply", f.spec()).returncode == 0
    for a in f.agents:
        a.mode = "hold"
    assert f.fleet("apply", "--no-wait", f.spec(driver="560.2")).returncode == 0
    p = f.fleet("apply", f.spec(driver="570.3"))
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "the rollout of revision 2 is running" in p.stderr, p.stderr
    p = f.fleet("stop")
    assert p.returncode == 0 and "rollout of revision 2 stopped" in p.stdout, p.stdout
    p = f.fleet("stop")
    assert p.returncode == 1 and "no rollout is running" in p.stderr, p.stderr
    assert c.api("GET", "/v1/fleet/revisions/2")["revision"]["result"] == \
        "rollout stopped: stopped by alice"


def bad_input_is_named(c, f):
    def refused(path, body, status, text):
        try:
            c.api("POST", path, body)
        except ApiError as e:
            assert e.status == status and text in json.dumps(e.body), (e.status, e.body)
            return
        raise AssertionError("%s %r was accepted" % (path, body))
    refused("/v1/fleet/apply", {"spec": {"name": "x"}}, 400,
            "field 'spec': 3 errors: 'pools' is missing; 'profiles' is missing")
    refused("/v1/fleet/apply", {"spec": {}, "plan": {}}, 400, "give one of them")
    refused("/v1/fleet/plan", {}, 400, "spec")
    refused("/v1/fleet/rollback", {"revision": 4}, 404, "there is no revision 4")
    refused("/v1/fleet/apply", {"plan": {"spec": {"name": "x"}, "fingerprint": "0"}}, 400,
            "field 'spec'")
    a = f.agents[0]
    for ps, text in ((
            {"hash": "h", "state": "bogus", "steps": [], "time_ms": 1},
            "profile_status: field 'state': 'bogus' is not converging"),
            ({"hash": "h", "state": "failed", "steps": [{"name": "x", "status": "maybe"}],
              "time_ms": 1}, "profile_status: steps[0]: field 'status': 'maybe' is not ok"),
            ({"hash": "h", "state": "failed", "time_ms": 1}, "profile_status: ")):
        try:
            a._post("/v1/agent/sync", {"node_id": a.node_id, "profile_status": ps}, a.secret)
        except Exception as e:  # urllib's HTTPError
            body = e.read().decode()
            assert e.code == 400 and text in body, (e.code, body)
        else:
            raise AssertionError("accepted %r" % ps)
    p = f.fleet("rollback", "x")
    assert p.returncode == 2 and "'x' is not a revision number" in p.stderr, p.stderr
    p = f.fleet("apply")
    assert p.returncode == 2 and "fleet apply takes one FILE" in p.stderr, p.stderr
    p = f.fleet("status")
    assert p.returncode == 0 and "no spec applied yet" in p.stdout, p.stdout


if __name__ == "__main__":
    run_tests([with_fleet(plan_apply_history_idempotence),
               with_fleet(saved_plan_refused_when_the_cluster_changed),
               with_fleet(saved_plan_of_unsorted_yaml_applies_unchanged),
               with_fleet(an_edited_plan_is_refused),
               with_fleet(history_shows_the_spec_as_its_yaml),
               drained_work_avoids_the_next_node_to_drain,
               with_fleet(rollout_requeues_stops_at_a_failure_and_rolls_back),
               with_fleet(refresh_reports_drift),
               with_fleet(restart_mid_rollout),
               with_fleet(stop_a_rollout),
               with_fleet(bad_input_is_named)])
