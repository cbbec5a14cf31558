"""`anvil wf check`: a workflow file compiled before anything runs, the
shipped example correct, and every error of a broken file reported with
FILE:LINE:COLUMN (no daemon needed)."""
import json
import os
import subprocess
import tempfile

from harness import ANVIL, run_tests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "workflows", "train.yaml")


def wf(*args, stdin=None):
    return subprocess.run([ANVIL, "wf"] + list(args), capture_output=True, text=True,
                          input=stdin, timeout=30)


def test_the_example_is_correct_and_compiles():
    p = wf("check", EXAMPLE)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert "workflow train-sweep, 3 tasks: ok" in p.stdout, p.stdout
    p = wf("check", "--json", "-i", "epochs=5", EXAMPLE)
    assert p.returncode == 0, p.stderr
    compiled = json.loads(p.stdout)
    assert compiled["inputs"]["epochs"] == "5", compiled
    names = [t["name"] for t in compiled["tasks"]]
    assert names == ["prep", "train", "evaluate"], names
    train = compiled["tasks"][1]
    assert train["needs"] == ["prep"] and train["timeout_ms"] == 12 * 3600 * 1000, train
    assert compiled["tasks"][2]["needs"] == ["train"], compiled["tasks"][2]


def test_every_error_with_its_position():
    text = ("name: broken\n"
            "tasks:\n"
            "  a:\n"
            "    command: echo {{ inputs.nope }}\n"
            "    retires: 3\n"
            "  b: {command: [x], needs: [a, c]}\n")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text)
    try:
        p = wf("check", f.name)
    finally:
        os.unlink(f.name)
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.splitlines()
    assert lines == [
        "%s:4:14: tasks.a.command[2]: {{ inputs.nope }}: the workflow has no input 'nope'"
        % f.name,
        "%s:5:5: tasks.a.retires: unknown key 'retires'" % f.name,
        "%s:6:32: tasks.b.needs[1]: there is no task 'c'" % f.name,
    ], lines


def test_unreadable_and_bad_yaml_and_usage():
    p = wf("check", "/nonexistent/wf.yaml")
    assert p.returncode == 1 and "cannot read /nonexistent/wf.yaml" in p.stderr, p.stderr
    p = wf("check", "-", stdin="tasks: [\n")
    assert p.returncode == 1 and p.stderr.startswith("-:2:1: "), p.stderr
    p = wf("check", "-i", "novalue", EXAMPLE)
    assert p.returncode == 2 and "is not K=V" in p.stderr, p.stderr
    p = wf("frobnicate")
    assert p.returncode == 2 and "unknown subcommand" in p.stderr, p.stderr


run_tests([test_the_example_is_correct_and_compiles, test_every_error_with_its_position,
           test_unreadable_and_bad_yaml_and_usage])
