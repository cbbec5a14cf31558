"""`anvil run` like sbatch: a job runs in the directory it was submitted
from (or --cwd), with the submitter's environment (--export ALL, the
default; NONE; or a list), never the client's token nor per-host variables;
`anvil show` lists the exported names, never their values; a working
directory the node lacks fails the rank at once, saying so."""
import json
import os
import re
import tempfile

from harness import ApiError, cluster, run_tests

SECRET = "s3cr3t-value-4f9a"


def test_runs_in_the_submit_directory_with_the_environment():
    with cluster(agents=1, gpus=2, name="runenv") as c:
        work = tempfile.mkdtemp(prefix="anvil-it-proj-", dir=c.dir)
        with open(os.path.join(work, "data.txt"), "w") as f:
            f.write("rows-from-the-project-dir\n")
        # cd DIR && anvil run --wait -- cat data.txt
        p = c.cli("run", "--wait", "--", "sh", "-c", "cat data.txt; pwd", cwd=work)
        assert p.returncode == 0, (p.stdout, p.stderr)
        assert "rows-from-the-project-dir" in p.stdout, p.stdout
        assert os.path.realpath(p.stdout.split()[-1]) == os.path.realpath(work), p.stdout
        # --cwd, relative to where anvil run is
        os.makedirs(os.path.join(work, "sub"))
        p = c.cli("run", "--wait", "--cwd", "sub", "--", "pwd", cwd=work)
        assert p.returncode == 0, p.stderr
        assert os.path.realpath(p.stdout.strip()) == os.path.realpath(os.path.join(work, "sub"))

        # export LR=3e-4; anvil run --wait -- sh -c 'echo $LR'
        env = {"LR": "3e-4", "OTHER": "other-value", "HOSTNAME": "the-laptop"}
        show_lr = 'echo "LR=[$LR] OTHER=[$OTHER] HOSTNAME=[$HOSTNAME]"'
        p = c.cli("run", "--wait", "--", "sh", "-c", show_lr, env=env)
        assert p.returncode == 0, p.stderr
        assert "LR=[3e-4] OTHER=[other-value]" in p.stdout, p.stdout
        assert "the-laptop" not in p.stdout, p.stdout  # never exported: per host
        p = c.cli("run", "--wait", "--export", "NONE", "--", "sh", "-c", show_lr, env=env)
        assert p.returncode == 0, p.stderr
        assert "LR=[] OTHER=[]" in p.stdout, p.stdout
        p = c.cli("run", "--wait", "--export", "LR", "--", "sh", "-c", show_lr, env=env)
        assert p.returncode == 0, p.stderr
        assert "LR=[3e-4] OTHER=[]" in p.stdout, p.stdout
        # --env applies on top of the export
        p = c.cli("run", "--wait", "--export", "LR", "-e", "LR=1e-3", "--", "sh", "-c", show_lr,
                  env=env)
        assert "LR=[1e-3]" in p.stdout, p.stdout
        # the variables anvil sets per rank win over exported ones
        p = c.cli("run", "--wait", "--", "sh", "-c", 'echo "cvd=[$CUDA_VISIBLE_DEVICES]"',
                  env={"CUDA_VISIBLE_DEVICES": "7,8"})
        assert p.returncode == 0 and "cvd=[0]" in p.stdout, p.stdout


def test_token_is_never_exported_and_show_lists_names_only():
    with cluster(agents=1, gpus=1, name="runtoken") as c:
        # the client takes its token from ANVIL_TOKEN here, and must not pass it on
        env = {"ANVIL_TOKEN": c.token, "LR": "3e-4", "WANDB_API_KEY": SECRET}
        p = c.cli("run", "--wait", "--", "sh", "-c", 'echo "tok=[$ANVIL_TOKEN]"; env', env=env)
        assert p.returncode == 0, p.stderr
        assert "tok=[]" in p.stdout and c.token not in p.stdout, p.stdout
        assert "WANDB_API_KEY=" + SECRET in p.stdout, p.stdout  # the ranks get the values
        jid = int(p.stderr.split("submitted job ")[1].split()[0])
        p = c.cli("run", "--export", "ANVIL_TOKEN", "--", "true", env=env)
        assert p.returncode == 2 and "ANVIL_TOKEN is never exported" in p.stderr, p.stderr

        show = c.cli("show", str(jid), check=True).stdout
        listed = re.search(r"^  exported   (.*(?:\n {13}\S.*)*)", show, re.M)
        assert listed and {"LR", "WANDB_API_KEY"} <= set(listed.group(1).split()), show
        assert "ANVIL_TOKEN" not in listed.group(1), show
        assert SECRET not in show and "3e-4" not in show, show
        job = json.loads(c.cli("show", "--json", str(jid), check=True).stdout)["job"]
        assert "LR" in job["exported"] and "WANDB_API_KEY" in job["exported"], job
        assert "ANVIL_TOKEN" not in job["exported"], job["exported"]
        assert job["env"] == {}, job["env"]
        listing = json.dumps(c.api("GET", "/v1/jobs"))
        assert SECRET not in listing and c.token not in json.dumps(job), listing
        # the token is not stored either, and the names outlive a restart
        c.kill_server()
        c.start_server()
        for name in os.listdir(c.state_dir):  # the database, its WAL
            if name.startswith("anvil.db"):
                with open(os.path.join(c.state_dir, name), "rb") as f:
                    assert c.token.encode() not in f.read(), name
        job = c.job(jid)
        assert "LR" in job["exported"] and SECRET not in json.dumps(job), job


def test_missing_cwd_fails_the_rank_saying_so():
    with cluster(agents=1, gpus=1, name="runcwd") as c:
        gone = os.path.join(c.dir, "only-on-the-laptop")
        p = c.cli("run", "--wait", "--cwd", gone, "--", "true")
        assert p.returncode == 127, (p.returncode, p.stdout, p.stderr)
        why = "failed to start: working directory %s does not exist on this node" % gone
        assert why in p.stderr, p.stderr
        # the rank's stderr log says it too: once as the job's reason, once from the log
        assert p.stderr.count("working directory %s does not exist" % gone) >= 2, p.stderr
        jid = int(p.stderr.split("submitted job ")[1].split()[0])
        job = c.job(jid)
        assert job["state"] == "failed" and job["reason"] == "rank 0 on node-1 " + why, job
        show = c.cli("show", str(jid), check=True).stdout
        assert "rank 0 on node-1 " + why in show, show
        # the directory anvil run is started in counts the same: here one
        # that is gone by the time the rank starts
        blocker = c.submit(["sleep", "60"], gpus=1)
        work = tempfile.mkdtemp(prefix="anvil-it-gone-", dir=c.dir)
        p = c.cli("run", "--", "true", cwd=work, check=True)
        jid = int(p.stdout.split("submitted job ")[1].split()[0])
        assert c.job(jid)["cwd"] == work and c.job(jid)["state"] == "pending"
        os.rmdir(work)
        c.api("POST", "/v1/jobs/%d/cancel" % blocker["id"])
        job = c.wait_job(jid)
        assert job["state"] == "failed", job
        assert job["reason"] == ("rank 0 on node-1 failed to start: working directory %s "
                                 "does not exist on this node" % work), job
        # the API refuses a relative cwd and an exported name env lacks
        for body, needle in [
                ({"cwd": "data"}, "field 'cwd': 'data' is not an absolute path"),
                ({"env": {"A": "1"}, "exported": ["B"]},
                 "field 'exported[0]': 'B' is not a variable of field 'env'"),
                ({"env": {"A": "1"}, "exported": ["A", "A"]}, "field 'exported[1]': 'A' is "
                 "listed twice")]:
            try:
                c.submit(["true"], **body)
                raise AssertionError("accepted %r" % body)
            except ApiError as e:
                assert e.status == 400 and needle in e.body["error"]["message"], (body, e)


if __name__ == "__main__":
    run_tests([test_runs_in_the_submit_directory_with_the_environment,
               test_token_is_never_exported_and_show_lists_names_only,
               test_missing_cwd_fails_the_rank_saying_so])
