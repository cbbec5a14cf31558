"""Idempotent creates (docs/api.md, "Idempotency-Key"): a create committed just
before the server died (killed at a failure point between its commit and its
answer, src/base/failpoint.h) is answered, when the client sends it again with
the same key to the restarted server, with its first answer, and exists once;
the same key with another request is refused, a malformed key is refused, keys
expire and are pruned; every create route honours the key; the CLI and the
Python SDK send a key and retry across a server restart, making one job."""
import hashlib
import http.client
import json
import os
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request

from harness import ANVIL, cluster, run_tests, scratch_dir, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAILPOINT_EXIT = 86  # src/base/failpoint.h
JOB = {"command": ["true"], "gpus": 1}


def call(c, method, path, body=None, key=None, raw=None, extra=None):
    """(status, headers, answer) of one request; the answer's JSON, or None. Raises
    ConnectionError when the answer was lost."""
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(c.url + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + c.token)
    req.add_header("Content-Type",
                   "application/octet-stream" if raw is not None else "application/json")
    if key is not None:
        req.add_header("Idempotency-Key", key)
    for k, v in (extra or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, e.headers, json.loads(e.read() or b"null")
    except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
        raise ConnectionError("no answer: %r" % e)


def replayed(headers):
    return headers.get("Idempotent-Replayed") == "true"


def jobs(c):
    return c.api("GET", "/v1/jobs?state=all")["jobs"]


def killed_at_failpoint(c):
    """The server ended at its failure point, as a crash would end it."""
    assert c.server.wait(20) == FAILPOINT_EXIT, c.log("server.log")
    assert "failpoint" in c.log("server.log")


def restart(c):
    c.server_env = {}
    c.start_server()


def test_submission_retried_after_a_crash_before_the_answer_exists_once():
    with cluster(agents=1, gpus=2, name="idemcrash",
                 server_env={"ANVIL_FAILPOINT": "create.flushed"}) as c:
        try:
            call(c, "POST", "/v1/jobs", JOB, key="submit-1")
            raise AssertionError("the server answered before its failure point")
        except ConnectionError:
            pass
        killed_at_failpoint(c)
        restart(c)
        status, headers, answer = call(c, "POST", "/v1/jobs", JOB, key="submit-1")
        assert status == 201 and replayed(headers), (status, dict(headers), answer)
        assert answer["job"]["id"] == 1 and answer["job"]["command"] == ["true"], answer
        assert [j["id"] for j in jobs(c)] == [1], jobs(c)
        # once more: the same answer, still one job
        status2, headers2, answer2 = call(c, "POST", "/v1/jobs", JOB, key="submit-1")
        assert (status2, answer2) == (status, answer) and replayed(headers2)
        # a new key is a new job
        status, headers, answer = call(c, "POST", "/v1/jobs", JOB, key="submit-2")
        assert status == 201 and not replayed(headers) and answer["job"]["id"] == 2


def test_array_committed_before_its_answer_was_written_is_answered_from_its_jobs():
    """Killed after the jobs' own commit (which holds the key), before the flush that
    writes the answer: the answer is made again from the jobs the key names."""
    body = dict(JOB, array={"indices": [0, 1, 2]})
    with cluster(agents=1, gpus=2, name="idemadmit",
                 server_env={"ANVIL_FAILPOINT": "jobs.admitted"}) as c:
        try:
            call(c, "POST", "/v1/jobs", body, key="array-1")
            raise AssertionError("the server answered before its failure point")
        except ConnectionError:
            pass
        killed_at_failpoint(c)
        restart(c)
        status, headers, answer = call(c, "POST", "/v1/jobs", body, key="array-1")
        assert status == 201 and replayed(headers), (status, answer)
        assert answer["array_job_ids"] == [1, 2, 3], answer
        assert sorted(j["id"] for j in jobs(c)) == [1, 2, 3], jobs(c)


def test_workflow_whose_jobs_committed_before_a_crash_is_found_by_its_key():
    """Killed after the first round's jobs committed (jobs_admit), before the answer:
    the execution was written first with the key, so the restarted server carries it on
    and the retry is answered from it, with no second execution and no second job."""
    wf = {"workflow": compiled("tasks:\n  t: {command: 'true'}\n")}
    with cluster(agents=1, gpus=2, name="idemwf",
                 server_env={"ANVIL_FAILPOINT": "jobs.admitted"}) as c:
        try:
            call(c, "POST", "/v1/workflows", wf, key="wf-crash")
            raise AssertionError("the server answered before its failure point")
        except ConnectionError:
            pass
        killed_at_failpoint(c)
        restart(c)
        status, headers, answer = call(c, "POST", "/v1/workflows", wf, key="wf-crash")
        assert status == 201 and replayed(headers), (status, dict(headers), answer)
        assert answer["workflow"]["id"] == 1, answer
        assert [x["id"] for x in c.api("GET", "/v1/workflows")["workflows"]] == [1]
        wait_for(lambda: c.api("GET", "/v1/workflows/1")["workflow"]["state"] == "succeeded",
                 timeout=60, what="the execution carried on")
        assert len(jobs(c)) == 1, jobs(c)


def test_same_key_with_another_request_is_refused():
    with cluster(agents=1, gpus=2, name="idemother") as c:
        status, _, first = call(c, "POST", "/v1/jobs", JOB, key="k-1")
        assert status == 201, first
        for method, path, body in (("POST", "/v1/jobs", dict(JOB, name="other")),
                                   ("POST", "/v1/workflows",
                                    {"workflow": {"tasks": [{"name": "a",
                                                             "command": ["true"]}]}})):
            status, headers, answer = call(c, method, path, body, key="k-1")
            assert status == 409 and not replayed(headers), (status, answer)
            msg = answer["error"]["message"]
            assert "Idempotency-Key" in msg and "'k-1'" in msg and "another request" in msg, msg
        assert len(jobs(c)) == 1
        assert c.api("GET", "/v1/workflows")["workflows"] == []


def test_malformed_keys_are_refused():
    with cluster(agents=1, gpus=2, name="idembad") as c:
        for key, why in (("", "empty"), ("k" * 256, "longer than 255"),
                         ("two words", "byte 0x20"), ("bell\x07", "byte 0x07")):
            status, _, answer = call(c, "POST", "/v1/jobs", JOB, key=key)
            assert status == 400, (key, status, answer)
            msg = answer["error"]["message"]
            assert "header 'Idempotency-Key'" in msg and why in msg, msg
        status, _, answer = call(c, "POST", "/v1/jobs", JOB, key="k" * 255)
        assert status == 201, answer
        assert len(jobs(c)) == 1


def idem_rows(c, key):
    db = sqlite3.connect(os.path.join(c.state_dir, "anvil.db"), timeout=10)
    try:
        return db.execute("SELECT count(*) FROM idempotency WHERE key = ?", (key,)).fetchone()[0]
    finally:
        db.close()


def test_keys_expire_and_are_pruned():
    with cluster(agents=1, gpus=2, name="idemexpire",
                 server_args=["--idempotency-keep", "2s"]) as c:
        _, _, first = call(c, "POST", "/v1/jobs", JOB, key="short")
        call(c, "POST", "/v1/jobs", JOB, key="forgotten")
        assert idem_rows(c, "forgotten") == 1

        def fresh():
            status, headers, answer = call(c, "POST", "/v1/jobs", JOB, key="short")
            assert status == 201, answer
            return None if replayed(headers) else answer

        # replayed while remembered; a new job once the key has expired
        again = wait_for(fresh, timeout=60, interval=0.2, what="the key to expire")
        assert again["job"]["id"] != first["job"]["id"], again
        # the housekeeping removes the expired row
        wait_for(lambda: idem_rows(c, "forgotten") == 0, timeout=60, what="pruning")
        assert idem_rows(c, "short") == 1  # written again with the new job


def compiled(yaml_text):
    d = scratch_dir("anvil-idem-wf-")
    path = os.path.join(d, "wf.yaml")
    with open(path, "w") as f:
        f.write(yaml_text)
    p = subprocess.run([ANVIL, "wf", "check", "--json", path], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def twice(c, method, path, body=None, key=None, raw=None, want=(200, 201)):
    """Sends the request twice with one key: the second is the first's answer, replayed."""
    s1, h1, a1 = call(c, method, path, body, key=key, raw=raw)
    assert s1 in want and not replayed(h1), (s1, a1)
    s2, h2, a2 = call(c, method, path, body, key=key, raw=raw)
    assert (s2, a2) == (s1, a1) and replayed(h2), (s2, dict(h2), a2)
    return a1


def test_every_create_route_honours_the_key():
    with cluster(agents=1, gpus=2, name="idemroutes") as c:
        # a workflow execution, and the recover of a failed one
        wf = {"workflow": compiled("tasks:\n  t: {command: exit 3}\n")}
        x = twice(c, "POST", "/v1/workflows", wf, key="wf-1")["workflow"]
        assert len(c.api("GET", "/v1/workflows")["workflows"]) == 1
        wait_for(lambda: c.api("GET", "/v1/workflows/%d" % x["id"])["workflow"]["state"]
                 == "failed", timeout=60, what="the execution to fail")
        before = len(jobs(c))
        twice(c, "POST", "/v1/workflows/%d/recover" % x["id"], key="recover-1")
        assert len(jobs(c)) == before + 1, jobs(c)  # its run started again once, not twice

        # an upload by content: the first answer (stored) again
        data = b"checkpoint bytes\n"
        hexd = hashlib.sha256(data).hexdigest()
        put = twice(c, "PUT", "/v1/objects/sha256/" + hexd, raw=data, key="up-1")
        assert put["stored"] is True and put["sha256"] == hexd, put
        # a named put: the repeat of an older save does not put it back over a newer
        twice(c, "PUT", "/v1/objects/ckpt/idem/1", raw=b"older", key="save-1")
        status, _, _ = call(c, "PUT", "/v1/objects/ckpt/idem/1", raw=b"newer", key="save-2")
        assert status == 200
        status, headers, _ = call(c, "PUT", "/v1/objects/ckpt/idem/1", raw=b"older",
                                  key="save-1")
        assert status == 200 and replayed(headers)
        with urllib.request.urlopen(urllib.request.Request(
                c.url + "/v1/objects/ckpt/idem/1",
                headers={"Authorization": "Bearer " + c.token}), timeout=30) as r:
            assert r.read() == b"newer"
        # the same upload key with other bytes: refused
        status, _, answer = call(c, "PUT", "/v1/objects/ckpt/idem/1", raw=b"other",
                                 key="save-1")
        assert status == 409 and "'save-1'" in answer["error"]["message"], answer
        status, _, answer = call(c, "PUT", "/v1/objects/ckpt/idem/1", raw=b"x", key="")
        assert status == 400 and "Idempotency-Key" in answer["error"]["message"], answer

        # a fleet apply and a rollback: a revision each, however often sent
        spec = {"name": "lab", "pools": {"onprem": None},
                "profiles": {"h200": {"gpu": {"model": "NVIDIA H200", "count": 4},
                                      "driver": "550.1"}},
                "groups": {"h": {"pool": "onprem", "profile": "h200", "nodes": "spare-[1-2]"}},
                "queues": {"prod": {"priority": 100}}}
        spec2 = dict(spec, queues={"prod": {"priority": 50}})
        rev = twice(c, "POST", "/v1/fleet/apply", {"spec": spec}, key="apply-1")
        twice(c, "POST", "/v1/fleet/apply", {"spec": spec2}, key="apply-2")
        twice(c, "POST", "/v1/fleet/rollback", {"revision": rev["revision"]}, key="back-1")
        revisions = c.api("GET", "/v1/fleet/revisions")["revisions"]
        assert len(revisions) == 3, revisions


def test_cli_run_retries_across_a_restart():
    with cluster(agents=1, gpus=2, name="idemcli",
                 server_env={"ANVIL_FAILPOINT": "create.flushed"}) as c:
        p = c.cli_popen("run", "--gpus", "1", "--", "true")
        killed_at_failpoint(c)
        restart(c)  # meanwhile the CLI sends the same request again and again
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, out + err
        assert [j["id"] for j in jobs(c)] == [1], (jobs(c), out, err)
        assert "1" in out, out
        # a server that stays away: the CLI gives up after $ANVIL_RETRY_FOR, and says so
        c.kill_server()
        t0 = time.time()
        p = c.cli("run", "--gpus", "1", "--", "true", env={"ANVIL_RETRY_FOR": "1s"})
        assert p.returncode == 3, p.stdout + p.stderr
        assert "cannot reach the server" in p.stderr, p.stderr
        assert "with one Idempotency-Key" in p.stderr, p.stderr
        assert time.time() - t0 < 60
        p = c.cli("run", "--", "true", env={"ANVIL_RETRY_FOR": "soon"})
        assert p.returncode != 0 and "ANVIL_RETRY_FOR" in p.stderr, p.stderr


SDK_SUBMIT = """
import json, sys
sys.path.insert(0, %r)
import anvil
c = anvil.Client(%r, %r)
print(json.dumps(c.submit(["true"], gpus=1)))
"""


def test_sdk_retries_across_a_restart():
    with cluster(agents=1, gpus=2, name="idemsdk",
                 server_env={"ANVIL_FAILPOINT": "create.flushed"}) as c:
        code = SDK_SUBMIT % (os.path.join(ROOT, "python"), c.url, c.token)
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        killed_at_failpoint(c)
        restart(c)
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert json.loads(out)["id"] == 1, out
        assert [j["id"] for j in jobs(c)] == [1], jobs(c)


run_tests([test_submission_retried_after_a_crash_before_the_answer_exists_once,
           test_array_committed_before_its_answer_was_written_is_answered_from_its_jobs,
           test_workflow_whose_jobs_committed_before_a_crash_is_found_by_its_key,
           test_same_key_with_another_request_is_refused,
           test_malformed_keys_are_refused,
           test_keys_expire_and_are_pruned,
           test_every_create_route_honours_the_key,
           test_cli_run_retries_across_a_restart,
           test_sdk_retries_across_a_restart])
