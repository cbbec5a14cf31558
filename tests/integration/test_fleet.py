"""`anvil fleet check`: a cluster spec compiled before anything happens, and
every error of a broken spec reported with FILE:LINE:COLUMN (no daemon
needed)."""
import os
import subprocess
import tempfile

from harness import ANVIL, run_tests

SMALL = ("name: small\n"
         "pools: {onprem: }\n"
         "profiles: {p: {gpu: {model: NVIDIA H200, count: 8}}}\n"
         "groups: {g: {pool: onprem, profile: p, nodes: 'n[1-3]'}}\n")


def fleet(*args, stdin=None):
    return subprocess.run([ANVIL, "fleet"] + list(args), capture_output=True, text=True,
                          input=stdin, timeout=30)


def test_every_error_with_its_position():
    text = ("name: broken\n"
            "pools: {onprem: }\n"
            "profiles:\n"
            "  p: {gpu: {count: 8, model: H200}, cuda: 12.10}\n"
            "groups:\n"
            "  a: {pool: onprem, profile: p, nodes: 'n[01-10]'}\n"
            "  b: {pool: onprem, profile: q, nodes: 'n[09-12]'}\n"
            "queues:\n"
            "  prod: {quotas: {search: 8}, weight: 0}\n")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text)
    try:
        p = fleet("check", f.name)
    finally:
        os.unlink(f.name)
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert p.stdout == "", p.stdout
    assert p.stderr.splitlines() == [
        "%s:4:43: profiles.p.cuda: 12.1 was read as a number: quote a version ('12.1') so "
        "that 12.10 stays 12.10" % f.name,
        "%s:7:30: groups.b.profile: there is no profile 'q' (profiles: p)" % f.name,
        "%s:7:40: groups.b.nodes: node 'n09' is also in group 'a' (and more of this range)"
        % f.name,
        "%s:9:27: queues.prod.quotas.search: there is no team 'search': the spec has no teams"
        % f.name,
        "%s:9:39: queues.prod.weight: 0 is out of range: 1 to 1000" % f.name,
    ], p.stderr


def test_unreadable_stdin_and_usage():
    p = fleet("check", "/nonexistent/fleet.yaml")
    assert p.returncode == 1 and "cannot read /nonexistent/fleet.yaml" in p.stderr, p.stderr
    p = fleet("check", "-", stdin=SMALL)
    assert p.stdout == "fleet small: 3 nodes in 1 group: ok\n", (p.stdout, p.stderr)
    p = fleet("check", "-", stdin="groups: [\n")
    assert p.returncode == 1 and p.stderr.startswith("-:2:1: "), p.stderr
    p = fleet("check")
    assert p.returncode == 2 and "fleet check takes one FILE" in p.stderr, p.stderr
    p = fleet("plan", "-")
    assert p.returncode == 2 and "not built yet" in p.stderr, p.stderr
    p = subprocess.run([ANVIL, "help", "fleet"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "docs/fleet.md" in p.stdout, p.stdout


run_tests([test_every_error_with_its_position, test_unreadable_stdin_and_usage])
