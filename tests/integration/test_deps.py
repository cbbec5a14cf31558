"""Single jobs before workflows, as a Slurm user reaches for them:
`anvil run --after JOB[:ok|:any|:failed]` (sbatch --dependency) and
`anvil run --array 0-29%8` (sbatch --array), against real daemons."""
import os
import re
import time

from harness import ApiError, cluster, run_tests, wait_for

FINAL = ("succeeded", "failed", "cancelled", "lost")


def state(c, jid):
    return c.job(jid)["state"]


def run(c, *args):
    p = c.cli("run", *args, check=True)
    return int(re.search(r"submitted (?:job|array) (\d+)", p.stdout + p.stderr).group(1))


def test_after_waits_then_runs_and_why_says_for_which_job():
    with cluster(agents=1, gpus=2, name="depok") as c:
        a = run(c, "--", "sleep", "2")
        b = run(c, "--after", str(a), "--", "true")
        assert state(c, b) == "pending", c.job(b)
        why = c.cli("why", str(b), check=True).stdout
        assert "waiting for job %d to succeed (--after %d:ok)" % (a, a) in why, why
        assert c.job(b)["after"] == [{"job": a, "when": "ok"}], c.job(b)
        c.wait_job(b, timeout=30)
        ja, jb = c.job(a), c.job(b)
        assert jb["state"] == "succeeded", jb
        assert jb["start_time_ms"] >= ja["end_time_ms"], (ja, jb)


def test_a_dependency_that_can_never_hold_cancels_with_the_reason():
    with cluster(agents=1, gpus=1, name="depnever") as c:
        a = run(c, "--", "sh", "-c", "exit 3")
        b = run(c, "--after", "%d:ok" % a, "--", "true")
        f = run(c, "--after", "%d:failed" % a, "--", "true")
        n = run(c, "--after", "%d:any" % a, "--", "true")
        c.wait_job(b, timeout=30)
        jb = c.job(b)
        assert jb["state"] == "cancelled" and not jb["attempts"], jb
        assert "its dependency can never hold: job %d failed (--after %d:ok)" % (a, a) \
            in jb["reason"], jb
        assert c.wait_job(f, timeout=30)["state"] == "succeeded"
        assert c.wait_job(n, timeout=30)["state"] == "succeeded"
        # a chain behind the cancelled job is cancelled too, at once
        d = run(c, "--after", str(b), "--", "true")
        assert c.wait_job(d, timeout=10)["state"] == "cancelled", c.job(d)


def test_a_chain_runs_in_order():
    with cluster(agents=1, gpus=2, name="depchain") as c:
        ids = [run(c, "--", "true")]
        for _ in range(5):
            ids.append(run(c, "--after", str(ids[-1]), "--", "true"))
        c.wait_job(ids[-1], timeout=60)
        jobs = [c.job(j) for j in ids]
        assert all(j["state"] == "succeeded" for j in jobs), jobs
        for prev, nxt in zip(jobs, jobs[1:]):
            assert nxt["start_time_ms"] >= prev["end_time_ms"], (prev, nxt)


def test_bad_dependencies_are_refused():
    with cluster(agents=1, gpus=1, name="depbad") as c:
        try:
            c.submit(["true"], after=[{"job": 999}])
            raise AssertionError("accepted a dependency on a job that does not exist")
        except ApiError as e:
            assert e.status == 404 and "after[0].job" in str(e.body), e.body
        try:
            c.submit(["true"], after=[{"job": 1, "when": "soon"}])
            raise AssertionError("accepted when=soon")
        except ApiError as e:
            assert e.status in (400, 404), e.body
        p = c.cli("run", "--after", "x", "--", "true")
        assert p.returncode == 2 and "--after x" in p.stderr, p.stderr


def test_array_runs_every_index_at_most_n_at_once():
    with cluster(agents=1, gpus=4, name="array") as c:
        out = os.path.join(c.dir, "array-out")
        os.makedirs(out)
        first = run(c, "--array", "0-5%2", "--", "sh", "-c",
                    "echo $ANVIL_ARRAY_ID > %s/$ANVIL_ARRAY_INDEX; sleep 1" % out)
        ids = list(range(first, first + 6))
        most = 0
        deadline = time.time() + 60
        while time.time() < deadline:  # one list call: the server's view at one moment
            listed = c.api("GET", "/v1/jobs?array=%d&state=all" % first)["jobs"]
            states = [j["state"] for j in listed]
            most = max(most, sum(s in ("running", "scheduled") for s in states))
            if len(states) == 6 and all(s in FINAL for s in states):
                break
            time.sleep(0.05)
        assert all(state(c, j) == "succeeded" for j in ids), [c.job(j) for j in ids]
        assert most <= 2, most
        assert sorted(os.listdir(out)) == [str(i) for i in range(6)], os.listdir(out)
        assert open(os.path.join(out, "3")).read().strip() == str(first)
        member = c.job(first + 3)
        assert member["array"] == {"id": first, "index": 3, "max_running": 2}, member
        # one line for the array, its members with --expand
        jobs = c.cli("jobs", check=True).stdout
        assert "%d_[0-5%%2]" % first in jobs and "6 succeeded" in jobs, jobs
        expanded = c.cli("jobs", "--array", str(first), check=True).stdout
        assert "%d_3" % first in expanded and "%d_5" % first in expanded, expanded


def test_cancel_an_array_or_one_member_and_a_limit_says_why():
    with cluster(agents=1, gpus=4, name="arraycancel") as c:
        first = run(c, "--array", "1,5,9%1", "--", "sleep", "60")
        ids = [first, first + 1, first + 2]
        wait_for(lambda: state(c, ids[0]) == "running", what="first member runs")
        assert [c.job(j)["array"]["index"] for j in ids] == [1, 5, 9]
        assert "array %d: 1 of its jobs run, its limit (%%1)" % first in c.job(ids[1])["reason"]
        c.cli("cancel", "%d_9" % first, check=True)
        assert c.wait_job(ids[2], timeout=10)["state"] == "cancelled"
        assert state(c, ids[0]) == "running"
        c.cli("cancel", str(first), check=True)
        for j in ids[:2]:
            assert c.wait_job(j, timeout=30)["state"] == "cancelled", c.job(j)
        p = c.cli("cancel", "%d_7" % first)
        assert p.returncode == 1 and "no such array member" in p.stderr, p.stderr
        p = c.cli("run", "--array", "5-1", "--", "true")
        assert p.returncode == 2 and "--array 5-1" in p.stderr, p.stderr


def test_wait_for_an_array_exits_with_its_members_highest_status():
    """As `sbatch --wait --array`: every member's end, how many ended how, the first
    failure's reason, and the highest status; 0 when all succeeded."""
    with cluster(agents=1, gpus=2, name="arraywait") as c:
        code = "exit $(( ANVIL_ARRAY_INDEX == 3 ? 5 : (ANVIL_ARRAY_INDEX == 4 ? 2 : 0) ))"
        p = c.cli("run", "--array", "1-5%2", "--wait", "--", "sh", "-c", code, timeout=120)
        assert p.returncode == 5, (p.returncode, p.stdout, p.stderr)
        first = int(re.search(r"submitted array (\d+)", p.stderr).group(1))
        assert "array %d: 3 succeeded, 2 failed" % first in p.stderr, p.stderr
        assert "job %d failed with exit code 5" % (first + 2) in p.stderr, p.stderr
        assert p.stdout == "", p.stdout
        assert all(state(c, first + k) in FINAL for k in range(5))
        p = c.cli("run", "--array", "1-3", "--wait", "--", "true", timeout=120)
        assert p.returncode == 0 and ": 3 succeeded\n" in p.stderr, (p.returncode, p.stderr)
        p = c.cli("run", "--array", "1-3", "--wait", "--rank", "0", "--", "true")
        assert p.returncode == 2 and "--rank" in p.stderr, p.stderr


run_tests([test_after_waits_then_runs_and_why_says_for_which_job,
           test_a_dependency_that_can_never_hold_cancels_with_the_reason,
           test_a_chain_runs_in_order, test_bad_dependencies_are_refused,
           test_array_runs_every_index_at_most_n_at_once,
           test_cancel_an_array_or_one_member_and_a_limit_says_why,
           test_wait_for_an_array_exits_with_its_members_highest_status])
