"""The workflow of train.yaml, written with the Python SDK (python/anvil).
Both compile to the same JSON: `anvil wf check --json train.yaml` prints
what `python3 train.py` prints (the tests compare them)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))
from anvil import map_task, task, workflow  # noqa: E402


@task(gpus=0, cpus=8, memory="32Gi", outputs={"shards": "dir"}, cache=True)
def prep(dataset):
    return f"python3 prep.py --src {dataset} --out $ANVIL_OUTPUT_DIR/shards"


@task(gpus=8, nodes=2, gpu_type="h200", checkpoint=True, retries={"count": 2, "backoff": "1m"},
      timeout="12h", outputs={"model": "dir", "loss": "value"})
def train(data, lr, bs, epochs):
    return (f"torchrun --nnodes $NNODES --nproc-per-node $NPROC_PER_NODE train.py "
            f"--data {data} --lr {lr} --bs {bs} "
            f"--epochs {epochs} --ckpt $ANVIL_CHECKPOINT_DIR --out $ANVIL_OUTPUT_DIR")


@task(gpus=1, outputs={"report": "file"})
def evaluate(models):
    return ["python3", "eval.py", "--models", models]


@workflow(name="train-sweep")
def pipeline(dataset="s3://corpus/pages-2026-11", epochs=3):
    p = prep(dataset=dataset)
    t = map_task(train, grid={"lr": [0.0003, 0.0001, 0.00003], "bs": [512, 1024]},
                 concurrency=3)(data=p.outputs.shards, lr=map_task.param("lr"),
                                bs=map_task.param("bs"), epochs=epochs)
    evaluate(models=t.outputs.model)


if __name__ == "__main__":
    print(pipeline.to_json(**dict(a.split("=", 1) for a in sys.argv[1:])))
