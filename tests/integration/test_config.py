"""The daemons' config files: `anvil server` and `anvil agent` read YAML
whose keys are their long option names, a flag on the command line beats
the file, every error in the file is named with FILE:LINE:COLUMN, the
shipped examples pass --check-config, a server and an agent run from
config files alone, and the shipped systemd units say what they must."""
import configparser
import json
import os
import shutil
import signal
import subprocess
import tempfile

from harness import ANVIL, run_tests, sim_gpus, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(ROOT, "deploy")


def anvil(*args, timeout=30):
    return subprocess.run([ANVIL] + list(args), capture_output=True, text=True,
                          timeout=timeout)


def write(d, name, text):
    path = os.path.join(d, name)
    with open(path, "w") as f:
        f.write(text)
    return path


def test_the_shipped_configs_pass_check_config():
    p = anvil("server", "--config", os.path.join(DEPLOY, "server.yaml"), "--check-config")
    assert p.returncode == 0, p.stderr
    assert "state-dir=/var/lib/anvil/server listen=0.0.0.0:7070" in p.stdout, p.stdout
    p = anvil("agent", "--config", os.path.join(DEPLOY, "agent.yaml"), "--check-config")
    assert p.returncode == 0, p.stderr
    assert "server=http://10.0.0.1:7070 work-dir=/var/lib/anvil/agent" in p.stdout, p.stdout
    assert "listen=0.0.0.0:7071 address=10.0.0.11" in p.stdout, p.stdout


def test_a_flag_beats_the_file():
    d = tempfile.mkdtemp(prefix="anvil-cfg-")
    try:
        s = write(d, "server.yaml", "listen: 127.0.0.1:7071\nnode-timeout: 45s\n"
                                    "full-sync: true\nstate-dir: %s/state\n" % d)
        p = anvil("server", "--config", s, "--check-config")
        assert p.returncode == 0, p.stderr
        assert "config=%s " % s in p.stdout, p.stdout
        assert "listen=127.0.0.1:7071 node-timeout=45000ms full-sync=on" in p.stdout, p.stdout
        p = anvil("server", "--config", s, "--check-config", "--listen", "127.0.0.1:7072",
                  "--node-timeout", "1m")
        assert p.returncode == 0, p.stderr
        assert "listen=127.0.0.1:7072 node-timeout=60000ms full-sync=on" in p.stdout, p.stdout
        # --no-config reads none, --config=FILE is the same as --config FILE
        p = anvil("server", "--config=" + s, "--no-config", "--check-config")
        assert "config=none" in p.stdout and "listen=127.0.0.1:7070" in p.stdout, p.stdout
        a = write(d, "agent.yaml", "server: http://127.0.0.1:1\nwork-dir: %s/w\n"
                                   "wait-ms: 5000\nname: from-file\n" % d)
        p = anvil("agent", "--config", a, "--check-config", "--name", "from-flag")
        assert p.returncode == 0, p.stderr
        assert "name=from-flag" in p.stdout and "wait-ms=5000" in p.stdout, p.stdout
        # a value the file gets wrong, which the command line replaces, is fine
        a = write(d, "agent2.yaml", "server: http://127.0.0.1:1\nwork-dir: /w\n"
                                    "wait-ms: 9999999\n")
        p = anvil("agent", "--config", a, "--check-config")
        assert p.returncode == 2, p.stdout
        p = anvil("agent", "--config", a, "--check-config", "--wait-ms", "100")
        assert p.returncode == 0 and "wait-ms=100 " in p.stdout, (p.stdout, p.stderr)
    finally:
        shutil.rmtree(d)


def test_errors_in_the_file_name_their_position():
    d = tempfile.mkdtemp(prefix="anvil-cfg-")
    try:
        s = write(d, "server.yaml", "listen: nowhere\n"
                                    "threads: 65\n"
                                    "colour: blue\n")
        p = anvil("server", "--config", s, "--check-config")
        assert p.returncode == 2, (p.stdout, p.stderr)
        assert p.stderr.splitlines() == [
            "%s:1:9: listen: 'nowhere' is not ADDR:PORT with a port from 0 to 65535" % s,
            "%s:2:10: threads: '65' is not a number from 1 to 64" % s,
            "%s:3:1: colour: is not an option of anvil server (see --help)" % s,
        ], p.stderr
        # not only with --check-config: the server refuses to start
        p = anvil("server", "--config", s, "--state-dir", os.path.join(d, "st"))
        assert p.returncode == 2 and not os.path.exists(os.path.join(d, "st")), p.stderr
        s = write(d, "shape.yaml", "listen:\n  - a\nhelp: true\nfull-sync: 1\n")
        p = anvil("server", "--config", s, "--check-config")
        assert p.returncode == 2, p.stdout
        assert p.stderr.splitlines() == [
            "%s:2:3: listen: should be one value (text, a number or a boolean), not a list" % s,
            "%s:3:1: help: is given on the command line only" % s,
            "%s:4:12: full-sync: is a switch: true or false, not an integer" % s,
        ], p.stderr
        a = write(d, "agent.yaml", "server: ftp://x\nwork-dir: /w\ngpu-sample-ms: 5\n"
                                   "colour: blue\n")
        p = anvil("agent", "--config", a, "--check-config")
        assert p.returncode == 2, p.stdout
        lines = p.stderr.splitlines()
        assert "%s:4:1: colour: not a flag of anvil agent (see anvil agent --help)" % a in lines
        assert "%s:1:9: server: 'ftp://x': must be an http:// URL" % a in lines, lines
        assert ("%s:3:16: gpu-sample-ms: '5': expected milliseconds in [100, 3600000]" % a
                in lines), lines
        p = anvil("agent", "--config", os.path.join(d, "missing.yaml"), "--check-config")
        assert p.returncode == 2 and "cannot read the config file" in p.stderr, p.stderr
    finally:
        shutil.rmtree(d)


def test_check_config_lists_every_error_with_its_position():
    """A file's errors of every kind, those of its shape (a switch that is not true or false,
    a list, a command-line key) and those of its values, are all said, in the file's order:
    none hides the others, whichever comes first."""
    d = tempfile.mkdtemp(prefix="anvil-cfg-")
    try:
        s = write(d, "server.yaml", "full-sync: maybe\n"
                                    "listen: nowhere\n"
                                    "threads: 65\n"
                                    "colour: blue\n"
                                    "node-timeout: 2d\n")
        p = anvil("server", "--config", s, "--check-config")
        assert p.returncode == 2, (p.stdout, p.stderr)
        assert p.stderr.splitlines() == [
            "%s:1:12: full-sync: is a switch: true or false, not text" % s,
            "%s:2:9: listen: 'nowhere' is not ADDR:PORT with a port from 0 to 65535" % s,
            "%s:3:10: threads: '65' is not a number from 1 to 64" % s,
            "%s:4:1: colour: is not an option of anvil server (see --help)" % s,
            "%s:5:15: node-timeout: '2d' is not a duration from 1s to 1h" % s,
        ], p.stderr
        # a flag on the command line is checked after the file's errors are said
        p = anvil("server", "--config", s, "--check-config", "--threads", "0")
        assert p.returncode == 2, (p.stdout, p.stderr)
        lines = p.stderr.splitlines()
        assert len(lines) == 6 and lines[-1] == \
            "anvil server: --threads: '0' is not a number from 1 to 64", lines
        a = write(d, "agent.yaml", "wait-ms: [1]\n"
                                   "server: ftp://x\n"
                                   "work-dir: /w\n"
                                   "config: other.yaml\n"
                                   "gpu-sample-ms: 5\n"
                                   "colour: blue\n")
        p = anvil("agent", "--config", a, "--check-config")
        assert p.returncode == 2, (p.stdout, p.stderr)
        assert p.stderr.splitlines() == [
            "%s:1:10: wait-ms: should be one value (text, a number or a boolean), not a list"
            % a,
            "%s:2:9: server: 'ftp://x': must be an http:// URL" % a,
            "%s:4:1: config: is given on the command line only" % a,
            "%s:5:16: gpu-sample-ms: '5': expected milliseconds in [100, 3600000]" % a,
            "%s:6:1: colour: not a flag of anvil agent (see anvil agent --help)" % a,
        ], p.stderr
    finally:
        shutil.rmtree(d)


def test_the_http_limits_in_the_files():
    """The HTTP server's connection limits and deadlines (docs/operations.md): the same keys
    in both daemons' files, their defaults, their bounds."""
    d = tempfile.mkdtemp(prefix="anvil-cfg-")
    try:
        p = anvil("server", "--no-config", "--check-config")
        assert ("http-max-connections=10000 http-max-per-address=1024 "
                "http-header-timeout=5000ms http-body-timeout=30000ms "
                "http-body-min-rate=16384 http-idle-timeout=30000ms") in p.stdout, p.stdout
        keys = ("http-max-connections: 20000\nhttp-max-per-address: 0\n"
                "http-header-timeout: 2s\nhttp-body-timeout: 1m\n"
                "http-body-min-rate: 64Ki\nhttp-idle-timeout: 10s\n")
        want = ("http-max-connections=20000 http-max-per-address=0 http-header-timeout=2000ms "
                "http-body-timeout=60000ms http-body-min-rate=65536 http-idle-timeout=10000ms")
        s = write(d, "server.yaml", keys)
        p = anvil("server", "--config", s, "--check-config")
        assert p.returncode == 0 and want in p.stdout, (p.stdout, p.stderr)
        a = write(d, "agent.yaml", "server: http://127.0.0.1:1\nwork-dir: /w\n" + keys)
        p = anvil("agent", "--config", a, "--check-config")
        assert p.returncode == 0 and want in p.stdout, (p.stdout, p.stderr)
        bad = ("http-max-connections: 5\nhttp-header-timeout: 100ms\n"
               "http-body-min-rate: lots\nhttp-idle-timeout: 2h\n")
        s = write(d, "bad.yaml", bad)
        p = anvil("server", "--config", s, "--check-config")
        assert p.returncode == 2 and p.stderr.splitlines() == [
            "%s:1:23: http-max-connections: '5' is not a number from 16 to 1000000" % s,
            "%s:2:22: http-header-timeout: '100ms' is not a duration from 1s to 10m" % s,
            "%s:3:21: http-body-min-rate: 'lots' is not a rate in bytes/s from 0 to 1Gi "
            "(16384, 16Ki, 1M)" % s,
            "%s:4:20: http-idle-timeout: '2h' is not a duration from 1s to 1h" % s,
        ], p.stderr
        a = write(d, "bad-agent.yaml", "server: http://127.0.0.1:1\nwork-dir: /w\n" + bad)
        p = anvil("agent", "--config", a, "--check-config")
        lines = p.stderr.splitlines()
        assert p.returncode == 2 and len(lines) == 4, p.stderr
        assert "%s:3:23: http-max-connections: '5': is not a number from 16 to 1000000" % a \
            in lines, lines
        # a flag beats the file, as for every option
        p = anvil("server", "--config", os.path.join(d, "server.yaml"), "--check-config",
                  "--http-max-per-address", "7")
        assert p.returncode == 0 and "http-max-per-address=7 " in p.stdout, p.stdout
    finally:
        shutil.rmtree(d)


def test_a_server_and_an_agent_run_from_their_config_files():
    d = tempfile.mkdtemp(prefix="anvil-cfg-")
    procs = []
    try:
        home = os.path.join(d, "home")
        s = write(d, "server.yaml", "state-dir: %s/state\nhome: %s\nlisten: 127.0.0.1:0\n"
                                    "node-timeout: 20s\n" % (d, home))
        log = open(os.path.join(d, "server.log"), "w")
        procs.append(subprocess.Popen([ANVIL, "server", "--config", s], stdout=log,
                                      stderr=log, start_new_session=True))
        client = os.path.join(home, "client.json")
        wait_for(lambda: os.path.exists(client), what="the client file in the file's home")
        with open(client) as f:
            url = json.load(f)["server"]
        gpus = os.path.join(d, "gpus.json")
        sim_gpus(gpus, 2)
        a = write(d, "agent.yaml", "server: %s\njoin-token-file: %s/state/join.token\n"
                                   "work-dir: %s/work\ngpus-file: %s\nname: from-file\n"
                  % (url, d, d, gpus))
        log = open(os.path.join(d, "agent.log"), "w")
        procs.append(subprocess.Popen([ANVIL, "agent", "--config", a, "--name", "from-flag"],
                                      stdout=log, stderr=log, start_new_session=True))
        env = dict(os.environ, ANVIL_HOME=home)
        env.pop("ANVIL_SERVER", None)
        env.pop("ANVIL_TOKEN", None)

        def nodes():
            p = subprocess.run([ANVIL, "nodes", "--json"], capture_output=True, text=True,
                               env=env, timeout=30)
            return json.loads(p.stdout)["nodes"] if p.returncode == 0 else []
        ready = wait_for(lambda: [n for n in nodes() if n["state"] == "ready"],
                         what="the agent ready")
        assert [n["name"] for n in ready] == ["from-flag"], ready
    except BaseException:
        for name in ("server.log", "agent.log"):
            if os.path.exists(os.path.join(d, name)):
                print("---- %s" % name)
                print(open(os.path.join(d, name)).read())
        raise
    finally:
        for p in reversed(procs):
            p.send_signal(signal.SIGTERM)
            p.wait(30)
        shutil.rmtree(d, ignore_errors=True)


def unit(name):
    c = configparser.ConfigParser(interpolation=None, strict=False)
    c.optionxform = str
    c.read(os.path.join(DEPLOY, "systemd", name))
    return c


def test_the_systemd_units():
    server = unit("anvil-server.service")
    agent = unit("anvil-agent.service")
    assert server["Service"]["ExecStart"].endswith(
        "anvil server --config /etc/anvil/server.yaml"), server["Service"]["ExecStart"]
    assert agent["Service"]["ExecStart"].endswith(
        "anvil agent --config /etc/anvil/agent.yaml"), agent["Service"]["ExecStart"]
    for u in (server, agent):
        assert u["Service"]["Restart"] == "on-failure"
        assert u["Install"]["WantedBy"] == "multi-user.target"
    # ranks live in cgroups below the agent's and outlive an agent that crashed
    assert agent["Service"]["Delegate"] == "yes"
    assert agent["Service"]["KillMode"] == "process"
    if not shutil.which("systemd-analyze"):
        print("systemd-analyze not installed: the units' syntax is not checked")
        return
    d = tempfile.mkdtemp(prefix="anvil-units-")
    try:
        for name in ("anvil-server.service", "anvil-agent.service"):
            with open(os.path.join(DEPLOY, "systemd", name)) as f:
                text = f.read().replace("/usr/local/bin/anvil", os.path.abspath(ANVIL))
            path = write(d, name, text)
            os.chmod(path, 0o644)  # the harness's umask is 0; systemd warns about that
            p = subprocess.run(["systemd-analyze", "verify", path], capture_output=True,
                               text=True, timeout=60)
            problems = [x for x in p.stderr.splitlines() if name in x]
            assert p.returncode == 0 and not problems, (name, p.stderr)
    finally:
        shutil.rmtree(d)


run_tests([test_the_shipped_configs_pass_check_config, test_a_flag_beats_the_file,
           test_errors_in_the_file_name_their_position,
           test_check_config_lists_every_error_with_its_position, test_the_http_limits_in_the_files,
           test_a_server_and_an_agent_run_from_their_config_files, test_the_systemd_units])
