"""`anvil fleet check`: a cluster spec compiled before anything happens, the
reference fleet correct, every error of a broken spec reported with
FILE:LINE:COLUMN, and the compiled queues and teams exactly what the
server's API takes."""
import json
import os
import subprocess
import tempfile

from harness import ANVIL, cluster, run_tests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REFERENCE = os.path.join(ROOT, "examples", "fleet", "reference.yaml")
SMALL = ("name: small\n"
         "pools: {onprem: }\n"
         "profiles: {p: {gpu: {model: NVIDIA H200, count: 8}}}\n"
         "groups: {g: {pool: onprem, profile: p, nodes: 'n[1-3]'}}\n")


def fleet(*args, stdin=None):
    return subprocess.run([ANVIL, "fleet"] + list(args), capture_output=True, text=True,
                          input=stdin, timeout=30)


def compiled(path=REFERENCE):
    p = fleet("check", "--json", path)
    assert p.returncode == 0, (p.stdout, p.stderr)
    return json.loads(p.stdout)


def test_the_reference_fleet_is_correct():
    p = fleet("check", REFERENCE)
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert p.stdout == "fleet reference: 28 nodes in 2 groups: ok\n", p.stdout
    f = compiled()
    profiles = {x["name"]: x for x in f["profiles"]}
    gpus = {}
    for n in f["nodes"]:
        gpu = profiles[n["profile"]]["gpu"]
        gpus[gpu["model"]] = gpus.get(gpu["model"], 0) + gpu["count"]
    assert gpus == {"NVIDIA A100-SXM4-80GB": 80, "NVIDIA H200": 144}, gpus
    names = [n["name"] for n in f["nodes"]]
    assert names[:2] == ["a100-01", "a100-02"] and names[-1] == "h200-18", names
    assert len(set(n["address"] for n in f["nodes"])) == 28
    blocks = sorted(set(n["labels"]["block"] for n in f["nodes"]))
    racks = sorted(set(n["labels"]["rack"] for n in f["nodes"]))
    assert blocks == ["b1", "b2"] and racks == ["r1", "r2"], (blocks, racks)
    for p in f["profiles"]:
        assert p["cache_dir"].startswith(p["mounts"][0]["path"] + "/"), p
    assert [q["name"] for q in f["queues"]] == ["prod", "research", "scavenger"]
    assert f["upgrade"] == {"max_unavailable": 2, "max_unavailable_per_block": 1,
                            "validation_timeout_ms": 900000}, f["upgrade"]


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
        "%s:4:43: profiles.p.cuda: was read as the number 12.1: write a version in quotes "
        "('12.10'), or 12.10 becomes 12.1" % f.name,
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
    p = fleet("frobnicate", "-")
    assert p.returncode == 2 and "unknown subcommand 'frobnicate'" in p.stderr, p.stderr
    p = fleet("bootstrap")
    assert p.returncode == 2 and "fleet bootstrap takes a spec FILE or ADDR[=NAME]" in p.stderr, \
        p.stderr
    p = fleet("history", "1", "2")
    assert p.returncode == 2 and 'unexpected argument "2"' in p.stderr, p.stderr
    p = subprocess.run([ANVIL, "help", "fleet"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "docs/fleet.md" in p.stdout, p.stdout


def test_compiled_queues_and_teams_are_what_the_server_takes():
    """The spec mirrors the server's queue settings: each compiled queue is
    a POST /v1/queues body as it is, and reads back the same."""
    f = compiled()
    with cluster(agents=0, name="fleet") as c:
        for t in f["teams"]:
            c.api("POST", "/v1/teams", t)
        for q in f["queues"]:
            c.api("POST", "/v1/queues", q)
        got = {q["name"]: q for q in c.api("GET", "/v1/queues")["queues"]}
        for q in f["queues"]:
            g = got[q["name"]]
            for k in ("priority", "weight", "borrowing", "default_time_limit_ms",
                      "idle_timeout_ms"):
                assert g[k] == q[k], (q["name"], k, g[k], q[k])
        teams = {t["name"]: t for t in c.api("GET", "/v1/queues")["teams"]}
        assert teams["pretrain"]["weight"] == 2, teams


run_tests([test_the_reference_fleet_is_correct, test_every_error_with_its_position,
           test_unreadable_stdin_and_usage,
           test_compiled_queues_and_teams_are_what_the_server_takes])
