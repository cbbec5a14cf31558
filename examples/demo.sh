#!/usr/bin/env bash
# The anvil demo: a local cluster (anvil up), a real workload, a summary,
# then the cluster stops and the script exits 0. Run through `make demo`.
set -euo pipefail

REPO=$(pwd)
# Ranks run as the account anvil-job, each with a /tmp of its own
# (docs/security.md): the binary they start (workflow tasks, sessions) and
# the directory jobs run in must be open to that account wherever this
# checkout is (/root is not), so both live in a directory of the demo's.
DEMO=$(mktemp -d /var/tmp/anvil-demo.XXXXXX)
chmod 0755 "$DEMO"
install -m 0755 "$(readlink -f "${1:-build/release/anvil}")" "$DEMO/anvil"
ANVIL="$DEMO/anvil"
export ANVIL_HOME="$DEMO/home"
mkdir -p "$DEMO/work" "$ANVIL_HOME"
cd "$DEMO/work"
anvil() { "$ANVIL" "$@"; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
job_named() {
  anvil jobs --state all --json | python3 -c \
    'import json,sys; print([j["id"] for j in json.load(sys.stdin)["jobs"] if j["name"]==sys.argv[1]][0])' "$1"
}
state_of() {
  anvil show --json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["job"]["state"])'
}
wait_state() { # JOB STATE: up to 30 s
  for _ in $(seq 1 300); do [ "$(state_of "$1")" = "$2" ] && return 0; sleep 0.1; done
  echo "demo: job $1 did not become $2"; anvil show "$1"; exit 1
}

UP_LOG="$ANVIL_HOME/up.out"
# A 5-second minimum runtime instead of 5 minutes, so that step 5's priority
# preemption happens within the demo (docs/scheduling.md says why the
# default is 5 minutes); every other scheduling setting is the default.
"$ANVIL" up --port 0 --agents 2 --gpus-per-agent 4 --gpu-model H200 \
  --preempt-min-runtime 5s >"$UP_LOG" 2>&1 &
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
GANG=$(job_named gang)
echo "-- rank 1's log:"
anvil logs --rank 1 "$GANG"

say "2. A 2-GPU job that will be cancelled, then ten single-GPU jobs compete for the other 6 GPUs"
anvil run --name doomed --gpus 2 -- sh -c 'echo "doomed job started, forking a child"; sleep 600 & wait'
DOOMED=$(job_named doomed)
for i in $(seq 1 10); do
  anvil run --name "single-$i" --gpus 1 -- sh -c 'echo "single job $ANVIL_JOB_ID on $ANVIL_NODE GPU $CUDA_VISIBLE_DEVICES"; sleep 1'
done
echo "-- while they compete (four wait for a GPU):"
anvil jobs --state active
LAST=$(job_named single-10)
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
VICTIM=$(job_named victim)
for _ in $(seq 1 100); do
  WHERE=$(anvil show --json "$VICTIM" | python3 -c 'import json,sys; j=json.load(sys.stdin)["job"]; r=j["attempts"][-1]["ranks"][0] if j.get("attempts") else None; print("%s %d" % (r["node"], r["gpus"][0]) if j["state"]=="running" else "")')
  [ -n "$WHERE" ] && break
  sleep 0.1
done
set -- $WHERE
echo "-- job $VICTIM runs on $1 GPU $2; injecting XID 48 there"
anvil node fault "$1" --gpu "$2" xid xid=48
for _ in $(seq 1 100); do
  [ "$(state_of "$VICTIM")" = succeeded ] && break
  sleep 0.1
done
echo "-- the GPU was quarantined, the job requeued onto a healthy GPU, and the GPU reset once idle:"
anvil show "$VICTIM" | sed -n '/^attempt/,$p'
for _ in $(seq 1 150); do # the simulated reset takes 2 s, once the GPU is idle
  anvil nodes show --json "$1" | python3 -c \
    'import json,sys; n=json.load(sys.stdin)["node"]; sys.exit(any(g["health"]!="healthy" for g in n["gpus"]))' &&
    break
  sleep 0.1
done
anvil events -n 10
anvil node check "$1"

say "5. Priority preemption between equals: an urgent 8-GPU job and a running one"
anvil run --name long --gpus 4 --nodes 2 -- sleep 600
LONG=$(job_named long)
wait_state "$LONG" running
anvil run --name urgent --priority 50 --gpus 4 --nodes 2 -- sh -c 'echo "urgent job on $ANVIL_NODE"; sleep 2'
URGENT=$(job_named urgent)
sleep 1.2
echo "-- anvil why $URGENT (the running job has not had its minimum runtime yet):"
anvil why "$URGENT"
wait_state "$URGENT" running
echo "-- job $LONG was stopped for it and went back to the queue:"
anvil show "$LONG" | sed -n '/^attempt/,$p'
wait_state "$URGENT" succeeded
wait_state "$LONG" running
echo "-- the urgent job is done; job $LONG runs again as attempt 2:"
anvil jobs --state active
anvil cancel "$LONG"
wait_state "$LONG" cancelled

say "6. Quota reclaim: team a borrows team b's idle quota, team b takes it back"
anvil queue set research --borrowing yes --quota a=4 --quota b=4
for i in $(seq 1 8); do
  # each ignores SIGTERM, so it takes its whole grace (3 s) to stop
  anvil run --name "a-$i" --queue research --team a --grace 3s --gpus 1 -- \
    sh -c "trap '' TERM; sleep 600"
done
for _ in $(seq 1 300); do
  [ "$(anvil jobs --state running --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["jobs"]))')" = 8 ] && break
  sleep 0.1
done
echo "-- team a runs 8 jobs on its quota of 4: four are borrowed"
anvil jobs --state active
anvil run --name b-1 --queue research --team b --gpus 2 -- sh -c 'echo "team b got its GPUs back"; sleep 1'
B=$(job_named b-1)
sleep 1.2
echo "-- anvil why $B:"
anvil why "$B"
wait_state "$B" succeeded
VICTIM=
for i in $(seq 1 8); do
  J=$(job_named "a-$i")
  anvil show --json "$J" | python3 -c \
    'import json,sys; sys.exit(json.load(sys.stdin)["job"]["attempts"][0]["state"] != "preempted")' &&
    VICTIM=$J && break
done
[ -n "$VICTIM" ] || { echo "demo: no job of team a was reclaimed"; exit 1; }
echo "-- a reclaimed job of team a:"
anvil show "$VICTIM" | sed -n '/^attempt/,$p'
anvil queue ls
for i in $(seq 1 8); do anvil cancel "$(job_named "a-$i")" >/dev/null; done

say "7. Dependencies and an array, as sbatch --dependency and --array"
anvil run --name prep -- sh -c 'echo "prep done"; sleep 1'
PREP=$(job_named prep)
OUT=$(anvil run --name sweep --after "$PREP" --array 0-5%3 -- sh -c 'echo "sweep point $ANVIL_ARRAY_INDEX"')
echo "$OUT"
SWEEP=$(echo "$OUT" | sed -n 's/^submitted array \([0-9]*\).*/\1/p')
echo "-- anvil why $SWEEP:"
anvil why "$SWEEP"
wait_state "$PREP" succeeded
for _ in $(seq 1 300); do
  [ "$(anvil jobs --array "$SWEEP" --state active --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["jobs"]))')" = 0 ] && break
  sleep 0.1
done
anvil jobs --state all --limit 8

say "8. A workflow: checked before anything runs, then run, then run again from the cache"
anvil wf check "$REPO/examples/workflows/train.yaml"
printf 'tasks:\n  a: {command: "echo {{ inputs.lr }}", retires: 3}\n' > "$ANVIL_HOME/broken.yaml"
anvil wf check "$ANVIL_HOME/broken.yaml" || true
anvil wf run --wait --code "$REPO" "$REPO/examples/workflows/demo.yaml"
WF=$(anvil wf ls --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["workflows"][0]["id"])')
anvil wf show "$WF"
echo "-- the same again: every task answered from the cache, nothing runs"
anvil wf run --wait --code "$REPO" "$REPO/examples/workflows/demo.yaml"
echo "-- another input: prep and what uses its output run again"
anvil wf run --wait --code "$REPO" -i n=500 "$REPO/examples/workflows/demo.yaml"

say "Summary: what ran where"
anvil jobs --state all
anvil show "$DOOMED"
echo
anvil queue ls

say "Stopping the cluster"
stop_cluster
trap - EXIT
echo "demo: done (state and logs kept in $ANVIL_HOME)"
