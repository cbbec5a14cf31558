"""Per-rank CPU and memory limits and GPU device isolation end to end: a job
submitted with `anvil run --cpus --memory` runs in cgroups that carry those
limits (read from inside the rank), bad values are refused with the field,
a job without limits runs in none, and with device isolation on (the
agent's ANVIL_DEVICE_ISOLATION=1; fake /dev/nvidiaN nodes) a rank can open
its own GPU's node and not another's, and a CPU-only rank (`--gpus 0`)
none. Needs root and the v1 cpu, memory and devices hierarchies, as on the
build machines."""
import json
import os

from harness import ApiError, cluster, run_tests, wait_for

# The rank prints its cgroup in a hierarchy and that cgroup's files.
SHOW = ("p=$(sed -n 's/^[0-9]*:%(c)s://p' /proc/self/cgroup); echo %(c)s_cgroup=$p; "
        "for f in %(files)s; do echo $f=$(cat /sys/fs/cgroup/%(c)s$p/$f); done; ")
LIMITS = (SHOW % {"c": "memory", "files": "memory.limit_in_bytes"}
          + SHOW % {"c": "cpu", "files": "cpu.cfs_quota_us cpu.cfs_period_us"})


def v1_hierarchy(controller):
    with open("/proc/self/mounts") as f:
        for line in f:
            _, mnt, kind, opts = line.split()[:4]
            if kind == "cgroup" and controller in opts.split(",") and \
                    mnt == "/sys/fs/cgroup/" + controller:
                return True
    return False


def value(log, key):
    for line in log.splitlines():
        if line.startswith(key + "="):
            return line[len(key) + 1:]
    raise AssertionError("no %s in the rank's log:\n%s" % (key, log))


def run_and_log(c, *args):
    p = c.cli("run", "--json", *args, check=True)
    jid = json.loads(p.stdout)["job"]["id"]
    done = c.wait_job(jid)
    log = c.cli("logs", str(jid), check=True).stdout
    assert done["state"] == "succeeded", (done, log)
    return log


def test_cpu_and_memory_limits_apply_inside_the_rank():
    if not (v1_hierarchy("memory") and v1_hierarchy("cpu") and os.geteuid() == 0):
        print("SKIP: needs root and the v1 cpu and memory hierarchies")
        return
    with cluster(agents=1, gpus=2, name="limits") as c:
        log = run_and_log(c, "--cpus", "0.5", "--memory", "64M", "--", "sh", "-c", LIMITS)
        assert value(log, "memory.limit_in_bytes") == str(64 << 20), log
        assert value(log, "cpu.cfs_quota_us") == "50000", log
        assert value(log, "cpu.cfs_period_us") == "100000", log
        for ctl in ("memory", "cpu"):
            path = value(log, ctl + "_cgroup")
            assert "/anvil/node-1-" in path, log
            # removed once the rank has ended
            wait_for(lambda: not os.path.exists("/sys/fs/cgroup/%s%s" % (ctl, path)),
                     timeout=5, what="the rank's %s cgroup removed" % ctl)
        # The API's own form: a whole number of CPUs, a byte count.
        j = c.submit(["sh", "-c", LIMITS], gpus=1, cpus=2, memory_bytes=1 << 30)
        assert c.wait_job(j["id"])["state"] == "succeeded"
        log = c.cli("logs", str(j["id"]), check=True).stdout
        assert value(log, "cpu.cfs_quota_us") == "200000", log
        assert value(log, "memory.limit_in_bytes") == str(1 << 30), log
        shown = c.job(j["id"])
        assert shown["cpus"] == 2 and shown["memory_bytes"] == 1 << 30, shown
        # Without limits: the agent's own cgroups, no cgroup work.
        log = run_and_log(c, "--", "sh", "-c", LIMITS)
        assert "/anvil/" not in value(log, "memory_cgroup"), log
        assert "/anvil/" not in value(log, "cpu_cgroup"), log
        # Limits survive a server restart (stored with the job): j2 waits
        # behind a job holding every GPU and is placed by the new server.
        blocker = c.submit(["sleep", "2"], gpus=2)
        wait_for(lambda: c.job(blocker["id"])["state"] == "running", what="blocker running")
        j2 = c.submit(["sh", "-c", LIMITS], gpus=1, memory_bytes=96 << 20)
        assert c.job(j2["id"])["state"] == "pending"
        c.kill_server()
        c.start_server()
        done = c.wait_job(j2["id"])
        log = c.cli("logs", str(j2["id"]), check=True).stdout
        assert done["state"] == "succeeded", (done, log)
        assert value(log, "memory.limit_in_bytes") == str(96 << 20), log


def test_a_rank_past_its_memory_limit_is_reported_out_of_memory():
    """A rank the kernel OOM-kills at its memory limit: the job's reason says
    so, with the limit, in `anvil show` and `anvil jobs` (from the OOM
    kills in the rank's memory cgroup); the exit code stays the kill's."""
    if not (v1_hierarchy("memory") and os.geteuid() == 0):
        print("SKIP: needs root and the v1 memory hierarchy")
        return
    with cluster(agents=1, gpus=1, name="oom") as c:
        # The shell keeps 256 MB in a variable: far past 64 MiB.
        p = c.cli("run", "--json", "--memory", "64M", "--", "sh", "-c",
                  "x=$(head -c 256000000 /dev/zero | tr '\\0' a); echo survived", check=True)
        jid = json.loads(p.stdout)["job"]["id"]
        done = c.wait_job(jid)
        want = "ran out of memory (limit 64 MiB)"
        assert done["state"] == "failed", done
        assert want in done["reason"], done
        assert done["exit_code"] == 137, done
        assert "survived" not in c.cli("logs", str(jid), check=True).stdout
        shown = c.cli("show", str(jid), check=True).stdout
        assert want in shown, shown
        listed = c.cli("jobs", check=True).stdout
        assert "out of memory" in listed, listed
        # A rank killed by a signal of its own is not called out of memory.
        j = c.submit(["sh", "-c", "kill -9 $$"], gpus=1, memory_bytes=64 << 20)
        other = c.wait_job(j["id"])
        assert other["exit_code"] == 137 and "memory" not in other["reason"], other


def test_bad_limits_are_refused_with_the_field():
    with cluster(agents=1, gpus=1, name="badlimits") as c:
        for body, field, words in [
                ({"cpus": 0.001}, "cpus", "below the minimum 0.01"),
                ({"cpus": 2048}, "cpus", "above the maximum 1024"),
                ({"cpus": "2"}, "cpus", "is not a number"),
                ({"memory_bytes": 1024}, "memory_bytes", "below the minimum 4194304"),
                ({"memory_bytes": 1 << 50}, "memory_bytes", "above the maximum"),
                ({"memory_bytes": "1G"}, "memory_bytes", "is not an integer")]:
            try:
                c.submit(["true"], **body)
                raise AssertionError("accepted %r" % body)
            except ApiError as e:
                assert e.status == 400, (body, e)
                text = json.dumps(e.body)
                assert "field '%s'" % field in text and words in text, (body, text)
        p = c.cli("run", "--cpus", "half", "--", "true")
        assert p.returncode != 0 and "--cpus" in p.stderr and "half" in p.stderr, p.stderr
        p = c.cli("run", "--memory", "lots", "--", "true")
        assert p.returncode != 0 and "is not a size" in p.stderr, p.stderr
        p = c.cli("run", "--memory", "1K", "--", "true")
        assert p.returncode != 0 and "memory_bytes" in p.stderr, p.stderr


def fake_gpu_nodes(c):
    """c.dir/dev with char nodes nv0, nv1 (GPUs 0 and 1) and nv255 (nvidiactl)
    and no driver behind them: an allowed open fails with ENXIO, a denied one
    with EPERM."""
    dev = os.path.join(c.dir, "dev")
    os.makedirs(dev)
    for minor in (0, 1, 255):
        os.mknod(os.path.join(dev, "nv%d" % minor), 0o666 | 0o020000, os.makedev(195, minor))
    return dev


def test_device_isolation_lets_a_rank_open_only_its_gpus():
    if not (v1_hierarchy("devices") and os.geteuid() == 0):
        print("SKIP: needs root and the v1 devices hierarchy")
        return
    os.environ["ANVIL_DEVICE_ISOLATION"] = "1"  # the agents inherit it
    try:
        with cluster(agents=1, gpus=2, topo=True, name="devices") as c:  # minor N = GPU N
            dev = fake_gpu_nodes(c)
            script = ("echo gpu=$CUDA_VISIBLE_DEVICES; for n in 0 1 255; do "
                      "(exec 3<>%s/nv$n) 2>&1; echo done-$n; done" % dev)
            log = run_and_log(c, "--gpus", "1", "--", "sh", "-c", script)
            mine = int(value(log, "gpu"))
            other = 1 - mine
            assert "nv%d: No such device or address" % mine in log, log  # allowed, no driver
            assert "nv%d: Operation not permitted" % other in log, log  # denied by the cgroup
            assert "nv255: No such device or address" in log, log  # nvidiactl stays open
            both = run_and_log(c, "--gpus", "2", "--", "sh", "-c", script)
            assert "Operation not permitted" not in both, both
            # a CPU-only rank (no GPU of its own) may open no GPU at all
            none = run_and_log(c, "--gpus", "0", "--", "sh", "-c", script)
            assert value(none, "gpu") == "", none
            assert "nv0: Operation not permitted" in none, none
            assert "nv1: Operation not permitted" in none, none
            assert "nv255: No such device or address" in none, none
    finally:
        del os.environ["ANVIL_DEVICE_ISOLATION"]


def v2_mount():
    with open("/proc/self/mounts") as f:
        for line in f:
            _, mnt, kind = line.split()[:3]
            if kind == "cgroup2":
                return mnt
    return None


def test_cgroup_v2_ranks_limits_and_isolation():
    """The agent on cgroup v2 (ANVIL_CGROUP=v2): each rank in a v2 cgroup of
    its own, GPU isolation by the eBPF program there, and, on these hybrid
    machines whose v2 hierarchy was not given cpu or memory, the memory
    limit from the v1 hierarchy; the v2 cgroup goes when the rank ends."""
    mnt = v2_mount()
    if not (mnt and os.geteuid() == 0):
        print("SKIP: needs root and a cgroup2 mount")
        return
    os.environ["ANVIL_CGROUP"] = "v2"  # the agents inherit them
    os.environ["ANVIL_DEVICE_ISOLATION"] = "1"
    try:
        with cluster(agents=1, gpus=2, topo=True, name="cgv2") as c:
            dev = fake_gpu_nodes(c)
            script = ("grep '^0::' /proc/self/cgroup | sed 's/^0::/v2_cgroup=/'; "
                      "echo gpu=$CUDA_VISIBLE_DEVICES; for n in 0 1 255; do "
                      "(exec 3<>%s/nv$n) 2>&1; echo done-$n; done; " % dev
                      + SHOW % {"c": "memory", "files": "memory.limit_in_bytes"})
            log = run_and_log(c, "--gpus", "1", "--memory", "64M", "--", "sh", "-c", script)
            path = value(log, "v2_cgroup")
            assert "/anvil/node-1-" in path, log
            mine = int(value(log, "gpu"))
            assert "nv%d: No such device or address" % mine in log, log
            assert "nv%d: Operation not permitted" % (1 - mine) in log, log
            assert "nv255: No such device or address" in log, log
            if v1_hierarchy("memory"):
                assert value(log, "memory.limit_in_bytes") == str(64 << 20), log
            none = run_and_log(c, "--gpus", "0", "--", "sh", "-c", script)  # CPU-only
            assert "nv0: Operation not permitted" in none, none
            assert "nv1: Operation not permitted" in none, none
            assert "nv255: No such device or address" in none, none
            wait_for(lambda: not os.path.exists(mnt + path), timeout=5,
                     what="the rank's v2 cgroup removed")
    finally:
        del os.environ["ANVIL_CGROUP"]
        del os.environ["ANVIL_DEVICE_ISOLATION"]


run_tests([test_cpu_and_memory_limits_apply_inside_the_rank,
           test_a_rank_past_its_memory_limit_is_reported_out_of_memory,
           test_bad_limits_are_refused_with_the_field,
           test_device_isolation_lets_a_rank_open_only_its_gpus,
           test_cgroup_v2_ranks_limits_and_isolation])
