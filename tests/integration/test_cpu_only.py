"""CPU-only jobs (`--gpus 0`, docs/scheduling.md) on a real cluster: a rank
sees no GPU (CUDA_VISIBLE_DEVICES empty, NVIDIA_VISIBLE_DEVICES "void",
NPROC_PER_NODE 1); a 2-node CPU-only gang gets one rank on each node; a
CPU-only job (and `anvil shell --gpus 0`) starts while every GPU is busy and
leaves the GPUs to GPU work; each node runs at most one CPU-only rank per
CPU, and `anvil why` says so, and says when no schedulable node of its pool
is left."""
import json
import os

from harness import cluster, run_tests, wait_for

# Each rank writes its variables to DIR/JOB-RANK and prints them.
RECORD = ("python3 -c 'import json,os,sys; "
          "keys=[\"CUDA_VISIBLE_DEVICES\",\"NVIDIA_VISIBLE_DEVICES\",\"NPROC_PER_NODE\","
          "\"WORLD_SIZE\",\"NNODES\",\"NODE_RANK\",\"MASTER_ADDR\",\"MASTER_PORT\","
          "\"ANVIL_JOB_ID\",\"ANVIL_NODE\"]; "
          "d={k:os.environ.get(k) for k in keys}; "
          "open(sys.argv[1]+\"/\"+d[\"ANVIL_JOB_ID\"]+\"-\"+d[\"NODE_RANK\"],\"w\")"
          ".write(json.dumps(d)); print(json.dumps(d))' ")


def records(out, jid):
    res = []
    for name in sorted(os.listdir(out)):
        if name.startswith("%d-" % jid):
            with open(os.path.join(out, name)) as f:
                res.append(json.load(f))
    return res


def node_of(c, jid):
    """The node of rank 0 of the job's last attempt."""
    return c.job(jid)["attempts"][-1]["ranks"][0]["node"]


def run_id(p):
    return json.loads(p.stdout)["job"]["id"]


def test_cpu_only_run_sees_no_gpu():
    with cluster(agents=1, gpus=2, name="cpuonly") as c:
        p = c.cli("run", "--gpus", "0", "--wait", "--", "sh", "-c",
                  'echo "[$CUDA_VISIBLE_DEVICES]"')
        assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
        assert "[]" in p.stdout.splitlines(), p.stdout
        out = os.path.join(c.dir, "records")
        os.makedirs(out)
        j = c.submit(["sh", "-c", RECORD + out], gpus=0)
        done = c.wait_job(j["id"])
        assert done["state"] == "succeeded", done
        assert done["gpus"] == 0, done
        assert done["attempts"][0]["ranks"][0]["gpus"] == [], done
        [r] = records(out, j["id"])
        assert r["CUDA_VISIBLE_DEVICES"] == "", r
        assert r["NVIDIA_VISIBLE_DEVICES"] == "void", r
        assert r["NPROC_PER_NODE"] == "1" and r["WORLD_SIZE"] == "1", r
        shown = c.cli("show", str(j["id"]), check=True).stdout
        assert "1 node x 0 GPUs (CPU-only)" in shown, shown
        # a GPU model makes no sense without a GPU: refused, naming the field
        p = c.cli("run", "--gpus", "0", "--gpu-type", "h200", "--", "true")
        assert p.returncode != 0, p.stdout
        assert "field 'gpu_type': 'h200'" in p.stderr and "CPU-only" in p.stderr, p.stderr


def test_cpu_only_gang_one_rank_per_node():
    with cluster(agents=2, gpus=2, name="cpugang") as c:
        out = os.path.join(c.dir, "records")
        os.makedirs(out)
        p = c.cli("run", "--json", "--gpus", "0", "--nodes", "2", "--", "sh", "-c", RECORD + out,
                  check=True)
        jid = run_id(p)
        done = c.wait_job(jid)
        assert done["state"] == "succeeded", done
        recs = records(out, jid)
        assert len(recs) == 2, recs
        assert sorted(r["NODE_RANK"] for r in recs) == ["0", "1"], recs
        assert len({r["ANVIL_NODE"] for r in recs}) == 2, "ranks must be on distinct nodes"
        assert len({(r["MASTER_ADDR"], r["MASTER_PORT"]) for r in recs}) == 1, recs
        for r in recs:
            assert r["CUDA_VISIBLE_DEVICES"] == "" and r["NVIDIA_VISIBLE_DEVICES"] == "void", r
            assert r["NNODES"] == "2" and r["WORLD_SIZE"] == "2", r
            assert r["NPROC_PER_NODE"] == "1", r


def test_cpu_only_job_runs_while_every_gpu_is_busy():
    with cluster(agents=2, gpus=2, name="cpubusy") as c:
        gpu_jobs = [c.submit(["sleep", "60"], gpus=2) for _ in range(2)]
        for g in gpu_jobs:
            wait_for(lambda: c.job(g["id"])["state"] == "running", what="GPU job running")
        waiting = c.submit(["true"], gpus=1)  # no GPU is free: it waits
        p = c.cli("run", "--gpus", "0", "--wait", "--", "sh", "-c", "echo prep-done")
        assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
        assert "prep-done" in p.stdout, p.stdout
        # an interactive session without a GPU, too (`anvil shell --gpus 0`)
        # (the command lingers a moment: a session whose command ends at once
        # races its first attach under load, a known bug apart from CPU-only
        # jobs: docs/cli.md, "Interactive work")
        with c.term("shell", "--gpus", "0", "--", "sh", "-c",
                    'echo "X${CUDA_VISIBLE_DEVICES}X$NVIDIA_VISIBLE_DEVICES"; sleep 1') as t:
            t.expect("XXvoid", 30)
            assert t.wait() == 0, t.seen
        for g in gpu_jobs:
            assert c.job(g["id"])["state"] == "running"
        w = c.job(waiting["id"])
        assert w["state"] == "pending", w
        assert "GPU" in w["reason"], w
        for g in gpu_jobs:
            c.cli("cancel", str(g["id"]), check=True)
        assert c.wait_job(waiting["id"])["state"] == "succeeded"


def test_cpu_only_limit_and_why():
    with cluster(agents=2, gpus=1, name="cpulimit") as c:
        limit = min(n["cpus"] for n in c.nodes())
        assert limit >= 1, c.nodes()
        if limit * 2 > 32:
            print("SKIP the limit part: %d CPUs a node would need %d sleepers"
                  % (limit, limit * 2))
        else:
            sleepers = [c.submit(["sleep", "60"], gpus=0) for _ in range(limit * 2)]
            for s in sleepers:
                wait_for(lambda: c.job(s["id"])["state"] in ("scheduled", "running"),
                         what="CPU-only sleeper placed")
            on = [node_of(c, s["id"]) for s in sleepers]
            assert sorted(on) == ["node-1"] * limit + ["node-2"] * limit, on  # spread
            late = c.submit(["true"], gpus=0)
            wait_for(lambda: "limit" in c.job(late["id"])["reason"], what="a reason")
            why = c.cli("why", str(late["id"]), check=True).stdout
            assert ("every eligible node runs its limit of %d CPU-only rank%s (2 nodes)"
                    % (limit, "" if limit == 1 else "s")) in why, why
            assert "CPU-only (0 GPUs)" in why, why
            gpu = c.submit(["true"], gpus=1)  # CPU-only ranks do not hold GPU work back
            assert c.wait_job(gpu["id"])["state"] == "succeeded"
            c.cli("cancel", str(sleepers[0]["id"]), check=True)
            assert c.wait_job(late["id"])["state"] == "succeeded"
            for s in sleepers[1:]:
                c.cli("cancel", str(s["id"]), check=True)
        # the only node of pool "prep" is cordoned: "no schedulable node in pool prep"
        c.cli("node", "label", "node-1", "--pool", "prep", check=True)
        c.cli("node", "cordon", "node-1", check=True)
        p = c.cli("run", "--json", "--gpus", "0", "--pool", "prep", "--", "true", check=True)
        jid = run_id(p)
        wait_for(lambda: "pool" in c.job(jid)["reason"], what="a reason")
        why = c.cli("why", str(jid), check=True).stdout
        assert "no schedulable node in pool prep" in why, why
        c.cli("node", "uncordon", "node-1", check=True)
        assert c.wait_job(jid)["state"] == "succeeded"
        assert node_of(c, jid) == "node-1", c.job(jid)


run_tests([test_cpu_only_run_sees_no_gpu, test_cpu_only_gang_one_rank_per_node,
           test_cpu_only_job_runs_while_every_gpu_is_busy, test_cpu_only_limit_and_why])
