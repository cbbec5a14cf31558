"""The Python SDK (python/anvil) and the YAML file compile to the same JSON:
examples/workflows/train.py against train.yaml through `anvil wf check
--json`, the compiled form is a fixed point of the compiler, and the SDK's
own errors; then its client against real daemons: a job, a workflow and
its outputs, errors as exceptions; a workflow submitted from Python carries
the working tree as its code bundle, the very one `anvil wf run` sends
(same key, same cache entries), in a plain tree and in a git work tree; and
the install that docs/workflows.md documents, run as written, offline."""
import json
import os
import re
import shutil
import subprocess
import sys

from harness import ANVIL, cluster, run_tests, scratch_dir, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples", "workflows")
sys.path.insert(0, os.path.join(ROOT, "python"))
import anvil  # noqa: E402

# the binary the SDK runs (to pack code bundles, to run locally) is the one under test
os.environ["ANVIL_BIN"] = ANVIL


def yaml_compiled(*args, stdin=None):
    p = subprocess.run([ANVIL, "wf", "check", "--json"] + list(args), capture_output=True,
                       text=True, input=stdin, timeout=30)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def sdk_compiled(*args):
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, "train.py")] + list(args),
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_sdk_and_yaml_compile_to_the_same_json():
    yaml_form = yaml_compiled(os.path.join(EXAMPLES, "train.yaml"))
    assert sdk_compiled() == yaml_form
    assert sdk_compiled("epochs=5") == yaml_compiled("-i", "epochs=5",
                                                     os.path.join(EXAMPLES, "train.yaml"))
    # the compiled form compiles to itself (JSON is YAML), and passes the check
    assert yaml_compiled("-", stdin=json.dumps(yaml_form)) == yaml_form


def test_sdk_declares_the_code_a_cached_task_uses_as_the_yaml_does():
    @anvil.task(outputs={"n": "value"}, cache={"code": ["gen.py", "lib/"]})
    def gen():
        return "python3 gen.py > $ANVIL_OUTPUT_DIR/n"

    @anvil.task(cache={"code": "bundle", "version": "2"})
    def whole():
        return "true"

    @anvil.workflow(name="code")
    def wf():
        gen()
        whole()

    yaml_form = yaml_compiled("-", stdin="""
name: code
tasks:
  gen:
    command: python3 gen.py > $ANVIL_OUTPUT_DIR/n
    outputs: {n: value}
    cache: {code: [gen.py, lib/]}
  whole: {command: "true", cache: {code: bundle, version: "2"}}
""")
    assert wf.compile() == yaml_form, (wf.compile(), yaml_form)
    assert yaml_form["tasks"][0]["cache"] == {"code": ["gen.py", "lib/"]}, yaml_form


def test_sdk_names_needs_and_errors():
    @anvil.task(outputs={"o": "file"})
    def make():
        return "echo made > $ANVIL_OUTPUT_DIR/o"

    @anvil.task
    def use(x, y):
        return ["cat", x, y]

    @anvil.workflow
    def wf(greeting="hi"):
        a = make()
        b = make()
        use(x=a.outputs.o, y=b.outputs.o)

    spec = wf.compile()
    assert [t["name"] for t in spec["tasks"]] == ["make", "make-2", "use"], spec
    assert spec["tasks"][2]["needs"] == ["make", "make-2"], spec
    assert spec["tasks"][2]["command"] == ["cat", "{{ tasks.make.outputs.o }}",
                                           "{{ tasks.make-2.outputs.o }}"]
    assert spec["inputs"] == {"greeting": "hi"} and spec["name"] == "wf"
    # the compiler agrees
    assert yaml_compiled("-", stdin=json.dumps(spec)) == spec
    try:
        wf.compile(nope="1")
        raise AssertionError("an unknown override was accepted")
    except KeyError as e:
        assert "no such input" in str(e)

    @anvil.workflow
    def bad():
        make().outputs.missing  # noqa: B018

    try:
        bad.compile()
        raise AssertionError("an unknown output was accepted")
    except AttributeError as e:
        assert "has no output 'missing'" in str(e)

    @anvil.workflow
    def needs_default(x):
        make()

    try:
        needs_default.compile()
        raise AssertionError("an input without a default was accepted")
    except TypeError as e:
        assert "needs a default" in str(e)
    # outside a workflow a task is its function: the command, to test by hand
    assert use("a", "b") == ["cat", "a", "b"]
    assert anvil.compile_units(memory="8Gi", duration="90s") == (8 << 30, 90000)


def test_the_client_runs_jobs_and_workflows():
    with cluster(agents=1, gpus=2, name="sdkclient") as c:
        cl = anvil.Client(server=c.url, token=c.token)
        job = cl.submit("echo hello from $ANVIL_JOB_ID", gpus=1)
        assert cl.wait_job(job["id"], timeout=30)["state"] == "succeeded"
        assert cl.logs(job["id"]).strip() == "hello from %d" % job["id"]

        @anvil.task(gpus=1)
        def step(n):
            return f"test {n} -gt 0"

        @anvil.workflow(name="sdk-flow")
        def flow(n=1):
            a = step(n=n)
            step(n=n)

        x = cl.run_workflow(flow)
        x = cl.wait(x["id"], timeout=60)
        assert x["state"] == "succeeded", x
        assert [r["label"] for r in x["run_list"]] == ["step", "step-2"], x
        x = flow.submit(client=cl, n=0)
        x = cl.wait(x["id"], timeout=60)
        assert x["state"] == "failed", x
        assert [e["id"] for e in cl.executions()][:2] == [x["id"], x["id"] - 1]
        try:
            cl.execution(99)
            raise AssertionError("found")
        except anvil.AnvilError as e:
            assert e.status == 404 and e.code == "not_found", e
        try:
            cl.submit(["true"], gpus=-1)
            raise AssertionError("accepted")
        except anvil.AnvilError as e:
            assert e.status == 400 and "gpus" in e.message, e
        # the client file the CLI uses is found on its own
        os.environ["ANVIL_HOME"] = c.home
        try:
            assert anvil.Client().job(job["id"])["state"] == "succeeded"
        finally:
            del os.environ["ANVIL_HOME"]


def test_calling_a_workflow_runs_it_here():
    @anvil.task(outputs={"n": "value"}, cache=True)
    def count(words):
        return f"echo {words} | wc -w > $ANVIL_OUTPUT_DIR/n"

    @anvil.task(outputs={"twice": "value"})
    def double(n):
        return f"echo $(( {n} * 2 )) > $ANVIL_OUTPUT_DIR/twice"

    @anvil.workflow(name="local-sdk")
    def flow(words="a b c"):
        c = count(words=words)
        double(n=c.outputs.n)

    work = scratch_dir("anvil-sdk-local-")
    old = {k: os.environ.get(k) for k in ("ANVIL_HOME", "ANVIL_BIN")}
    # the code is the current directory: the local state must live elsewhere
    os.environ.update(ANVIL_HOME=scratch_dir("anvil-sdk-home-"), ANVIL_BIN=ANVIL)
    cwd = os.getcwd()
    os.chdir(work)
    try:
        x = flow()
        assert x["state"] == "succeeded", x
        assert anvil.outputs_of(x) == {"count": {"n": "3"}, "double": {"twice": "6"}}, x
        x = flow(words="a b c d e")
        assert anvil.outputs_of(x)["double"] == {"twice": "10"}, x
        x = flow()  # count comes from the local cache
        assert [r["state"] for r in x["run_list"]] == ["cached", "succeeded"], x
        @anvil.task
        def fail():
            return "exit 3"

        @anvil.workflow(name="bad")
        def bad():
            fail()

        try:
            bad()
            raise AssertionError("a failing workflow returned")
        except anvil.WorkflowFailed as e:
            assert e.execution["state"] == "failed", e.execution
    finally:
        os.chdir(cwd)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ---- the code bundle of a workflow submitted from Python ----

# The task's program, from the working tree: reads a file of the tree and
# says whether the file .anvilignore (or git) leaves out came along.
GEN_PY = r'''
import os
words = open(os.path.join("data", "words.txt")).read().split()
left_out = os.path.exists("notes.txt")
with open(os.path.join(os.environ["ANVIL_OUTPUT_DIR"], "n"), "w") as f:
    f.write("%d words, notes %s" % (len(words), "bundled" if left_out else "left out"))
'''


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def working_tree(parent, git):
    """A tree with gen.py and its data, and notes.txt that the bundle must
    leave out: through .anvilignore, or (git) by not being tracked."""
    d = os.path.join(parent, "git-tree" if git else "plain-tree")
    write(os.path.join(d, "gen.py"), GEN_PY)
    write(os.path.join(d, "data", "words.txt"), "one two three\n")
    if git:
        subprocess.run(["git", "init", "-q", d], check=True)
        subprocess.run(["git", "-C", d, "add", "gen.py", "data/words.txt"], check=True)
    else:
        write(os.path.join(d, ".anvilignore"), "notes.txt\n")
    write(os.path.join(d, "notes.txt"), "not for the cluster\n")
    return d


@anvil.task(gpus=0, outputs={"n": "value"}, cache=True)
def gen():
    return "python3 gen.py"


@anvil.workflow(name="from-the-tree")
def from_the_tree():
    gen()


def the_run(x):
    (r,) = x["run_list"]
    return r


def cli_run(c, spec, cwd):
    """`anvil wf run --wait` of the compiled form (JSON is YAML), from cwd as a
    user runs it: the tree it packs is the directory it is run in."""
    path = os.path.join(c.dir, "from-the-tree.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    p = c.cli("wf", "run", "--wait", path, cwd=cwd, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    xid = int(re.search(r"workflow (\d+) \(", p.stdout).group(1))
    return c.api("GET", "/v1/workflows/%d" % xid)["workflow"]


def test_submitting_from_python_sends_the_working_tree():
    """The task runs `python3 gen.py`: it succeeds only when the tree came
    along as the bundle. Submitted from the tree's directory, as a user runs
    the script there; then `anvil wf run` from the same directory sends the
    same bundle (the same key) and its run is answered from the cache the
    SDK's run filled. code=None sends none, and the task cannot find its
    script; bundle= sends a key stored already; a tree with a link out of
    it, or no binary to pack it, is an error before anything is submitted."""
    with cluster(agents=1, gpus=1, name="sdkbundle") as c:
        cl = anvil.Client(server=c.url, token=c.token)
        trees = scratch_dir("anvil-sdk-trees-")
        cwd = os.getcwd()
        keys = {}
        for git in (False, True):
            tree = working_tree(trees, git)
            os.chdir(tree)
            try:
                x = cl.wait(from_the_tree.submit(client=cl)["id"], timeout=120)
            finally:
                os.chdir(cwd)
            r = the_run(x)
            assert x["state"] == "succeeded", (x, c.log("node-1.log"))
            assert r["outputs"]["n"]["value"] == "3 words, notes left out", r
            assert re.fullmatch(r"sha256/[0-9a-f]{64}", x.get("bundle", "")), x
            # the CLI, in the same directory: the same bundle, so a cache hit
            y = cli_run(c, from_the_tree.compile(), tree)
            assert y["bundle"] == x["bundle"], (x["bundle"], y["bundle"], git)
            assert the_run(y)["state"] == "cached", the_run(y)
            # and `anvil wf bundle`, which the SDK runs, says the same
            p = c.cli("wf", "bundle", cwd=tree, check=True)
            assert p.stdout == x["bundle"] + "\n", (p.stdout, x["bundle"])
            keys[git] = x["bundle"]
        assert keys[True] != keys[False], "the git tree's bundle is the plain tree's"

        # code="DIR" from elsewhere: the same tree, the same key
        assert cl.bundle(tree) == x["bundle"]
        x2 = cl.wait(from_the_tree.submit(client=cl, code=tree)["id"], timeout=120)
        assert x2["bundle"] == x["bundle"] and the_run(x2)["state"] == "cached", x2

        # no code: the task runs in the agent's directory, without its script
        x = cl.wait(from_the_tree.submit(client=cl, code=None, no_cache=True)["id"],
                    timeout=120)
        assert "bundle" not in x or not x["bundle"], x
        assert x["state"] == "failed", x
        err = cl.logs(the_run(x)["job_id"], stream="stderr")
        assert "gen.py" in err, err

        # a bundle stored already, by key
        key = cl.bundle(os.path.join(trees, "plain-tree"))
        x = cl.wait(from_the_tree.submit(client=cl, bundle=key, no_cache=True)["id"],
                    timeout=120)
        assert x["bundle"] == key == keys[False] and x["state"] == "succeeded", x

        # a tree the CLI refuses to pack: its reason, and nothing submitted
        bad = os.path.join(trees, "bad-tree")
        write(os.path.join(bad, "gen.py"), GEN_PY)
        os.symlink("/etc/passwd", os.path.join(bad, "pw"))
        before = len(cl.executions(limit=100))
        try:
            from_the_tree.submit(client=cl, code=bad)
            raise AssertionError("a tree with a link out of it was submitted")
        except anvil.AnvilError as e:
            assert e.code == "bundle", e
            assert "'pw' is a symbolic link to '/etc/passwd'" in e.message, e.message
            assert "code=None" in e.message, e.message
        os.environ["ANVIL_BIN"] = os.path.join(trees, "no-such-anvil")
        try:
            from_the_tree.submit(client=cl, code=tree)
            raise AssertionError("submitted without a binary to pack the bundle")
        except anvil.AnvilError as e:
            assert e.code == "bundle" and "ANVIL_BIN" in e.message, e
        finally:
            os.environ["ANVIL_BIN"] = ANVIL
        assert len(cl.executions(limit=100)) == before


# ---- the documented install ----

def documented_install():
    """The sh block of docs/workflows.md's "The Python SDK" that installs it."""
    with open(os.path.join(ROOT, "docs", "workflows.md")) as f:
        doc = f.read()
    section = doc.split("\n## The Python SDK\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    block = next((b for b in blocks if "pip install" in b), None)
    assert block and "pip install ./python" in block, blocks
    return block


def test_the_documented_install_works_offline():
    """docs/workflows.md's install lines, run as written by bash from the
    checkout's root, as on a fresh Debian 12 machine without a package
    index: Debian's python3 first on PATH, no pip configuration, and pip
    told to use no index (so a build that needs one fails here too, on a
    machine that has one). The package is then imported from the virtual
    environment, not from the checkout; `pip install -e ./python` (the docs
    name it) gives the checkout itself."""
    block = documented_install()
    home = scratch_dir("anvil-sdk-install-")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV"))}
    env.update(HOME=home, PATH="/usr/bin:/bin", PIP_CONFIG_FILE=os.devnull,
               PIP_NO_INDEX="1", PYTHONDONTWRITEBYTECODE="1")
    p = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, "%s\n%s\n%s" % (block, p.stdout, p.stderr)
    venvs = [os.path.join(r, "bin", "python") for r, dirs, _ in os.walk(home)
             if "pyvenv.cfg" in os.listdir(r)]
    assert len(venvs) == 1, (venvs, block)
    # the example, run by the venv's python from elsewhere: the installed package
    probe = ("import anvil, runpy, sys; print(anvil.__file__, file=sys.stderr); "
             "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")
    q = subprocess.run([venvs[0], "-c", probe, os.path.join(EXAMPLES, "train.py")], cwd="/",
                       env=env, capture_output=True, text=True, timeout=60)
    assert q.returncode == 0, q.stderr
    where = q.stderr.strip().splitlines()[0]
    venv = os.path.dirname(os.path.dirname(venvs[0]))
    assert where.startswith(venv + "/") and "site-packages" in where, where
    assert json.loads(q.stdout) == sdk_compiled()
    # the editable install the docs mention: the checkout's own files
    pip = os.path.join(os.path.dirname(venvs[0]), "pip")
    e = subprocess.run([pip, "install", "-e", "./python"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=240)
    assert e.returncode == 0, e.stdout + e.stderr
    q = subprocess.run([venvs[0], "-c", "import anvil; print(anvil.__file__)"], cwd="/",
                       env=env, capture_output=True, text=True, timeout=60)
    assert q.stdout.strip() == os.path.join(ROOT, "python", "anvil", "__init__.py"), q


run_tests([test_sdk_and_yaml_compile_to_the_same_json,
           test_sdk_declares_the_code_a_cached_task_uses_as_the_yaml_does,
           test_sdk_names_needs_and_errors,
           test_the_client_runs_jobs_and_workflows, test_calling_a_workflow_runs_it_here,
           test_submitting_from_python_sends_the_working_tree,
           test_the_documented_install_works_offline])
