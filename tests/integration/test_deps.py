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


def array_line(jobs, first):
    """The listing's line of array `first`, and its members counted by state."""
    lines = [l for l in jobs.splitlines() if l.lstrip().startswith("%d_[" % first)]
    assert len(lines) == 1, jobs
    counts = {st: int(n) for n, st in re.findall(
        r"(\d+) (running|scheduled|pending|succeeded|failed|cancelled|lost)", lines[0])}
    return lines[0], counts


def test_the_listing_shows_jobs_before_a_large_array_with_true_counts():
    """An array of 1,000 is one entry: the running jobs submitted before it
    are listed, and its line counts every member."""
    with cluster(agents=1, gpus=2, name="arraylist") as c:
        before = [run(c, "--name", "before-%d" % k, "--gpus", "1", "--", "sleep", "120")
                  for k in range(2)]
        for j in before:
            wait_for(lambda: state(c, j) == "running", what="job %d runs" % j)
        first = run(c, "--gpus", "0", "--array", "0-999%10", "--", "sleep", "120")
        wait_for(lambda: c.job(first)["state"] in ("scheduled", "running"),
                 what="the first member placed")
        p = c.cli("jobs", check=True)
        line, counts = array_line(p.stdout, first)
        assert "%d_[0-999%%10]" % first in line, line
        assert sum(counts.values()) == 1000, (counts, line)
        assert counts.get("pending", 0) >= 990, (counts, line)
        for j in before:
            rows = [l for l in p.stdout.splitlines() if l.split()[:1] == [str(j)]]
            assert len(rows) == 1 and "running" in rows[0], (j, p.stdout)
        assert "more match" not in p.stderr, p.stderr
        # the members one by one: the newest page, and the listing says more match
        p = c.cli("jobs", "--array", str(first), check=True)
        assert "%d_999" % first in p.stdout and "%d_899" % first not in p.stdout, p.stdout
        assert "more match" in p.stderr, p.stderr
        c.cli("cancel", str(first), check=True)


def test_a_cpu_limited_array_says_what_holds_it():
    """`--gpus 0 --array ...%N` where the node has room for fewer CPU-only
    ranks than N: the held members say what holds the array, not that N run."""
    with cluster(agents=1, gpus=1, name="arraycpu") as c:
        cpus = c.nodes()[0]["cpus"]
        if cpus > 48:
            print("SKIP: %d CPUs would need %d sleepers" % (cpus, cpus))
            return
        limit = cpus + 5
        first = run(c, "--gpus", "0", "--array", "0-%d%%%d" % (cpus + 9, limit), "--",
                    "sleep", "120")
        last = first + cpus + 9
        wait_for(lambda: sum(state(c, first + k) == "running" for k in range(cpus)) == cpus,
                 timeout=60, what="%d members run" % cpus)
        room = "every eligible node runs its limit of %d CPU-only rank%s (1 node)" % (
            cpus, "" if cpus == 1 else "s")
        want = "array %d: %d of its jobs run (limit %%%d); the next in line waits: %s" % (
            first, cpus, limit, room)
        try:
            wait_for(lambda: c.job(last)["reason"] == want, what="the held member's reason")
        except AssertionError:
            raise AssertionError("reason %r, not %r" % (c.job(last)["reason"], want))
        why = c.cli("why", "%d_%d" % (first, cpus + 9), check=True).stdout
        assert want in why and "%d of its jobs run, its limit" % limit not in why, why
        line, counts = array_line(c.cli("jobs", check=True).stdout, first)
        assert counts == {"running": cpus, "pending": 10}, (counts, line)
        assert room in line, line
        c.cli("cancel", str(first), check=True)


def test_cancelling_an_array_prints_one_line():
    with cluster(agents=1, gpus=4, name="arraycancel1") as c:
        first = run(c, "--array", "0-49%4", "--", "sleep", "120")
        wait_for(lambda: sum(state(c, first + k) == "running" for k in range(4)) == 4,
                 what="4 members run")
        p = c.cli("cancel", str(first), check=True)
        assert p.stdout == ("cancelled array %d: 50 of its 50 members; 4 running get SIGTERM, "
                            "SIGKILL after 10s\n" % first), p.stdout
        for k in range(50):
            assert c.wait_job(first + k, timeout=30)["state"] == "cancelled"
        p = c.cli("cancel", str(first), check=True)
        assert p.stdout == ("array %d: all 50 members had already ended; nothing to cancel\n"
                            % first), p.stdout


run_tests([test_after_waits_then_runs_and_why_says_for_which_job,
           test_a_dependency_that_can_never_hold_cancels_with_the_reason,
           test_a_chain_runs_in_order, test_bad_dependencies_are_refused,
           test_array_runs_every_index_at_most_n_at_once,
           test_cancel_an_array_or_one_member_and_a_limit_says_why,
           test_wait_for_an_array_exits_with_its_members_highest_status,
           test_the_listing_shows_jobs_before_a_large_array_with_true_counts,
           test_a_cpu_limited_array_says_what_holds_it,
           test_cancelling_an_array_prints_one_line])
