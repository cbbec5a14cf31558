"""A 2-node x 4-GPU gang job: every rank sees the same MASTER_ADDR,
MASTER_PORT and WORLD_SIZE, distinct NODE_RANKs, and CUDA_VISIBLE_DEVICES
that no other running job has (checked from what the ranks record)."""
import json
import os

from harness import cluster, run_tests, wait_for

RECORD = ("python3 -c 'import json,os,sys,time; "
          "keys=[\"MASTER_ADDR\",\"MASTER_PORT\",\"WORLD_SIZE\",\"NODE_RANK\",\"NNODES\","
          "\"NPROC_PER_NODE\",\"CUDA_VISIBLE_DEVICES\",\"NVIDIA_VISIBLE_DEVICES\",\"ANVIL_JOB_ID\","
          "\"ANVIL_ATTEMPT\",\"ANVIL_OUTPUT_DIR\",\"ANVIL_NODE\"]; "
          "d={k:os.environ.get(k) for k in keys}; "
          "open(sys.argv[1]+\"/\"+d[\"ANVIL_JOB_ID\"]+\"-\"+d[\"NODE_RANK\"],\"w\").write(json.dumps(d)); "
          "print(json.dumps(d)); time.sleep(float(sys.argv[2]))' ")


def records(out):
    res = []
    for name in os.listdir(out):
        with open(os.path.join(out, name)) as f:
            res.append(json.load(f))
    return res


def test_gang_two_nodes_four_gpus():
    with cluster(agents=3, gpus=4, name="gang") as c:
        out = os.path.join(c.dir, "records")
        os.makedirs(out)
        # A single-GPU job first, so the gang has to avoid its GPU.
        other = c.submit(["sh", "-c", RECORD + out + " 3"], gpus=1)
        wait_for(lambda: c.job(other["id"])["state"] == "running", what="first job running")
        gang = c.submit(["sh", "-c", RECORD + out + " 1"], gpus=4, nodes=2, name="gang")
        done = c.wait_job(gang["id"])
        assert done["state"] == "succeeded", done
        assert done["exit_code"] == 0
        c.wait_job(other["id"])
        recs = records(out)
        g = [r for r in recs if r["ANVIL_JOB_ID"] == str(gang["id"])]
        o = [r for r in recs if r["ANVIL_JOB_ID"] == str(other["id"])]
        assert len(g) == 2 and len(o) == 1, recs
        assert len({r["MASTER_ADDR"] for r in g}) == 1
        assert len({r["MASTER_PORT"] for r in g}) == 1
        assert {r["WORLD_SIZE"] for r in g} == {"8"}
        assert {r["NNODES"] for r in g} == {"2"}
        assert {r["NPROC_PER_NODE"] for r in g} == {"4"}
        assert sorted(r["NODE_RANK"] for r in g) == ["0", "1"]
        assert {r["ANVIL_ATTEMPT"] for r in g} == {"1"}
        assert len({r["ANVIL_NODE"] for r in g}) == 2, "ranks must be on distinct nodes"
        for r in g:
            assert sorted(r["CUDA_VISIBLE_DEVICES"].split(",")) == ["0", "1", "2", "3"], r
            assert len(r["NVIDIA_VISIBLE_DEVICES"].split(",")) == 4
            # the rank's own directory on its node (an empty one is recycled
            # once the attempt ends, so its existence is not checked here)
            assert r["ANVIL_OUTPUT_DIR"].startswith(
                os.path.join(c.dir, r["ANVIL_NODE"], "output") + "/"), r
        # The other job held one GPU on its node while the gang ran: the gang
        # must not be on that node at all (4 of 4 GPUs needed).
        assert o[0]["ANVIL_NODE"] not in {r["ANVIL_NODE"] for r in g}
        # Every rank's log holds what it printed.
        for rank in (0, 1):
            log = c.cli("logs", "--rank", str(rank), str(gang["id"]), check=True).stdout
            assert '"NODE_RANK": "%d"' % rank in log, log


def test_gang_rank_failure_stops_the_gang():
    with cluster(agents=2, gpus=2, name="gangfail") as c:
        j = c.submit(["sh", "-c", 'if [ "$NODE_RANK" = 1 ]; then exit 3; fi; sleep 60'],
                     gpus=1, nodes=2)
        done = c.wait_job(j["id"], timeout=30)
        assert done["state"] == "failed", done
        assert done["exit_code"] == 3, done
        ranks = done["attempts"][0]["ranks"]
        assert ranks[1]["exit_code"] == 3
        # rank 0 was stopped by SIGTERM, long before its 60 s sleep ended, or,
        # when rank 1 failed before rank 0's agent started it, never started
        assert ranks[0]["state"] == "exited"
        assert ranks[0]["signal"] == 15 or ranks[0]["exit_code"] == 143 or \
            ranks[0]["error"] == "stopped before it started", ranks[0]


run_tests([test_gang_two_nodes_four_gpus, test_gang_rank_failure_stops_the_gang])
