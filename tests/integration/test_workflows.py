"""Workflows through real daemons: `anvil wf run` of a DAG with a sweep,
task caching across runs, retries with backoff, a failure that skips what
needs it and `wf recover`, `wf cancel`, a server SIGKILL mid-workflow,
identical tasks computed once, and the API's validation."""
import json
import os
import re
import tempfile
import time

from harness import ApiError, cluster, run_tests, scratch_dir, wait_for


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def code_dir(c):
    """A working tree for the code bundle, apart from the files the tasks write."""
    code = tempfile.mkdtemp(dir=c.dir, prefix="code-")
    write(os.path.join(code, "README"), "the tasks' code\n")
    return code


def lines(path):
    try:
        with open(path) as f:
            return [x.rstrip("\n") for x in f]
    except FileNotFoundError:
        return []


def submitted(p):
    m = re.search(r"workflow (\d+) \(.*\) submitted", p.stdout)
    assert m, p.stdout + p.stderr
    return int(m.group(1))


def execution(c, xid):
    return c.api("GET", "/v1/workflows/%d" % xid)["workflow"]


def runs(c, xid):
    return {r["label"]: r for r in execution(c, xid)["run_list"]}


def run_state(c, xid, label):
    try:
        return runs(c, xid)[label]["state"]
    except ApiError:  # not submitted yet
        return None


def wait_exec(c, xid, timeout=60):
    return wait_for(lambda: (lambda x: x if x["state"] != "running" else None)(execution(c, xid)),
                    timeout=timeout, what="workflow %d to end" % xid)


DIAMOND = """
name: diamond
inputs: {msg: hi}
tasks:
  a:
    command: echo a {{ inputs.msg }} >> %(log)s; sleep 0.3
    cache: true
  b:
    command: echo b >> %(log)s
    needs: a
    cache: true
  c:
    command: >-
      echo "c{{ params.x }} start $(date +%%s%%N)" >> %(log)s; sleep 0.5;
      echo "c{{ params.x }} end $(date +%%s%%N)" >> %(log)s
    needs: a
    map: {grid: {x: [1, 2, 3]}, concurrency: 2}
    cache: true
  d:
    command: echo d >> %(log)s
    needs: [b, c]
    cache: true
"""


def test_a_diamond_with_a_sweep_runs_in_order_then_reruns_from_the_cache():
    with cluster(agents=1, gpus=4, name="wfdiamond") as c:
        d = tempfile.mkdtemp(dir=c.dir)
        code = code_dir(c)
        log = os.path.join(d, "order")
        wf = write(os.path.join(d, "diamond.yaml"), DIAMOND % {"log": log})
        p = c.cli("wf", "run", "--code", code, "--wait", wf, timeout=90)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "workflow 1 succeeded" in p.stdout, p.stdout
        got = lines(log)
        order = [x.split()[0] for x in got]
        assert order[0] == "a" and order[-1] == "d", got
        assert sorted(x for x in order if x.startswith("c")) == \
            ["c1", "c1", "c2", "c2", "c3", "c3"], got
        # the sweep's concurrency: never more than 2 children at once
        ev = sorted((int(x.split()[2]), 1 if x.split()[1] == "start" else -1)
                    for x in got if x.startswith("c"))
        live = peak = 0
        for _, step in ev:
            live += step
            peak = max(peak, live)
        assert peak <= 2, got
        show = c.cli("wf", "show", "1", check=True).stdout
        assert "workflow 1 (diamond): succeeded, 6/6 ok" in show, show
        assert re.search(r"c\[2\]\s+a\s+succeeded\s+1\s+\d+\s+node-1\s+\S+\s+x=3", show), show
        # the same again: every task a cache hit, nothing runs
        os.unlink(log)
        t0 = time.time()
        p = c.cli("wf", "run", "--code", code, "--wait", wf, timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr
        assert lines(log) == [], lines(log)
        r2 = runs(c, 2)
        assert all(r["state"] == "cached" for r in r2.values()), r2
        assert r2["c[1]"]["cached_exec"] == 1, r2
        assert time.time() - t0 < 10
        # a changed input: a's command renders it; b, c and d do not use it. The
        # miss names the input with its old and new values, not "the command"
        p = c.cli("wf", "run", "--code", code, "--wait", "-i", "msg=bye", wf, timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr
        r3 = runs(c, 3)
        assert r3["a"]["state"] == "succeeded", r3["a"]
        assert r3["a"]["cache"] == "miss: input msg changed: hi -> bye", r3["a"]
        assert all(r3[k]["state"] == "cached" for k in r3 if k != "a"), r3
        assert lines(log) == ["a bye"], lines(log)
        # --no-cache: everything runs
        p = c.cli("wf", "run", "--code", code, "--wait", "--no-cache", wf, timeout=90)
        assert p.returncode == 0, p.stdout + p.stderr
        assert all(r["state"] == "succeeded" for r in runs(c, 4).values())
        ls = c.cli("wf", "ls", check=True).stdout
        assert re.search(r"^\s*4\s+diamond\s+succeeded\s+6/6 ok", ls, re.M), ls


SWEEP30 = """
name: sweep30
tasks:
  point:
    command: echo $(( {{ params.lr }} * {{ params.bs }} )) > $ANVIL_OUTPUT_DIR/score
    map: {grid: {lr: [1, 2, 3, 4, 5, 6], bs: [10, 20, 30, 40, 50]}, concurrency: 8}
    outputs: {score: value}
  best:
    command: >-
      for s in {{ tasks.point.outputs.score }}; do echo $s; done | sort -n | tail -1
      > $ANVIL_OUTPUT_DIR/best
    outputs: {best: value}
"""


def test_a_30_way_sweep_runs_every_point_and_lists_the_results():
    with cluster(agents=2, gpus=4, name="wfsweep") as c:
        d = tempfile.mkdtemp(dir=c.dir)
        code = code_dir(c)
        wf = write(os.path.join(d, "sweep.yaml"), SWEEP30)
        p = c.cli("wf", "run", "--code", code, "--wait", wf, timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        r = runs(c, 1)
        points = [r["point[%d]" % i] for i in range(30)]
        assert all(x["state"] == "succeeded" for x in points), points
        got = {(x["params"]["lr"], x["params"]["bs"]): x["outputs"]["score"]["value"]
               for x in points}
        assert got == {(lr, bs): str(lr * bs) for lr in range(1, 7)
                       for bs in (10, 20, 30, 40, 50)}, got
        assert r["best"]["outputs"]["best"]["value"] == "300", r["best"]
        show = c.cli("wf", "show", "1", check=True).stdout
        assert "workflow 1 (sweep30): succeeded, 31/31 ok" in show, show
        assert re.search(r"^point\[29\]\s+-\s+succeeded\s+1\s+\d+\s+node-\d\s+\S+\s+"
                         r"lr=6 bs=50\s+score=300\s", show, re.M), show
        # no more than 8 at once: the jobs' run times overlap at most 8 deep
        spans = sorted((c.job(x["job_id"])["start_time_ms"], c.job(x["job_id"])["end_time_ms"])
                       for x in points)
        assert max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans) <= 8, spans


RETRY = """
name: retry
tasks:
  flaky:
    command: >-
      n=$(cat %(count)s 2>/dev/null || echo 0); n=$((n+1)); echo $n > %(count)s;
      date +%%s%%N >> %(times)s; test $n -ge 3
    retries: {count: 3, backoff: 1s}
"""


def test_a_task_that_fails_twice_is_retried_after_its_backoff():
    with cluster(agents=1, gpus=2, name="wfretry") as c:
        d = tempfile.mkdtemp(dir=c.dir)
        code = code_dir(c)
        times = os.path.join(d, "times")
        wf = write(os.path.join(d, "retry.yaml"),
                   RETRY % {"count": os.path.join(d, "count"), "times": times})
        p = c.cli("wf", "run", "--code", code, "--wait", wf, timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr
        r = runs(c, 1)["flaky"]
        assert r["state"] == "succeeded" and r["tries"] == 3 and len(r["jobs"]) == 3, r
        ts = [int(x) / 1e9 for x in lines(times)]
        assert all(b - a >= 0.95 for a, b in zip(ts, ts[1:])), ts
        assert c.job(r["jobs"][0])["state"] == "failed"


FAILING = """
name: failing
tasks:
  ok: {command: echo ok >> %(log)s}
  bad:
    command: test -e %(flag)s && echo bad >> %(log)s
    needs: ok
  after: {command: echo after >> %(log)s, needs: bad}
  aside: {command: echo aside >> %(log)s, needs: ok}
"""


def test_a_failure_skips_what_needs_it_and_recover_runs_on_from_there():
    with cluster(agents=1, gpus=2, name="wffail") as c:
        d = tempfile.mkdtemp(dir=c.dir)
        code = code_dir(c)
        log, flag = os.path.join(d, "log"), os.path.join(d, "flag")
        wf = write(os.path.join(d, "failing.yaml"), FAILING % {"log": log, "flag": flag})
        p = c.cli("wf", "run", "--code", code, "--wait", wf, timeout=60)
        assert p.returncode == 1, p.stdout + p.stderr
        assert "bad failed" in p.stdout and "workflow 1 failed: task bad failed" in p.stdout, \
            p.stdout
        r = runs(c, 1)
        assert r["after"]["state"] == "skipped", r["after"]
        assert r["after"]["why"] == "needs task 'bad', which did not succeed", r["after"]
        assert r["aside"]["state"] == "succeeded", r["aside"]
        ok_job = r["ok"]["job_id"]
        show = c.cli("wf", "show", "1", check=True).stdout
        assert "bad: job %d failed" % r["bad"]["job_id"] in show, show
        # recover: only what did not succeed runs again
        write(flag, "")
        p = c.cli("wf", "recover", "--wait", "1", timeout=60)
        assert p.returncode == 0, p.stdout + p.stderr
        r = runs(c, 1)
        assert all(x["state"] == "succeeded" for x in r.values()), r
        assert r["ok"]["job_id"] == ok_job and r["ok"]["tries"] == 1, r["ok"]
        assert sorted(lines(log)) == ["after", "aside", "bad", "ok"], lines(log)
        p = c.cli("wf", "recover", "1")
        assert p.returncode == 0, p.stderr  # a succeeded execution: recovers nothing


SLOW = """
name: slow
tasks:
  first: {command: sleep 60}
  second: {command: "true", needs: first}
"""


def test_cancel_stops_the_running_task_and_cancels_the_rest():
    with cluster(agents=1, gpus=2, name="wfcancel") as c:
        d = tempfile.mkdtemp(dir=c.dir)
        code = code_dir(c)
        wf = write(os.path.join(d, "slow.yaml"), SLOW)
        xid = submitted(c.cli("wf", "run", "--code", code, wf, check=True))
        wait_for(lambda: runs(c, xid)["first"]["state"] == "running", what="first running")
        job = runs(c, xid)["first"]["job_id"]
        c.wait_job(job, states=("running",), timeout=30)
        waiter = c.cli_popen("wf", "run", "--code", code, "--wait", wf)
        xid2 = xid + 1
        wait_for(lambda: run_state(c, xid2, "first") == "running", what="second running")
        c.cli("wf", "cancel", str(xid), check=True)
        c.cli("wf", "cancel", str(xid2), check=True)
        x = wait_exec(c, xid, timeout=30)
        assert x["state"] == "cancelled", x
        r = runs(c, xid)
        assert r["first"]["state"] == "cancelled" and r["second"]["state"] == "cancelled", r
        assert c.job(job)["state"] == "cancelled"
        out, err = waiter.communicate(timeout=30)
        assert waiter.returncode == 130, (waiter.returncode, out, err)


CHAIN = """
name: chain
tasks:
  one: {command: echo one >> %(log)s}
  two: {command: "echo two >> %(log)s; sleep 2", needs: one}
  three: {command: echo three >> %(log)s, needs: two}
"""


def test_a_server_killed_mid_workflow_loses_nothing_and_reruns_nothing():
    with cluster(agents=1, gpus=2, name="wfkill") as c:
        d = tempfile.mkdtemp(dir=c.dir)
        code = code_dir(c)
        log = os.path.join(d, "log")
        wf = write(os.path.join(d, "chain.yaml"), CHAIN % {"log": log})
        xid = submitted(c.cli("wf", "run", "--code", code, wf, check=True))
        wait_for(lambda: "two" in lines(log), what="task two running")
        c.kill_server()
        c.start_server()
        x = wait_exec(c, xid, timeout=60)
        assert x["state"] == "succeeded", x
        assert lines(log) == ["one", "two", "three"], lines(log)
        assert all(r["tries"] == 1 for r in runs(c, xid).values()), runs(c, xid)


SAME = """
name: same-%(n)s
tasks:
  work: {command: "echo work >> %(log)s; sleep 1", cache: true}
"""


def test_identical_tasks_submitted_together_run_once():
    with cluster(agents=1, gpus=4, name="wfsame") as c:
        d = tempfile.mkdtemp(dir=c.dir)
        code = code_dir(c)
        log = os.path.join(d, "log")
        a = write(os.path.join(d, "a.yaml"), SAME % {"n": "a", "log": log})
        b = write(os.path.join(d, "b.yaml"), SAME % {"n": "a", "log": log})
        xa = submitted(c.cli("wf", "run", "--code", code, a, check=True))
        xb = submitted(c.cli("wf", "run", "--code", code, b, check=True))
        wait_exec(c, xa)
        xb_done = wait_exec(c, xb)
        assert xb_done["state"] == "succeeded", xb_done
        rb = runs(c, xb)["work"]
        assert rb["state"] == "cached" and rb["cached_exec"] == xa, rb
        assert lines(log) == ["work"], lines(log)


FLOW = """
name: flow
inputs: {x: 1}
tasks:
  gen: {command: "echo {{ inputs.x }} > $ANVIL_OUTPUT_DIR/v", outputs: {v: value}, cache: true}
  fixed: {command: "echo fixed > $ANVIL_OUTPUT_DIR/v", outputs: {v: value}, cache: true}
  use:
    command: echo "got {{ tasks.gen.outputs.v }} and $(cat tool.txt)" > $ANVIL_OUTPUT_DIR/v
    outputs: {v: value}
    cache: true
  files:
    command: mkdir $ANVIL_OUTPUT_DIR/d && echo one > $ANVIL_OUTPUT_DIR/d/a && echo two > $ANVIL_OUTPUT_DIR/d/b
    outputs: {d: dir}
    cache: true
  count:
    command: ls {{ tasks.files.outputs.d }} | wc -l > $ANVIL_OUTPUT_DIR/n
    outputs: {n: value}
    cache: true
"""


def outputs(c, xid):
    return {k: {o: v.get("value", v.get("key")) for o, v in (r.get("outputs") or {}).items()}
            for k, r in runs(c, xid).items()}


def test_outputs_flow_on_and_a_changed_input_or_code_reruns_what_it_touches():
    with cluster(agents=2, gpus=2, name="wfoutputs") as c:
        d = tempfile.mkdtemp(dir=c.dir)
        code = code_dir(c)
        write(os.path.join(code, "tool.txt"), "tool v1\n")
        wf = write(os.path.join(d, "flow.yaml"), FLOW)
        p = c.cli("wf", "run", "--code", code, "--wait", wf, timeout=90)
        assert p.returncode == 0, p.stdout + p.stderr
        out = outputs(c, 1)
        assert out["use"]["v"] == "got 1 and tool v1", out
        assert out["count"]["n"] == "2", out
        assert out["files"]["d"].startswith("sha256/"), out
        # the object is in the store, with its size and hash
        stat = c.api("GET", "/v1/objects/%s?stat=1" % out["files"]["d"])
        assert stat["sha256"] == out["files"]["d"][7:], stat
        # another input: what renders it reruns, the rest is cached
        p = c.cli("wf", "run", "--code", code, "--wait", "-i", "x=2", wf, timeout=90)
        assert p.returncode == 0, p.stdout + p.stderr
        r = runs(c, 2)
        assert {k for k, v in r.items() if v["state"] == "succeeded"} == {"gen", "use"}, r
        assert r["gen"]["cache"] == "miss: input x changed: 1 -> 2", r["gen"]
        assert r["use"]["cache"] == "miss: output v of task gen changed: 1 -> 2", r["use"]
        assert {k for k, v in r.items() if v["state"] == "cached"} == {"fixed", "files", "count"}
        assert outputs(c, 2)["use"]["v"] == "got 2 and tool v1"
        # changed code: only the task that read the file misses, naming it
        write(os.path.join(code, "tool.txt"), "tool v2\n")
        p = c.cli("wf", "run", "--code", code, "--wait", "-i", "x=2", wf, timeout=90)
        assert p.returncode == 0, p.stdout + p.stderr
        r = runs(c, 3)
        assert r["use"]["state"] == "succeeded", r["use"]
        assert r["use"]["cache"] == "miss: the code changed: tool.txt", r["use"]
        assert {k for k, v in r.items() if v["state"] == "cached"} == \
            {"gen", "fixed", "files", "count"}, r
        assert outputs(c, 3)["use"]["v"] == "got 2 and tool v2"
        # a cached result whose object vanished is a miss that runs, not a failure
        key = out["files"]["d"]
        obj = os.path.join(c.state_dir, "objects", "sha256", key[7:9], key[9:])
        assert os.path.exists(obj), obj
        os.unlink(obj)
        p = c.cli("wf", "run", "--code", code, "--wait", "-i", "x=1", wf, timeout=90)
        assert p.returncode == 0, p.stdout + p.stderr
        r = runs(c, 4)
        assert r["files"]["state"] == "succeeded", r["files"]
        assert "are gone from the object store" in r["files"]["cache"], r["files"]


READS = """
name: reads
tasks:
  gen:
    command: python3 gen.py > $ANVIL_OUTPUT_DIR/n
    outputs: {n: value}
    cache: true
  train:
    command: python3 train.py {{ tasks.gen.outputs.n }} > $ANVIL_OUTPUT_DIR/m
    outputs: {m: value}
    cache: true
"""


def test_a_task_is_cached_by_the_files_it_read_and_a_miss_names_the_one_that_changed():
    """The default cache key: what the task read of the bundle, not the whole bundle."""
    with cluster(agents=1, gpus=2, name="wfreads") as c:
        d = tempfile.mkdtemp(dir=c.dir)
        code = code_dir(c)
        os.makedirs(os.path.join(code, "lib"))
        write(os.path.join(code, "lib", "__init__.py"), "")
        write(os.path.join(code, "lib", "util.py"), "def n():\n    return 7\n")
        write(os.path.join(code, "gen.py"), "from lib import util\nprint(util.n())\n")
        write(os.path.join(code, "train.py"), "import sys\nprint(int(sys.argv[1]) * 2)\n")
        wf = write(os.path.join(d, "reads.yaml"), READS)

        def run(xid):
            p = c.cli("wf", "run", "--code", code, "--wait", wf, timeout=90)
            assert p.returncode == 0, p.stdout + p.stderr
            assert submitted(p) == xid, p.stdout
            return runs(c, xid)

        r = run(1)
        assert outputs(c, 1) == {"gen": {"n": "7"}, "train": {"m": "14"}}, outputs(c, 1)
        assert r["gen"]["cache"] == "miss: no earlier result", r["gen"]
        # a comment added to a script that gen did not read: gen stays cached
        write(os.path.join(code, "train.py"),
              "import sys\n# doubles it\nprint(int(sys.argv[1]) * 2)\n")
        r = run(2)
        assert r["gen"]["state"] == "cached" and r["gen"]["cache"] == "hit", r["gen"]
        assert r["gen"]["cached_exec"] == 1, r["gen"]
        assert r["train"]["state"] == "succeeded", r["train"]
        assert r["train"]["cache"] == "miss: the code changed: train.py", r["train"]
        # an edit to a module gen imported: gen runs again, the miss names it;
        # train (same input value, script unchanged since) is a hit
        write(os.path.join(code, "lib", "util.py"), "def n():\n    return 7  # seven\n")
        r = run(3)
        assert r["gen"]["state"] == "succeeded", r["gen"]
        assert r["gen"]["cache"] == "miss: the code changed: lib/util.py", r["gen"]
        assert r["train"]["state"] == "cached", r["train"]
        # the same code again: everything cached, from the runs that read it
        r = run(4)
        assert r["gen"]["state"] == "cached" and r["gen"]["cached_exec"] == 3, r["gen"]
        assert r["train"]["state"] == "cached" and r["train"]["cached_exec"] == 2, r["train"]
        # the read set is on record on the node's side too
        log = c.cli("wf", "logs", "3", "gen", check=True)
        assert "paths of its code" in log.stdout + log.stderr, log.stdout + log.stderr


DECLARED = """
name: declared
tasks:
  gen:
    command: cat lib/a.txt conf.txt > $ANVIL_OUTPUT_DIR/v
    outputs: {v: value}
    cache: {code: [lib/]}
  whole:
    command: cat conf.txt > $ANVIL_OUTPUT_DIR/v
    outputs: {v: value}
    cache: {code: bundle}
"""


def test_declared_code_paths_key_a_task_by_those_files_and_the_whole_bundle_setting():
    with cluster(agents=1, gpus=2, name="wfdeclared") as c:
        d = tempfile.mkdtemp(dir=c.dir)
        code = code_dir(c)
        os.makedirs(os.path.join(code, "lib"))
        write(os.path.join(code, "lib", "a.txt"), "a1\n")
        write(os.path.join(code, "conf.txt"), "c1\n")
        wf = write(os.path.join(d, "declared.yaml"), DECLARED)

        def run(xid):
            p = c.cli("wf", "run", "--code", code, "--wait", wf, timeout=90)
            assert p.returncode == 0, p.stdout + p.stderr
            assert submitted(p) == xid, p.stdout
            return runs(c, xid)

        run(1)
        assert outputs(c, 1)["gen"]["v"] == "a1\nc1", outputs(c, 1)
        # a file outside the declared paths: gen is cached (it said what it
        # uses, and this is not), the whole bundle's task is not
        write(os.path.join(code, "README"), "changed\n")
        r = run(2)
        assert r["gen"]["state"] == "cached", r["gen"]
        assert r["whole"]["state"] == "succeeded", r["whole"]
        assert r["whole"]["cache"] == "miss: the code bundle changed", r["whole"]
        # a file under a declared directory, edited, and one added there
        write(os.path.join(code, "lib", "a.txt"), "a2\n")
        write(os.path.join(code, "lib", "b.txt"), "b\n")
        r = run(3)
        assert r["gen"]["state"] == "succeeded", r["gen"]
        assert r["gen"]["cache"] == "miss: the code changed: lib/a.txt, lib/b.txt (new)", \
            r["gen"]
        assert outputs(c, 3)["gen"]["v"] == "a2\nc1", outputs(c, 3)


CKPT = """
name: ckpt
tasks:
  train:
    command: >-
      n=$(cat $ANVIL_CHECKPOINT_DIR/step 2>/dev/null || echo 0); n=$((n+1));
      echo $n > $ANVIL_CHECKPOINT_DIR/step; echo $n > $ANVIL_OUTPUT_DIR/steps;
      test $n -ge 3
    checkpoint: true
    retries: {count: 3, backoff: 0s}
    outputs: {steps: value}
"""


def test_a_task_that_fails_twice_resumes_from_its_checkpoint():
    with cluster(agents=2, gpus=1, name="wfckpt") as c:
        d = tempfile.mkdtemp(dir=c.dir)
        code = code_dir(c)
        wf = write(os.path.join(d, "ckpt.yaml"), CKPT)
        p = c.cli("wf", "run", "--code", code, "--wait", wf, timeout=90)
        assert p.returncode == 0, p.stdout + p.stderr
        r = runs(c, 1)["train"]
        # three jobs, each starting from the step the one before saved
        assert r["tries"] == 3 and r["outputs"]["steps"]["value"] == "3", r
        c.api("GET", "/v1/objects/ckpt/1/train/0?stat=1")


PREEMPTED = """
name: long
tasks:
  train:
    command: >-
      i=$(cat $ANVIL_CHECKPOINT_DIR/i 2>/dev/null || echo 0);
      echo "attempt $ANVIL_ATTEMPT from $i" >> $ANVIL_CHECKPOINT_DIR/log;
      while [ $i -lt 20 ]; do i=$((i+1)); echo $i > $ANVIL_CHECKPOINT_DIR/i; sleep 0.2; done;
      cp $ANVIL_CHECKPOINT_DIR/log $ANVIL_OUTPUT_DIR/log
    resources: {gpus: 2}
    checkpoint: true
    outputs: {log: value}
"""


def test_a_preempted_checkpointing_task_resumes():
    with cluster(agents=1, gpus=2, name="wfpreempt",
                 server_args=["--preempt-min-runtime", "1s"]) as c:
        d = tempfile.mkdtemp(dir=c.dir)
        code = code_dir(c)
        wf = write(os.path.join(d, "long.yaml"), PREEMPTED)
        xid = submitted(c.cli("wf", "run", "--code", code, wf, check=True))
        wait_for(lambda: run_state(c, xid, "train") == "running", what="train running")
        job = runs(c, xid)["train"]["job_id"]
        c.wait_job(job, states=("running",), timeout=30)
        time.sleep(1.6)
        hi = c.submit(["sleep", "1"], gpus=2, priority=50)["id"]
        c.wait_job(hi, timeout=60)
        x = wait_exec(c, xid, timeout=90)
        assert x["state"] == "succeeded", x
        r = runs(c, xid)["train"]
        log = r["outputs"]["log"]["value"].splitlines()
        assert r["tries"] == 1 and len(c.job(job)["attempts"]) == 2, (r, c.job(job))
        assert log[0] == "attempt 1 from 0", log
        # the second attempt started where the first had got to, not from 0
        assert log[1].startswith("attempt 2 from ") and int(log[1].split()[-1]) >= 3, log


def test_run_local_runs_here_with_the_same_outputs_cache_and_checkpoints():
    """`anvil wf run --local`: no server at all."""
    import subprocess
    from harness import ANVIL
    d = scratch_dir("anvil-wflocal-")
    home, code = os.path.join(d, "home"), os.path.join(d, "code")
    os.makedirs(code)
    write(os.path.join(code, "tool.txt"), "tool v1\n")
    wf = write(os.path.join(d, "flow.yaml"), FLOW)
    ck = write(os.path.join(d, "ckpt.yaml"), CKPT)
    env = dict(os.environ, ANVIL_HOME=home)
    env.pop("ANVIL_SERVER", None)

    def local(*args):
        return subprocess.run([ANVIL, "wf", "run", "--local", "--code", code] + list(args),
                              capture_output=True, text=True, env=env, cwd=code, timeout=120)

    p = local("--json", wf)
    assert p.returncode == 0, p.stdout + p.stderr
    x = json.loads(p.stdout)  # stdout is the execution alone; the rest went to stderr
    out = {r["label"]: r.get("outputs") for r in x["run_list"]}
    assert out["use"]["v"]["value"] == "got 1 and tool v1", out
    assert out["count"]["n"]["value"] == "2", out
    assert "== gen: succeeded" in p.stderr, p.stderr
    p = local(wf)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.count("cached (from local execution 1)") == 5, p.stdout
    p = local("-i", "x=5", wf)
    assert "got 5 and tool v1" in p.stdout and "miss: input x changed: 1 -> 5" in p.stdout, \
        p.stdout
    # an edit to the file one task reads reruns that task alone, here too
    write(os.path.join(code, "tool.txt"), "tool v2\n")
    p = local("-i", "x=5", wf)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "got 5 and tool v2" in p.stdout, p.stdout
    assert "miss: the code changed: tool.txt" in p.stdout, p.stdout
    assert p.stdout.count("cached (from local execution") == 4, p.stdout
    # a retried task resumes from its checkpoint here too
    p = local("--json", ck)
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.loads(p.stdout)["run_list"][0]
    assert r["tries"] == 3 and r["outputs"]["steps"]["value"] == "3", r
    # a failure: exit 1, and the reason
    bad = write(os.path.join(d, "bad.yaml"), "tasks:\n  t: {command: exit 4}\n")
    p = local(bad)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "its command exited with status 4" in p.stdout, p.stdout


def test_the_api_refuses_a_bad_workflow_with_every_error():
    with cluster(agents=1, gpus=1, name="wfbad") as c:
        bad = {"name": "bad", "tasks": [
            {"name": "a", "command": ["true"], "needs": ["zz"], "bogus": 1},
            {"name": "a", "command": []}]}
        try:
            c.api("POST", "/v1/workflows", {"workflow": bad})
            raise AssertionError("accepted")
        except ApiError as e:
            assert e.status == 400, e
            msg = e.body["error"]["message"]
            assert "workflow.tasks[0].bogus" in msg and "workflow.tasks[0].needs[0]" in msg, msg
            assert "workflow.tasks[1]" in msg, msg
        for body, field in (({"workflow": 3}, "workflow"),
                            ({"workflow": {"tasks": [{"name": "a", "command": ["true"]}]},
                              "bundle": "x"}, "bundle"),
                            ({"workflow": {"tasks": [{"name": "a", "command": ["true"]}]},
                              "extra": 1}, "extra")):
            try:
                c.api("POST", "/v1/workflows", body)
                raise AssertionError("accepted %r" % body)
            except ApiError as e:
                assert e.status == 400 and e.body["error"]["message"].startswith(field), e
        for path in ("/v1/workflows/99", "/v1/workflows/x"):
            try:
                c.api("GET", path)
                raise AssertionError("found")
            except ApiError as e:
                assert e.status == 404, e
        # a run's outputs need its attempt's exec token, not any token
        try:
            c.api("POST", "/v1/workflows/runs/1/outputs", {"attempt_id": 1, "outputs": {}},
                  token="0" * 64)
            raise AssertionError("accepted")
        except ApiError as e:
            assert e.status == 401, e
        p = c.cli("wf", "show", "7")
        assert p.returncode == 1 and "no such workflow execution" in p.stderr, p.stderr
        assert json.loads(c.cli("wf", "ls", "--json", check=True).stdout)["workflows"] == []


if __name__ == "__main__":
    run_tests([test_a_diamond_with_a_sweep_runs_in_order_then_reruns_from_the_cache,
               test_a_30_way_sweep_runs_every_point_and_lists_the_results,
               test_outputs_flow_on_and_a_changed_input_or_code_reruns_what_it_touches,
               test_a_task_that_fails_twice_resumes_from_its_checkpoint,
               test_a_preempted_checkpointing_task_resumes,
               test_run_local_runs_here_with_the_same_outputs_cache_and_checkpoints,
               test_a_task_is_cached_by_the_files_it_read_and_a_miss_names_the_one_that_changed,
               test_declared_code_paths_key_a_task_by_those_files_and_the_whole_bundle_setting,
               test_a_task_that_fails_twice_is_retried_after_its_backoff,
               test_a_failure_skips_what_needs_it_and_recover_runs_on_from_there,
               test_cancel_stops_the_running_task_and_cancels_the_rest,
               test_a_server_killed_mid_workflow_loses_nothing_and_reruns_nothing,
               test_identical_tasks_submitted_together_run_once,
               test_the_api_refuses_a_bad_workflow_with_every_error])
