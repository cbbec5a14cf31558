"""The Python SDK (python/anvil) and the YAML file compile to the same JSON:
examples/workflows/train.py against train.yaml through `anvil wf check
--json`, the compiled form is a fixed point of the compiler, and the SDK's
own errors; then its client against real daemons: a job, a workflow and
its outputs, errors as exceptions."""
import json
import os
import subprocess
import sys

from harness import ANVIL, cluster, run_tests, scratch_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples", "workflows")
sys.path.insert(0, os.path.join(ROOT, "python"))
import anvil  # noqa: E402


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


run_tests([test_sdk_and_yaml_compile_to_the_same_json,
           test_sdk_declares_the_code_a_cached_task_uses_as_the_yaml_does,
           test_sdk_names_needs_and_errors,
           test_the_client_runs_jobs_and_workflows, test_calling_a_workflow_runs_it_here])
