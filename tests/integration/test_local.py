"""`anvil run --local`: a job's one rank run on this machine as a node runs
it (the server's variables, the working directory, the two logs, the exit
status), with no server anywhere."""
import os
import subprocess

from harness import ANVIL, run_tests, scratch_dir


def local(*args, cwd=None, env=None, home=None):
    e = dict(os.environ, ANVIL_HOME=home or scratch_dir("anvil-local-"))
    for k in ("ANVIL_SERVER", "ANVIL_TOKEN"):
        e.pop(k, None)
    e.update(env or {})
    return subprocess.run([ANVIL, "run", "--local"] + list(args), capture_output=True,
                          text=True, cwd=cwd, env=e, timeout=60), e["ANVIL_HOME"]


def test_runs_here_as_a_rank_with_its_status_and_streams_apart():
    d = scratch_dir("anvil-local-cwd-")
    with open(os.path.join(d, "data.txt"), "w") as f:
        f.write("from-the-cwd\n")
    p, home = local("--name", "try", "--", "sh", "-c",
                    "cat data.txt; echo $NNODES $NODE_RANK $WORLD_SIZE $ANVIL_NODE "
                    "$ANVIL_JOB_NAME $LR; test -d \"$ANVIL_OUTPUT_DIR\" && echo outdir; "
                    "echo oops >&2; exit 5", cwd=d, env={"LR": "3e-4"})
    assert p.returncode == 5, (p.returncode, p.stdout, p.stderr)
    assert p.stdout.splitlines() == ["from-the-cwd", "1 0 1 local try 3e-4", "outdir"], p.stdout
    assert "oops" in p.stderr and "oops" not in p.stdout, p.stderr
    logs = os.path.join(home, "local", "logs")
    names = os.listdir(logs)
    assert any(n.endswith("-0.log") for n in names) and any(n.endswith("-0.err") for n in names)


def test_refusals_and_a_missing_command():
    p, _ = local("--nodes", "2", "--", "true")
    assert p.returncode == 2 and "no --nodes" in p.stderr, p.stderr
    p, _ = local("--array", "0-3", "--", "true")
    assert p.returncode == 2 and "no --array" in p.stderr, p.stderr
    p, _ = local("--gpus", "4", "--", "true")
    assert p.returncode == 1 and "asks for 4 GPU(s)" in p.stderr, p.stderr
    p, _ = local("--", "/no/such/program")
    assert p.returncode == 127, (p.returncode, p.stderr)
    # two runs in a row in one home: each its own attempt, both run
    home = scratch_dir("anvil-local-")
    assert local("--", "true", home=home)[0].returncode == 0
    assert local("--", "true", home=home)[0].returncode == 0


def test_ctrl_c_stops_the_rank():
    e = dict(os.environ, ANVIL_HOME=scratch_dir("anvil-local-"))
    p = subprocess.Popen([ANVIL, "run", "--local", "--grace", "1s", "--", "sh", "-c",
                          "echo started; sleep 60"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=e)
    assert p.stdout.readline().strip() == "started"
    p.send_signal(2)
    out, err = p.communicate(timeout=20)
    assert p.returncode == 143, (p.returncode, err)
    assert "stopping" in err, err


run_tests([test_runs_here_as_a_rank_with_its_status_and_streams_apart,
           test_refusals_and_a_missing_command, test_ctrl_c_stops_the_rank])
