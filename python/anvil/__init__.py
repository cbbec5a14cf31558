"""anvil: workflows written as Python, compiled to the JSON the API takes.

The same workflow can be written as a YAML file (docs/workflows.md) or as
code here; both compile to one JSON form, checked the same way (the tests
compare the two). Standard library only, Python 3.9+.

    from anvil import task, workflow, map_task

    @task(gpus=0, cpus=8, memory="32Gi", outputs={"shards": "dir"}, cache=True)
    def prep(dataset):
        return f"python3 prep.py --src {dataset} --out $ANVIL_OUTPUT_DIR/shards"

    @task(gpus=8, nodes=2, outputs={"model": "dir"})
    def train(data, lr):
        return ["torchrun", "train.py", "--data", data, "--lr", lr]

    @workflow(name="train-sweep")
    def pipeline(dataset="s3://corpus/pages"):
        p = prep(dataset=dataset)
        map_task(train, grid={"lr": [3e-4, 1e-4]})(data=p.outputs.shards, lr=map_task.param("lr"))

    spec = pipeline.compile()          # the compiled form, a dict
    print(pipeline.to_json())

A task function returns its command: a string (run by /bin/sh -c) or a list
(the program and its arguments). It is called once, at compile time, with
placeholders that write themselves as templates: a workflow input becomes
"{{ inputs.NAME }}", a task's output "{{ tasks.T.outputs.K }}" (which makes
the calling task need T), a sweep's parameter "{{ params.P }}".
"""
import json
import re

from .client import AnvilError, Client  # noqa: E402,F401

__all__ = ["task", "workflow", "map_task", "Ref", "compile_units", "Client", "AnvilError",
           "WorkflowFailed", "outputs_of"]


class WorkflowFailed(RuntimeError):
    """A workflow run in-process did not succeed; .execution is what it ended as."""

    def __init__(self, message, execution):
        super().__init__(message)
        self.execution = execution


def outputs_of(execution):
    """{run label: {output: value, or an object's content key}} of an execution."""
    out = {}
    for r in execution.get("run_list", []):
        out[r["label"]] = {k: (o.get("value") if o.get("kind") == "value" else o.get("key"))
                           for k, o in (r.get("outputs") or {}).items()}
    return out

_MEMORY_UNITS = {"": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
                 "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_DURATION_UNITS = {"ms": 1, "s": 1000, "m": 60000, "h": 3600000, "d": 86400000}


def _memory_bytes(v):
    """8Gi, 512M, 1073741824: as the YAML front end reads them."""
    if isinstance(v, int):
        return v
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)([KMGT]i?)?", str(v))
    if not m:
        raise ValueError(f"memory {v!r}: bytes or a size like 512Mi, 8Gi, 16G")
    return int(float(m.group(1)) * _MEMORY_UNITS[m.group(2) or ""])


def _duration_ms(v):
    """90s, 2h, 500ms, or a number of seconds."""
    if isinstance(v, (int, float)):
        return int(v * 1000)
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)(ms|s|m|h|d)?", str(v))
    if not m:
        raise ValueError(f"duration {v!r}: like 90s, 2h or a number of seconds")
    return int(float(m.group(1)) * _DURATION_UNITS[m.group(2) or "s"])


def compile_units(memory=None, duration=None):
    """The YAML shorthands' values, as the compiler reads them (for tests)."""
    return (_memory_bytes(memory) if memory is not None else None,
            _duration_ms(duration) if duration is not None else None)


class Ref(str):
    """A value known at run time, written as its template. It is a str, so
    f-strings and list commands take it as they are."""

    def __new__(cls, template, task=None):
        r = str.__new__(cls, "{{ " + template + " }}")
        r.task = task  # the task whose output this is, or None
        return r


class _Outputs:
    def __init__(self, node):
        self._node = node

    def __getattr__(self, name):
        if name not in self._node.outputs:
            raise AttributeError(f"task {self._node.name!r} has no output {name!r}")
        return Ref(f"tasks.{self._node.name}.outputs.{name}", task=self._node.name)


class _Node:
    """A task placed in a workflow by a call."""

    def __init__(self, name, outputs):
        self.name = name
        self.outputs = outputs or {}
        self.outputs_ref = _Outputs(self)


class _Call:
    """What calling a task in a workflow gives: its outputs by name."""

    def __init__(self, node):
        self.outputs = node.outputs_ref
        self.name = node.name


class _Building:
    current = None


class Task:
    def __init__(self, fn, **opts):
        self.fn = fn
        self.name = fn.__name__.replace("_", "-")
        self.opts = opts

    def __call__(self, *args, _map=None, **kwargs):
        b = _Building.current
        if b is None:  # a plain call outside a workflow: the command itself
            return self.fn(*args, **kwargs)
        return b.add(self, args, kwargs, _map)


def task(fn=None, **opts):
    """@task or @task(gpus=..., nodes=..., cpus=..., memory=..., gpu_type=..., queue=...,
    priority=..., outputs={...}, env={...}, retries=N or {count, backoff}, timeout=...,
    checkpoint=..., cache=bool or {enabled, version, code}, inputs={...}, needs=[...]).
    cache={"code": ["gen.py", "lib/"]} keys the task by those files of the code bundle,
    cache={"code": "bundle"} by all of it; the default is by the files it reads
    (docs/workflows.md, "The task cache")."""
    if fn is not None:
        return Task(fn)
    return lambda f: Task(f, **opts)


class _Mapped:
    def __init__(self, t, grid=None, list=None, concurrency=None):  # noqa: A002
        self.t, self.grid, self.list, self.concurrency = t, grid, list, concurrency

    def __call__(self, *args, **kwargs):
        return self.t(*args, _map=self, **kwargs)


def map_task(t, grid=None, list=None, concurrency=None):  # noqa: A002
    """A sweep of task t: one child per point of grid ({P: [values]}, every combination) or per
    entry of list ([{P: value}]), at most concurrency at once. The task's function reads a
    parameter as map_task.param("P")."""
    return _Mapped(t, grid=grid, list=list, concurrency=concurrency)


map_task.param = lambda name: Ref(f"params.{name}")


def _refs_in(value, found):
    if isinstance(value, Ref) and value.task:
        if value.task not in found:
            found.append(value.task)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _refs_in(v, found)
    elif isinstance(value, dict):
        for v in value.values():
            _refs_in(v, found)
    elif isinstance(value, str):
        for t in re.findall(r"\{\{\s*tasks\.([^.\s]+)\.outputs\.", value):
            if t not in found:
                found.append(t)


class _Builder:
    def __init__(self):
        self.tasks = []
        self.names = set()

    def add(self, t, args, kwargs, mapped):
        name = t.name
        n = 2
        while name in self.names:
            name, n = f"{t.name}-{n}", n + 1
        self.names.add(name)
        o = dict(t.opts)
        node = _Node(name, o.get("outputs"))
        cmd = t.fn(*args, **kwargs)
        spec = {"name": name}
        spec["command"] = ["/bin/sh", "-c", str(cmd)] if isinstance(cmd, str) \
            else [str(c) for c in cmd]
        res = {}
        for k in ("gpus", "nodes", "cpus", "gpu_type"):
            if k in o:
                res[k] = o[k]
        if "memory" in o:
            res["memory_bytes"] = _memory_bytes(o["memory"])
        if res:
            spec["resources"] = res
        for k in ("queue", "priority", "outputs", "env", "checkpoint", "inputs"):
            if k in o:
                spec[k] = o[k]
        if "retries" in o:
            r = o["retries"]
            if isinstance(r, int):
                spec["retries"] = {"count": r}
            else:
                spec["retries"] = {"count": r["count"]}
                if "backoff" in r:
                    spec["retries"]["backoff_ms"] = _duration_ms(r["backoff"])
        if "timeout" in o:
            spec["timeout_ms"] = _duration_ms(o["timeout"])
        if "cache" in o:
            c = o["cache"]
            spec["cache"] = {"enabled": c} if isinstance(c, bool) else dict(c)
        if mapped is not None:
            m = {}
            if mapped.grid is not None:
                m["grid"] = mapped.grid
            if mapped.list is not None:
                m["list"] = mapped.list
            if mapped.concurrency is not None:
                m["concurrency"] = mapped.concurrency
            spec["map"] = m
        needs = list(o.get("needs", []))
        implied = []
        for part in ("command", "env", "inputs"):
            _refs_in(spec.get(part), implied)
        for t2 in implied:
            if t2 not in needs:
                needs.append(t2)
        if needs:
            spec["needs"] = needs
        self.tasks.append(spec)
        return _Call(node)


class Workflow:
    def __init__(self, fn, name=None):
        self.fn = fn
        self.name = name or fn.__name__.replace("_", "-")

    def compile(self, **overrides):
        """The compiled form (a dict), as `anvil wf check --json` prints it for the YAML."""
        import inspect
        params = inspect.signature(self.fn).parameters
        inputs = {}
        for p in params.values():
            if p.default is inspect.Parameter.empty:
                raise TypeError(f"workflow input {p.name!r} needs a default")
            inputs[p.name] = p.default
        for k, v in overrides.items():
            if k not in inputs:
                raise KeyError(f"-i {k}: the workflow has no such input")
            inputs[k] = str(v)
        b = _Builder()
        _Building.current = b
        try:
            self.fn(**{k: Ref(f"inputs.{k}") for k in inputs})
        finally:
            _Building.current = None
        out = {"name": self.name}
        if inputs:
            out["inputs"] = inputs
        out["tasks"] = b.tasks
        return out

    def to_json(self, **overrides):
        return json.dumps(self.compile(**overrides), indent=2)

    def submit(self, client=None, no_cache=False, bundle=None, code=".", **inputs):
        """Runs it on the cluster (POST /v1/workflows) with inputs as -i overrides; returns
        the execution. client: an anvil.Client (default: Client()). The code bundle is the
        directory code (default the current one) packed as `anvil wf run` packs it; code=None
        sends none (`--no-code`), bundle= a key stored already (Client.run_workflow)."""
        from .client import Client
        return (client or Client()).run_workflow(self, no_cache=no_cache, bundle=bundle,
                                                 code=code, **inputs)

    def __call__(self, **inputs):
        """Runs the workflow on this machine, in-process for the caller as flytekit's local
        execution is: `anvil wf run --local` (the anvil binary: $ANVIL_BIN, else `anvil` on
        PATH) with the same engine, templates, cache and outputs as on a cluster, the code
        being the current directory. Returns the execution (a dict: "state", "run_list");
        raises WorkflowFailed when it did not succeed."""
        import os
        import subprocess
        from .client import anvil_binary
        spec = self.compile(**inputs)
        binary = anvil_binary()
        p = subprocess.run([binary, "wf", "run", "--local", "--json", "--code", os.getcwd(),
                            "-"], input=json.dumps(spec), stdout=subprocess.PIPE, text=True)
        try:
            x = json.loads(p.stdout)
        except ValueError:
            raise WorkflowFailed(f"anvil wf run --local exited {p.returncode} without a result",
                                 None) from None
        if x.get("state") != "succeeded":
            raise WorkflowFailed(f"workflow {self.name} {x.get('state')}: {x.get('reason', '')}",
                                 x)
        return x


def workflow(fn=None, name=None):
    """@workflow or @workflow(name="..."): its parameters (each with a default) are the
    workflow's inputs; calling tasks inside it places them."""
    if fn is not None:
        return Workflow(fn)
    return lambda f: Workflow(f, name=name)
