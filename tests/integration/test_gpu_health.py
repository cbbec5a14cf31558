"""The GPU layer through the real server and agents with the simulated
backend: inventory and topology reported and shown, NVLink-aware choice,
each fault class injected and its effect (job failed, GPU quarantined and
reset, node drained, warning counted) with its reason, event and metric,
operator cordon/drain, the node check, unhealthy GPUs never assigned, and
the exposition validated by promtool."""
import json
import os
import random
import re
import subprocess
import tempfile
import urllib.request

from harness import ApiError, cluster, run_tests, wait_for

FAST = ("--gpu-sample-ms", "200")
RESET_MS = 3000  # how long a simulated GPU reset takes in the XID 48 test
PROMTOOL = "/usr/bin/promtool"


def node(c, name):
    return c.api("GET", "/v1/nodes/" + name)["node"]


def fault(c, name, **f):
    return c.api("POST", "/v1/nodes/%s/faults" % name, f)


def events(c, kind=None):
    evs = c.api("GET", "/v1/events?limit=1000")["events"]
    return [e for e in evs if kind is None or e["kind"] == kind]


def placement(c, jid):
    """[(node name, [gpu indices])] of the job's current attempt."""
    job = c.api("GET", "/v1/jobs/%d" % jid)["job"]
    if not job.get("attempts"):
        return []
    return [(r["node"], list(r["gpus"])) for r in job["attempts"][-1]["ranks"]]


def running_on(c, jid):
    wait_for(lambda: c.job(jid)["state"] == "running", what="job %d running" % jid)
    return placement(c, jid)[0]


def agent_metrics(c, name):
    with urllib.request.urlopen(node(c, name)["agent_url"] + "/metrics", timeout=10) as r:
        return r.read().decode()


def sample_value(text, metric, **labels):
    for line in text.splitlines():
        if not line.startswith(metric + "{"):
            continue
        if all('%s="%s"' % (k, v) in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_inventory_topology_and_groups():
    with cluster(agents=1, gpus=8, topo=True, agent_args=FAST, name="gpuinv") as c:
        n = node(c, "node-1")
        assert n["backend"] == "sim", n
        assert n["driver_version"] == "sim-550.54.15", n
        assert n["gpu_groups"] == [0x0F, 0xF0], n["gpu_groups"]
        assert n["gpu_near_groups"] == [0x03, 0x0C, 0x30, 0xC0], n["gpu_near_groups"]
        g1 = n["gpus"][1]
        assert g1["links"][0] == "NV" and g1["links"][1] == "SELF", g1
        assert g1["links"][5] == "SYS", g1  # other island, other NUMA node
        assert g1["numa_node"] == 0 and g1["minor"] == 1 and g1["health"] == "healthy", g1
        assert all(g["health"] == "healthy" for g in n["gpus"])
        gpus = c.api("GET", "/v1/nodes")["nodes"][0]
        assert gpus["gpus_unhealthy"] == 0 and gpus["state"] == "ready", gpus


def test_nvlink_aware_choice():
    with cluster(agents=1, gpus=8, topo=True, agent_args=FAST, name="gpunv") as c:
        one = c.submit(["sleep", "30"], gpus=1)
        _, g = running_on(c, one["id"])
        island = 0 if g[0] < 4 else 4
        four = c.submit(["sleep", "30"], gpus=4)
        _, g4 = running_on(c, four["id"])
        # the 4-GPU task gets the whole free NVLink island, not 3 + 1
        assert sorted(g4) == [i for i in range(8) if i // 4 != island // 4], (g, g4)
        two = c.submit(["sleep", "30"], gpus=2)
        _, g2 = running_on(c, two["id"])
        assert all(x // 4 == island // 4 for x in g2), (g, g4, g2)
        # and within the island, two GPUs behind one PCIe switch
        assert g2[0] // 2 == g2[1] // 2, (g, g4, g2)
        for j in (one, four, two):
            c.api("POST", "/v1/jobs/%d/cancel" % j["id"])


def test_application_xid_fails_only_the_job():
    with cluster(agents=1, gpus=2, agent_args=FAST, name="gpuxid13") as c:
        j = c.submit(["sleep", "60"], gpus=1)
        name, g = running_on(c, j["id"])
        fault(c, name, gpu=g[0], kind="xid", xid=13)
        done = c.wait_job(j["id"], timeout=30)
        assert done["state"] == "failed", done
        assert "XID 13" in done["reason"] and name in done["reason"], done["reason"]
        assert node(c, name)["gpus"][g[0]]["health"] == "healthy"
        assert any(e["job_id"] == j["id"] for e in events(c, "job.gpu_fault"))
        p = c.cli("events", "--job", str(j["id"]), check=True)
        assert "job.gpu_fault" in p.stdout and "XID 13" in p.stdout, p.stdout
        assert node(c, name)["faults"]["job"] == 1
        # the GPU stays in service: two 1-GPU jobs use both GPUs again
        a = c.submit(["sleep", "2"], gpus=2)
        assert c.wait_job(a["id"], timeout=30)["state"] == "succeeded"


def test_gpu_fault_quarantines_requeues_and_resets():
    with cluster(agents=1, gpus=2, agent_args=FAST, gpu_reset_ms=RESET_MS,
                 name="gpuxid48") as c:
        j = c.submit(["sleep", "6"], gpus=1, name="victim")
        name, g = running_on(c, j["id"])
        bad = g[0]
        fault(c, name, gpu=bad, kind="xid", xid=48)
        wait_for(lambda: c.job(j["id"])["state"] == "pending" or len(placement(c, j["id"])) and
                 placement(c, j["id"])[0][1] != [bad] and c.job(j["id"])["state"] == "running",
                 what="job requeued")
        # out of service until its reset is done (RESET_MS after it went idle), and
        # seen so in the node, `anvil nodes show` and the agent's metrics
        assert node(c, name)["gpus"][bad]["health"] == "quarantined", node(c, name)["gpus"]
        show = c.cli("nodes", "show", name, check=True).stdout
        row = [l for l in show.splitlines() if re.match(r"\s*%d\s+NVIDIA H200\s" % bad, l)]
        assert row and "quarantined: XID 48" in row[0], show
        assert sample_value(agent_metrics(c, name), "anvil_gpu_health", gpu=str(bad),
                            Hostname=name, state="quarantined") == 1.0
        kinds = [e["kind"] for e in events(c)]
        assert "gpu.unhealthy" in kinds and "job.requeued" in kinds, kinds
        requeued = [e for e in events(c, "job.requeued") if e["job_id"] == j["id"]]
        assert "GPU %d" % bad in requeued[0]["message"], requeued
        # the job runs again and succeeds; the GPU comes back after its reset
        done = c.wait_job(j["id"], timeout=60)
        assert done["state"] == "succeeded", done
        assert len(c.api("GET", "/v1/jobs/%d" % j["id"])["job"]["attempts"]) == 2
        wait_for(lambda: node(c, name)["gpus"][bad]["health"] == "healthy", timeout=30,
                 what="GPU reset and back")
        # one fault, counted once: the XID, the new uncorrectable error and the
        # driver's reset request are its evidence
        assert node(c, name)["faults"]["gpu"] == 1, node(c, name)["faults"]
        assert any("(same fault)" in e["message"] for e in events(c, "gpu.fault"))
        # oldest first: quarantined, then back in service after the reset
        kinds = [e["kind"] for e in reversed(events(c))]
        assert kinds.index("gpu.unhealthy") < kinds.index("gpu.healthy"), kinds
        back = [e for e in events(c, "gpu.healthy") if "GPU %d" % bad in e["message"]]
        assert back and "clean check" in back[0]["message"], back
        # not back at once: the reset took RESET_MS (event times are whole seconds)
        out = [e for e in events(c, "gpu.unhealthy") if "GPU %d" % bad in e["message"]]
        assert len(out) == 1 and len(back) == 1, (out, back)
        assert back[0]["time_ms"] - out[0]["time_ms"] >= RESET_MS - 1000, (out, back)
        assert sample_value(agent_metrics(c, name), "anvil_gpu_health", gpu=str(bad),
                            state="healthy") == 1.0


def test_unhealthy_gpu_never_assigned():
    """A failed row remap keeps a GPU out (the clean check never passes);
    a randomized run of jobs never lands on it."""
    rnd = random.Random(4)
    with cluster(agents=2, gpus=4, agent_args=FAST, name="gpunever") as c:
        fault(c, "node-1", gpu=2, kind="remap", failure=1)
        wait_for(lambda: node(c, "node-1")["gpus_unhealthy"] == 1, what="GPU quarantined")
        # the server remembers it across a restart (the agent sent it once)
        c.kill_server()
        c.start_server()
        assert node(c, "node-1")["gpus"][2]["health"] == "quarantined"
        jobs = [c.submit(["sleep", "%.2f" % rnd.uniform(0.1, 0.6)], gpus=rnd.choice([1, 1, 2, 3]))
                for _ in range(30)]
        for j in jobs:
            assert c.wait_job(j["id"], timeout=120)["state"] == "succeeded"
            for name, gpus in placement(c, j["id"]):
                assert not (name == "node-1" and 2 in gpus), (j["id"], name, gpus)
        assert node(c, "node-1")["gpus"][2]["health"] == "quarantined"
        # a 4-GPU job still fits node-2, and is never placed on node-1
        four = c.submit(["true"], gpus=4)
        assert c.wait_job(four["id"], timeout=30)["state"] == "succeeded"
        assert placement(c, four["id"])[0][0] == "node-2"
        chk = c.api("POST", "/v1/nodes/node-1/check", {})
        assert chk["ok"] is False, chk
        bad = [k for k in chk["checks"] if not k["ok"]]
        assert bad and bad[0]["name"] == "gpu2.health" and "remap" in bad[0]["detail"], chk


def test_node_fault_drains_and_requeues():
    with cluster(agents=2, gpus=2, agent_args=FAST, name="gpulost") as c:
        c.api("POST", "/v1/nodes/node-2", {"state": "cordoned"})
        j = c.submit(["sleep", "8"], gpus=1, checkpointing=True)
        name, g = running_on(c, j["id"])
        assert name == "node-1"
        c.api("POST", "/v1/nodes/node-2", {"state": "ready"})
        fault(c, "node-1", gpu=g[0], kind="xid", xid=79)
        wait_for(lambda: node(c, "node-1")["state"] in ("draining", "drained"), what="drain")
        n1 = node(c, "node-1")
        assert "XID 79" in n1["reason"] and n1["drained_by_fault"], n1
        assert n1["fault"] and "XID 79" in n1["fault"], n1
        wait_for(lambda: node(c, "node-1")["state"] == "drained", what="drained")
        # the next sample (every 200 ms here) sees the GPU gone from the bus
        wait_for(lambda: node(c, "node-1")["gpus"][g[0]]["health"] == "lost", timeout=10,
                 what="GPU reported lost")
        done = c.wait_job(j["id"], timeout=60)
        assert done["state"] == "succeeded", done
        assert placement(c, j["id"])[0][0] == "node-2"
        # no uncordon while the agent still reports the fault
        try:
            c.api("POST", "/v1/nodes/node-1", {"state": "ready"})
            raise AssertionError("uncordon of a faulty node was accepted")
        except ApiError as e:
            assert e.status == 409 and "XID 79" in json.dumps(e.body), e.body
        # a new agent process (a reboot) no longer reports it
        c.kill_agent(0)
        c.start_agent(0)
        wait_for(lambda: node(c, "node-1")["fault"] is None, what="fault cleared")
        assert c.api("POST", "/v1/nodes/node-1/check", {})["ok"] is True
        c.api("POST", "/v1/nodes/node-1", {"state": "ready"})
        assert node(c, "node-1")["state"] == "ready"
        states = [e["message"] for e in events(c, "node.state") if "node-1" in e["message"]]
        assert any("draining -> drained" in m for m in states), states


def test_warning_counted_not_acted_on():
    with cluster(agents=1, gpus=2, agent_args=FAST, name="gpuwarn") as c:
        j = c.submit(["sleep", "5"], gpus=1)
        name, g = running_on(c, j["id"])
        fault(c, name, gpu=g[0], kind="temperature", celsius=95)
        wait_for(lambda: node(c, name)["faults"]["warning"] >= 1, what="warning counted")
        n = node(c, name)
        assert n["state"] == "ready" and n["gpus_unhealthy"] == 0, n
        assert c.wait_job(j["id"], timeout=30)["state"] == "succeeded"
        text = agent_metrics(c, name)
        assert sample_value(text, "DCGM_FI_DEV_GPU_TEMP", gpu=str(g[0])) == 95.0, text[:2000]
        assert sample_value(text, "anvil_gpu_faults_total", gpu=str(g[0]),
                            scope="warning") >= 1
        warn = [e for e in events(c, "gpu.fault") if "warning" in e["message"]]
        assert warn and "95" in warn[0]["message"], warn


def test_operator_cordon_and_drain():
    with cluster(agents=2, gpus=1, agent_args=FAST, name="gpudrain") as c:
        c.api("POST", "/v1/nodes/node-1", {"state": "cordoned", "reason": "maintenance"})
        j = c.submit(["sleep", "30"], gpus=1)
        assert running_on(c, j["id"])[0] == "node-2"
        n1 = node(c, "node-1")
        assert n1["state"] == "cordoned" and n1["reason"] == "maintenance", n1
        # draining node-2 requeues its job; node-1 is still cordoned, so it waits
        c.api("POST", "/v1/nodes/node-2", {"state": "draining", "reason": "disk swap"})
        wait_for(lambda: node(c, "node-2")["state"] == "drained", what="node-2 drained")
        wait_for(lambda: c.job(j["id"])["state"] == "pending", what="job requeued")
        assert "disk swap" in c.job(j["id"])["reason"] or \
            any("disk swap" in e["message"] for e in events(c, "job.requeued"))
        # the decisions survive a server restart
        c.kill_server()
        c.start_server()
        n2 = node(c, "node-2")
        assert n2["state"] == "drained" and n2["reason"] == "disk swap", n2
        assert node(c, "node-1")["state"] == "cordoned"
        c.api("POST", "/v1/nodes/node-1", {"state": "ready"})
        assert running_on(c, j["id"])[0] == "node-1"
        c.api("POST", "/v1/jobs/%d/cancel" % j["id"])


def promtool_lints(text):
    with tempfile.NamedTemporaryFile("w", suffix=".prom", delete=False) as f:
        f.write(text)
    try:
        with open(f.name) as inp:
            p = subprocess.run([PROMTOOL, "check", "metrics"], stdin=inp, capture_output=True,
                               text=True)
    finally:
        os.unlink(f.name)
    return p.returncode, [l for l in (p.stdout + p.stderr).splitlines() if l.strip()]


def test_metrics_validate():
    assert os.access(PROMTOOL, os.X_OK), "promtool missing: scripts/deps.sh installs prometheus"
    with cluster(agents=1, gpus=2, agent_args=FAST, name="gpuprom") as c:
        j = c.submit(["sleep", "5"], gpus=1, name="labelled")
        name, g = running_on(c, j["id"])
        fault(c, name, gpu=g[0], kind="load", util_pct=80, mem_used_bytes=1 << 30)
        wait_for(lambda: sample_value(agent_metrics(c, name), "DCGM_FI_DEV_GPU_UTIL",
                                      gpu=str(g[0])) == 80.0, what="load sampled")
        text = agent_metrics(c, name)
        line = [l for l in text.splitlines() if l.startswith("DCGM_FI_DEV_GPU_UTIL{") and
                'gpu="%d"' % g[0] in l][0]
        # Hostname is the node name (what `anvil nodes` lists), not the machine's
        for label in ('anvil_job="%d"' % j["id"], 'anvil_task="labelled"', 'modelName=',
                      'UUID="GPU-', 'device="nvidia', 'Hostname="%s"' % name,
                      'anvil_backend="sim"'):
            assert label in line, line
        assert sample_value(text, "DCGM_FI_DEV_FB_USED", gpu=str(g[0])) == 1024.0
        rc, lints = promtool_lints(text)
        # the exporter's own names: counters without _total, modelName in camelCase
        unexpected = [l for l in lints if "_total\" suffix" not in l and "camelCase" not in l]
        assert not unexpected, lints
        with urllib.request.urlopen(c.url + "/metrics", timeout=10) as r:
            server = r.read().decode()
        rc, lints = promtool_lints(server)
        assert rc == 0 and not lints, lints
        assert "anvil_gpus_unhealthy 0" in server, server


def test_bad_health_and_fault_input():
    with cluster(agents=1, gpus=1, agent_args=FAST, name="gpubad") as c:
        for body, field in (({"gpu": 0, "kind": "xid"}, "xid"),
                            ({"gpu": 7, "kind": "lost"}, "gpu"),
                            ({"gpu": 0, "kind": "melt"}, "kind")):
            try:
                fault(c, "node-1", **body)
                raise AssertionError("accepted %r" % body)
            except ApiError as e:
                assert e.status == 400 and field in json.dumps(e.body), (body, e.body)
        try:
            c.api("POST", "/v1/nodes/node-1", {"state": "melted"})
            raise AssertionError("bad state accepted")
        except ApiError as e:
            assert e.status == 400 and "state" in json.dumps(e.body)
        # a forged health report is refused with the field named, and changes nothing
        agent_secret = c.node_secret(0)
        for h, field in (({"findings": [{"seq": 1, "scope": "cosmic"}]}, "scope"),
                         ({"gpus": [{"index": 99, "state": "healthy"}]}, "index")):
            req = urllib.request.Request(
                c.url + "/v1/agent/sync", method="POST",
                data=json.dumps({"node_id": 1, "health": h}).encode(),
                headers={"Authorization": "Bearer " + agent_secret})
            try:
                urllib.request.urlopen(req, timeout=10)
                raise AssertionError("accepted %r" % h)
            except urllib.error.HTTPError as e:
                assert e.code == 400 and field in e.read().decode()
        assert node(c, "node-1")["state"] == "ready"


if __name__ == "__main__":
    run_tests([test_inventory_topology_and_groups, test_nvlink_aware_choice,
               test_application_xid_fails_only_the_job,
               test_gpu_fault_quarantines_requeues_and_resets, test_unhealthy_gpu_never_assigned,
               test_node_fault_drains_and_requeues, test_warning_counted_not_acted_on,
               test_operator_cordon_and_drain, test_metrics_validate,
               test_bad_health_and_fault_input])
