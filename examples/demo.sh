#!/usr/bin/env bash
# The anvil demo: a local cluster (anvil up), a real workload, a summary,
# then the cluster stops and the script exits 0. Run through `make demo`.
set -euo pipefail

ANVIL=$(readlink -f "${1:-build/release/anvil}")
export ANVIL_HOME
ANVIL_HOME=$(mktemp -d /tmp/anvil-demo.XXXXXX)
anvil() { "$ANVIL" "$@"; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

UP_LOG="$ANVIL_HOME/up.out"
"$ANVIL" up --port 0 --agents 2 --gpus-per-agent 4 --gpu-model H200 >"$UP_LOG" 2>&1 &
UP=$!
stop_cluster() {
  if kill -0 "$UP" 2>/dev/null; then
    kill -INT "$UP"
    wait "$UP" || true
  fi
}
trap stop_cluster EXIT

for _ in $(seq 1 200); do
  grep -q 'anvil up: ready' "$UP_LOG" 2>/dev/null && break
  kill -0 "$UP" 2>/dev/null || { cat "$UP_LOG"; echo "demo: anvil up failed"; exit 1; }
  sleep 0.1
done
grep -q 'anvil up: ready' "$UP_LOG" || { cat "$UP_LOG"; echo "demo: anvil up did not get ready"; exit 1; }
cat "$UP_LOG"

say "The cluster: 2 nodes x 4 simulated H200 GPUs"
anvil nodes

say "1. A 2-node x 4-GPU gang job; each rank prints what it was given"
anvil run --name gang --gpus 4 --nodes 2 --wait -- sh -c \
  'echo "rank $NODE_RANK of $NNODES on $ANVIL_NODE: MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT WORLD_SIZE=$WORLD_SIZE NPROC_PER_NODE=$NPROC_PER_NODE CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"'
GANG=$(anvil jobs --json | python3 -c 'import json,sys; print([j["id"] for j in json.load(sys.stdin)["jobs"] if j["name"]=="gang"][0])')
echo "-- rank 1's log:"
anvil logs --rank 1 "$GANG"

say "2. A 2-GPU job that will be cancelled, then ten single-GPU jobs compete for the other 6 GPUs"
anvil run --name doomed --gpus 2 -- sh -c 'echo "doomed job started, forking a child"; sleep 600 & wait'
DOOMED=$(anvil jobs --json | python3 -c 'import json,sys; print([j["id"] for j in json.load(sys.stdin)["jobs"] if j["name"]=="doomed"][0])')
for i in $(seq 1 10); do
  anvil run --name "single-$i" --gpus 1 -- sh -c 'echo "single job $ANVIL_JOB_ID on $ANVIL_NODE GPU $CUDA_VISIBLE_DEVICES"; sleep 1'
done
echo "-- while they compete (four wait for a GPU):"
anvil jobs --state active
LAST=$(anvil jobs --json | python3 -c 'import json,sys; print([j["id"] for j in json.load(sys.stdin)["jobs"] if j["name"]=="single-10"][0])')
echo "-- anvil why $LAST:"
anvil why "$LAST"

say "3. Cancel job $DOOMED: SIGTERM to its process group, its GPUs go to the waiting jobs"
anvil cancel "$DOOMED"

for _ in $(seq 1 300); do
  [ -z "$(anvil jobs --state active --json | python3 -c 'import json,sys; print(" ".join(str(j["id"]) for j in json.load(sys.stdin)["jobs"]))')" ] && break
  sleep 0.1
done

say "4. A GPU fault (simulated XID 48: uncorrectable ECC) under a running job"
anvil run --name victim --gpus 1 -- sh -c 'echo "attempt $ANVIL_ATTEMPT on $ANVIL_NODE GPU $CUDA_VISIBLE_DEVICES"; sleep 3'
VICTIM=$(anvil jobs --json | python3 -c 'import json,sys; print([j["id"] for j in json.load(sys.stdin)["jobs"] if j["name"]=="victim"][0])')
for _ in $(seq 1 100); do
  WHERE=$(anvil show --json "$VICTIM" | python3 -c 'import json,sys; j=json.load(sys.stdin)["job"]; r=j["attempts"][-1]["ranks"][0] if j.get("attempts") else None; print("%s %d" % (r["node"], r["gpus"][0]) if j["state"]=="running" else "")')
  [ -n "$WHERE" ] && break
  sleep 0.1
done
set -- $WHERE
echo "-- job $VICTIM runs on $1 GPU $2; injecting XID 48 there"
anvil node fault "$1" --gpu "$2" xid xid=48
for _ in $(seq 1 100); do
  [ "$(anvil show --json "$VICTIM" | python3 -c 'import json,sys; print(json.load(sys.stdin)["job"]["state"])')" = succeeded ] && break
  sleep 0.1
done
echo "-- the GPU was quarantined, the job requeued onto a healthy GPU, and the GPU reset once idle:"
anvil show "$VICTIM" | sed -n '/^attempt/,$p'
anvil events -n 10
anvil node check "$1"

say "Summary: what ran where"
anvil jobs --state all
anvil show "$DOOMED"
echo
anvil queue ls

say "Stopping the cluster"
stop_cluster
trap - EXIT
echo "demo: done (state and logs kept in $ANVIL_HOME)"
