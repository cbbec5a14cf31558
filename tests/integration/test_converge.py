"""Converging a node to its fleet profile (docs/fleet.md, "Converging a
node"): the agent's runner through `anvil _converge`, and a real agent and
server. Each step here is harmless to the machine that runs the tests:
kernel settings are per network namespace keys (net.*) changed only inside
a namespace the test makes (`ip netns add`), or asked for at the value
they have; mounts are tmpfs under the test's directory, unmounted at the
end whatever happens; packages are ones installed already and one that
does not exist, installed as a dry run (ANVIL_PROFILE_APT_SIMULATE=1:
apt-get -s, which changes nothing)."""
import json
import os
import shutil
import subprocess
import tempfile

from harness import ANVIL, Cluster, run_tests, sim_gpus, wait_for

SIMULATE = {"ANVIL_PROFILE_APT_SIMULATE": "1"}


def read(path):
    with open(path) as f:
        return f.read()


def host_value(key):
    return read("/proc/sys/" + key.replace(".", "/")).strip()


class Box:
    """A temporary directory with simulated GPUs; mounts made under it are
    unmounted and a network namespace made for it deleted at the end."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="anvil-it-converge-")
        self.gpus = os.path.join(self.dir, "gpus.json")
        sim_gpus(self.gpus, 2)
        self.work = os.path.join(self.dir, "work")
        self.netns = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for line in reversed(read("/proc/self/mountinfo").splitlines()):
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(self.dir):
                subprocess.run(["umount", "-l", point], check=False)
        if self.netns:
            subprocess.run(["ip", "netns", "del", self.netns], check=False)
        shutil.rmtree(self.dir, ignore_errors=True)
        return False

    def make_netns(self):
        self.netns = "anvil-it-%d" % os.getpid()
        p = subprocess.run(["ip", "netns", "add", self.netns], capture_output=True, text=True)
        if p.returncode != 0:
            self.netns = None
        return self.netns is not None

    def converge(self, spec, check_only=False, netns=False, env=None, name="p"):
        """One run: (exit status, status JSON)."""
        path = os.path.join(self.dir, name + ".json")
        with open(path, "w") as f:
            json.dump(spec, f)
        argv = [ANVIL, "_converge", "--profile", path, "--work-dir", self.work,
                "--gpus-file", self.gpus] + (["--check-only"] if check_only else [])
        if netns:
            argv = ["ip", "netns", "exec", self.netns] + argv
        p = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, **(env or {})))
        try:
            return p.returncode, json.loads(p.stdout)
        except ValueError:
            raise AssertionError("no status: %s%s" % (p.stdout, p.stderr))

    def mounted(self, path):
        return any(line.split()[4] == path for line in read("/proc/self/mountinfo").splitlines())


def steps(status):
    return [(s["name"], s["status"]) for s in status["steps"]]


def detail(status, name):
    return next(s.get("detail", "") for s in status["steps"] if s["name"].startswith(name))


def agent_version():
    out = subprocess.run([ANVIL, "version"], capture_output=True, text=True).stdout
    return out.split()[1].split("-")[0]  # "anvil 0.1.0-dev" -> "0.1.0"


def test_ok_changed_and_a_second_run_all_ok():
    if os.geteuid() != 0:
        print("skipped: mounting needs root")
        return
    with Box() as b:
        mnt = os.path.join(b.dir, "mnt")
        spec = {"name": "p", "gpu": {"model": "NVIDIA H200", "count": 2},
                "driver": "550.54.15", "cuda": "12.4", "agent": agent_version(),
                "mounts": [{"path": mnt, "device": "anvil-it", "fs": "tmpfs",
                            "options": ["noatime", "size=8m"]}],
                "cache_dir": mnt + "/cache",
                "sysctl": {"net.core.somaxconn": host_value("net.core.somaxconn")},
                "packages": ["bash", "coreutils"]}
        rc, st = b.converge(spec)
        assert rc == 0 and st["state"] == "converged", st
        assert steps(st) == [("gpu", "ok"), ("driver", "ok"), ("cuda", "ok"), ("agent", "ok"),
                             ("mount " + mnt, "changed"), ("cache_dir " + mnt + "/cache", "changed"),
                             ("sysctl net.core.somaxconn", "ok"), ("packages", "ok")], st
        # the output kept: what was found, the command run, what holds now
        d = detail(st, "mount")
        assert "nothing is mounted at %s" % mnt in d, d
        assert "ran `mount -t tmpfs -o noatime,size=8m anvil-it %s`: exit status 0" % mnt in d, d
        assert "now: %s is anvil-it (tmpfs, rw,noatime" % mnt in d, d
        assert detail(st, "driver") == "driver version sim-550.54.15", st
        assert detail(st, "packages").startswith("bash "), st
        assert b.mounted(mnt) and os.path.isdir(mnt + "/cache")
        assert oct(os.stat(mnt + "/cache").st_mode & 0o777) == "0o755"
        # idempotent: the second run changes nothing
        rc, again = b.converge(spec)
        assert rc == 0 and again["state"] == "converged", again
        assert all(s == "ok" for _, s in steps(again)), again
        assert again["hash"] == st["hash"]
        # kept where the agent keeps it
        kept = json.load(open(os.path.join(b.work, "profile.json")))
        assert kept["status"] == again and kept["profile"]["spec"] == spec, kept
        # drift: checks alone report it and fix nothing
        subprocess.run(["umount", mnt], check=True)
        rc, drift = b.converge(spec, check_only=True)
        assert rc == 1 and drift["state"] == "drifted", drift
        assert ("mount " + mnt, "failed") in steps(drift), drift
        assert detail(drift, "mount") == "nothing is mounted at %s" % mnt, drift
        assert ("packages", "ok") in steps(drift), drift  # every check runs
        assert not b.mounted(mnt)
        # a run converges it again
        rc, fixed = b.converge(spec)
        assert rc == 0 and ("mount " + mnt, "changed") in steps(fixed), fixed


def test_netns_sysctl_changed_then_drifted_and_the_host_untouched():
    with Box() as b:
        if not b.make_netns():
            print("skipped: cannot make a network namespace here")
            return
        before = host_value("net.core.somaxconn"), host_value("net.ipv4.tcp_rmem")
        spec = {"sysctl": {"net.core.somaxconn": "1234",
                           "net.ipv4.tcp_rmem": "4096 87380 6291456"}}
        rc, st = b.converge(spec, netns=True)
        assert rc == 0 and st["state"] == "converged", st
        assert steps(st) == [("sysctl net.core.somaxconn", "changed"),
                             ("sysctl net.ipv4.tcp_rmem", "changed")], st
        d = detail(st, "sysctl net.core.somaxconn")
        assert "the profile wants 1234; wrote 1234 to /proc/sys/net/core/somaxconn" in d, d
        assert d.endswith("now: net.core.somaxconn is 1234"), d
        rc, again = b.converge(spec, netns=True)
        assert rc == 0 and steps(again) == [("sysctl net.core.somaxconn", "ok"),
                                            ("sysctl net.ipv4.tcp_rmem", "ok")], again
        # changed by hand inside the namespace: drifted, and left so
        subprocess.run(["ip", "netns", "exec", b.netns, "sh", "-c",
                        "echo 999 > /proc/sys/net/core/somaxconn"], check=True)
        for _ in range(2):
            rc, drift = b.converge(spec, netns=True, check_only=True)
            assert rc == 1 and drift["state"] == "drifted", drift
            assert steps(drift) == [("sysctl net.core.somaxconn", "failed"),
                                    ("sysctl net.ipv4.tcp_rmem", "ok")], drift
            assert detail(drift, "sysctl net.core.somaxconn") == \
                "net.core.somaxconn is 999, the profile wants 1234", drift
        assert (host_value("net.core.somaxconn"), host_value("net.ipv4.tcp_rmem")) == before


def test_failed_stops_the_run_and_skips_the_rest():
    with Box() as b:
        mnt = os.path.join(b.dir, "mnt")
        # the first step cannot hold (the node's GPUs are H200s): nothing after it runs
        spec = {"gpu": {"model": "NVIDIA A100-SXM4-80GB", "count": 2},
                "mounts": [{"path": mnt, "device": "anvil-it", "fs": "tmpfs", "options": []}],
                "cache_dir": mnt + "/cache", "packages": ["bash"]}
        rc, st = b.converge(spec)
        assert rc == 1 and st["state"] == "failed", st
        assert steps(st) == [("gpu", "failed"), ("mount " + mnt, "skipped"),
                             ("cache_dir " + mnt + "/cache", "skipped"),
                             ("packages", "skipped")], st
        assert detail(st, "gpu") == \
            "GPU 0 is NVIDIA H200, the profile wants NVIDIA A100-SXM4-80GB", st
        assert not b.mounted(mnt) and not os.path.exists(mnt)
        # a kernel setting this kernel lacks fails; the packages after it are skipped
        cache = os.path.join(b.dir, "cache")
        spec = {"cache_dir": cache, "sysctl": {"net.core.anvil_no_such_setting": "1"},
                "packages": ["bash"]}
        rc, st = b.converge(spec)
        assert steps(st) == [("cache_dir " + cache, "changed"),
                             ("sysctl net.core.anvil_no_such_setting", "failed"),
                             ("packages", "skipped")], st
        assert "this kernel has no setting net.core.anvil_no_such_setting" in \
            detail(st, "sysctl"), st


def test_a_package_that_does_not_exist_fails_with_apt_s_message():
    with Box() as b:
        spec = {"packages": ["bash", "coreutils", "anvil-no-such-package"]}
        rc, st = b.converge(spec, env=SIMULATE)
        assert rc == 1 and st["state"] == "failed" and steps(st) == [("packages", "failed")], st
        d = detail(st, "packages")
        assert d.startswith("bash ") and "anvil-no-such-package not installed" in d, d
        assert ("ran `apt-get install -y --no-install-recommends -s anvil-no-such-package`: "
                "exit status 100") in d, d
        assert "E: Unable to locate package anvil-no-such-package" in d, d
        assert len(d.encode()) <= 4096


def test_a_malformed_profile_is_refused():
    with Box() as b:
        rc, st = b.converge({"sysctl": {"kernel/../../../etc/x": "1"}})
        assert rc == 1 and st["state"] == "failed", st
        assert steps(st) == [("profile", "failed")], st
        assert "spec.sysctl.kernel/../../../etc/x" in detail(st, "profile"), st
        rc, st = b.converge({"gpu": {"count": 1}, "colour": "blue"})
        assert "spec: 'colour': unknown key" in detail(st, "profile"), st


def test_the_real_server_takes_the_status_an_agent_kept():
    """The server does not send profiles yet: an agent whose work dir holds
    a status (as `anvil _converge` keeps it) reports it with its first sync,
    the real server answers it 200, and, as its answers carry no profile,
    the agent forgets it."""
    c = Cluster(agents=0, name="converge")
    try:
        work = os.path.join(c.dir, "node-1")
        os.makedirs(work)
        path = os.path.join(c.dir, "p.json")
        with open(path, "w") as f:
            json.dump({"cache_dir": os.path.join(c.dir, "cache")}, f)
        p = subprocess.run([ANVIL, "_converge", "--profile", path, "--work-dir", work,
                            "--gpu-backend", "none"], capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
        kept = json.loads(p.stdout)
        c.start_agent(0)
        c.wait_ready(1)
        log = lambda: c.log("node-1.log")
        wait_for(lambda: "profile status acknowledged hash=%s state=converged" %
                 kept["hash"][:12] in log(), what="the status acknowledged")
        assert "profile status from file=%s/profile.json" % work in log(), log()
        wait_for(lambda: not os.path.exists(os.path.join(work, "profile.json")),
                 what="the status forgotten")
        assert "the server sends no profile now: forgetting" in log(), log()
        assert "sync failing" not in log(), log()
    except BaseException:
        c.dump_logs()
        raise
    finally:
        c.stop()
    shutil.rmtree(c.dir, ignore_errors=True)


def test_the_check_interval_flag_and_config_key():
    d = tempfile.mkdtemp(prefix="anvil-it-converge-cfg-")
    try:
        base = ["agent", "--no-config", "--server", "http://127.0.0.1:1", "--work-dir", d,
                "--check-config"]
        p = subprocess.run([ANVIL] + base, capture_output=True, text=True)
        assert p.returncode == 0 and "profile-check-interval=60s" in p.stdout, p.stdout
        for ok in ("0", "5m", "1s"):
            p = subprocess.run([ANVIL] + base + ["--profile-check-interval", ok],
                               capture_output=True, text=True)
            assert p.returncode == 0, p.stderr
        p = subprocess.run([ANVIL] + base + ["--profile-check-interval", "500ms"],
                           capture_output=True, text=True)
        assert p.returncode == 2, p.stdout
        assert "--profile-check-interval '500ms': expected a duration from 1s to 24h" in \
            p.stderr, p.stderr
        cfg = os.path.join(d, "agent.yaml")
        with open(cfg, "w") as f:
            f.write("server: http://127.0.0.1:1\nwork-dir: %s\nprofile-check-interval: 2h\n" % d)
        p = subprocess.run([ANVIL, "agent", "--config", cfg, "--check-config"],
                           capture_output=True, text=True)
        assert p.returncode == 0 and "profile-check-interval=2h" in p.stdout, p.stdout
        with open(cfg, "w") as f:
            f.write("server: http://127.0.0.1:1\nwork-dir: %s\nprofile-check-interval: 48h\n" % d)
        p = subprocess.run([ANVIL, "agent", "--config", cfg, "--check-config"],
                           capture_output=True, text=True)
        assert p.returncode == 2 and "agent.yaml:3:25: profile-check-interval: '48h'" in \
            p.stderr, p.stderr
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    run_tests([test_ok_changed_and_a_second_run_all_ok,
               test_netns_sysctl_changed_then_drifted_and_the_host_untouched,
               test_failed_stops_the_run_and_skips_the_rest,
               test_a_package_that_does_not_exist_fails_with_apt_s_message,
               test_a_malformed_profile_is_refused,
               test_the_real_server_takes_the_status_an_agent_kept,
               test_the_check_interval_flag_and_config_key])
