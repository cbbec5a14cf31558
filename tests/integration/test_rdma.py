"""RDMA devices from a prepared sysfs tree (agent --sysfs-root): reported in
the node's facts with the GPUs near each port, and NCCL's interface
variables set for each rank from the ports near its GPUs."""
import json
import os
import shutil
import tempfile

from harness import cluster, run_tests, wait_for

# Two root complexes, one per NUMA node, each with a PCIe switch holding
# one HCA and one GPU (the harness's sim GPUs sit on buses 18 and 19).
SW = {0: "pci0000:10/0000:10:01.0/0000:11:00.0", 1: "pci0000:20/0000:20:01.0/0000:21:00.0"}
NIC = {0: SW[0] + "/0000:12:00.0/0000:13:00.0", 1: SW[1] + "/0000:22:00.0/0000:23:00.0"}
GPU = {0: SW[0] + "/0000:12:01.0/0000:18:00.0", 1: SW[1] + "/0000:22:01.0/0000:19:00.0"}


def put(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def link(root, rel, target):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.symlink(target, path)


def pci_device(root, pcipath, numa):
    put(root, "devices/%s/numa_node" % pcipath, "%d\n" % numa)
    link(root, "bus/pci/devices/%s" % pcipath.rsplit("/", 1)[1], "../../../devices/" + pcipath)


def build_tree(root):
    for i in (0, 1):
        dev = "mlx5_%d" % i
        pci_device(root, NIC[i], i)
        pci_device(root, GPU[i], i)
        link(root, "class/infiniband/" + dev, "../../devices/%s/infiniband/%s" % (NIC[i], dev))
        link(root, "devices/%s/infiniband/%s/device" % (NIC[i], dev),
             "../../../" + NIC[i].rsplit("/", 1)[1])
        put(root, "devices/%s/net/ib%d/dev_port" % (NIC[i], i), "0\n")
        ports = "devices/%s/infiniband/%s/ports/1/" % (NIC[i], dev)
        put(root, ports + "state", "4: ACTIVE\n")
        put(root, ports + "phys_state", "5: LinkUp\n")
        put(root, ports + "rate", "400 Gb/sec (4X NDR)\n")
        put(root, ports + "link_layer", "InfiniBand\n")


RECORD = ("python3 -c 'import json,os,sys; "
          "d={k:os.environ.get(k,\"\") for k in (\"CUDA_VISIBLE_DEVICES\",\"NCCL_IB_HCA\","
          "\"NCCL_SOCKET_IFNAME\")}; "
          "open(sys.argv[1]+\"/\"+os.environ[\"ANVIL_JOB_ID\"],\"w\").write(json.dumps(d))' ")


def test_ports_reported_and_nccl_variables_set():
    root = tempfile.mkdtemp(prefix="anvil-sysfs-")
    build_tree(root)
    try:
        check(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def check(root):
    with cluster(agents=1, gpus=2, agent_args=("--sysfs-root", root), name="rdma") as c:
        n = c.api("GET", "/v1/nodes/node-1")["node"]
        ports = {p["dev"]: p for p in n["rdma"]}
        assert set(ports) == {"mlx5_0", "mlx5_1"}, n["rdma"]
        assert ports["mlx5_0"]["state"] == "ACTIVE" and ports["mlx5_0"]["netdev"] == "ib0"
        assert ports["mlx5_0"]["gpus_near"] == [0] and ports["mlx5_1"]["gpus_near"] == [1], ports
        out = os.path.join(c.dir, "env")
        os.makedirs(out)
        # both GPUs busy at once, so each job gets a different one
        jobs = [c.submit(["sh", "-c", RECORD + out + "; sleep 1"], gpus=1) for _ in range(2)]
        for j in jobs:
            assert c.wait_job(j["id"])["state"] == "succeeded"
        seen = set()
        for j in jobs:
            with open(os.path.join(out, str(j["id"]))) as f:
                env = json.load(f)
            g = int(env["CUDA_VISIBLE_DEVICES"])
            seen.add(g)
            assert env["NCCL_IB_HCA"] == "=mlx5_%d:1" % g, env
            assert env["NCCL_SOCKET_IFNAME"] == "=ib%d" % g, env
        assert seen == {0, 1}, seen
        # a job's own setting wins
        j = c.submit(["sh", "-c", RECORD + out], gpus=1, env={"NCCL_IB_HCA": "mine"})
        assert c.wait_job(j["id"])["state"] == "succeeded"
        with open(os.path.join(out, str(j["id"]))) as f:
            assert json.load(f)["NCCL_IB_HCA"] == "mine"


if __name__ == "__main__":
    run_tests([test_ports_reported_and_nccl_variables_set])
