#!/usr/bin/env bash
# The NVML backend against real NVIDIA GPUs, in one short run: starts a server
# and one agent with --gpu-backend nvml on this machine, and records what the
# GPU layer reports (inventory and topology, samples, health, node check,
# DCGM-compatible metrics, a 1-GPU job's environment) next to nvidia-smi's own
# view, into OUT_DIR (default $OUT, else ./gpu-check-out). Exits non-zero when
# the agent sees no GPU or a step fails. Results are recorded in docs/gpu.md.
#
#   scripts/gpu-check.sh [ANVIL_BINARY]
#   GPU_BACKEND=nvml:/path/libfake_nvml.so scripts/gpu-check.sh   # rehearsal without a GPU
set -euo pipefail

ANVIL=$(readlink -f "${1:-build/release/anvil}")
OUT_DIR=${OUT_DIR:-${OUT:-$PWD/gpu-check-out}}
BACKEND=${GPU_BACKEND:-nvml}
mkdir -p "$OUT_DIR"
# Ranks run as the account anvil-job with a /tmp of their own (docs/security.md):
# the job below runs in a directory open to it, and the account is made if missing.
WORK=$(mktemp -d /var/tmp/anvil-gpu-check.XXXXXX)
chmod 0755 "$WORK"
getent passwd anvil-job >/dev/null ||
  useradd --system --user-group --no-create-home --shell /usr/sbin/nologin anvil-job
export ANVIL_HOME="$WORK/home"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  cp "$WORK"/*.log "$OUT_DIR/" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
step() { printf '== %s\n' "$*" | tee -a "$OUT_DIR/steps.txt"; }

step "host: $(uname -r), $(nproc) CPUs, backend $BACKEND"
{ nvidia-smi || true; nvidia-smi topo -m || true;
  nvidia-smi -q -d ECC,TEMPERATURE,POWER,CLOCK,PERFORMANCE,ROW_REMAPPER || true; } \
  >"$OUT_DIR/nvidia-smi.txt" 2>&1

"$ANVIL" server --state-dir "$WORK/state" --listen 127.0.0.1:0 --home "$ANVIL_HOME" \
  >"$WORK/server.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do [ -s "$ANVIL_HOME/client.json" ] && break; sleep 0.1; done
SERVER=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["server"])' \
  "$ANVIL_HOME/client.json")
"$ANVIL" agent --server "$SERVER" --join-token-file "$WORK/state/join.token" --name gpu-node \
  --work-dir "$WORK/agent" --gpu-backend "$BACKEND" --gpu-sample-ms 500 \
  >"$WORK/agent.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do "$ANVIL" nodes --json 2>/dev/null | grep -q gpu-node && break; sleep 0.2; done

step "anvil nodes / nodes show"
"$ANVIL" nodes | tee "$OUT_DIR/nodes.txt"
"$ANVIL" nodes show gpu-node >"$OUT_DIR/node-show.txt" 2>&1 || true
"$ANVIL" nodes --json >"$OUT_DIR/nodes.json"
curl -sf -H "Authorization: Bearer $(cat "$WORK/state/admin.token")" \
  "$SERVER/v1/nodes/gpu-node" >"$OUT_DIR/node.json"
GPUS=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["node"]["gpus_total"])' \
  "$OUT_DIR/node.json")
step "GPUs seen by the agent: $GPUS"
[ "$GPUS" -gt 0 ] || { echo "gpu-check: the agent sees no GPU"; tail -20 "$WORK/agent.log"; exit 1; }

sleep 2 # a few samples
AGENT=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["node"]["agent_url"])' \
  "$OUT_DIR/node.json")
SECRET=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["secret"])' \
  "$WORK/agent/node.json")
step "agent /v1/gpus and /metrics"
curl -sf -H "Authorization: Bearer $SECRET" "$AGENT/v1/gpus" >"$OUT_DIR/gpus.json"
curl -sf "$AGENT/metrics" >"$OUT_DIR/agent-metrics.prom"
grep '^DCGM_FI_DEV_' "$OUT_DIR/agent-metrics.prom" | head -40 | tee "$OUT_DIR/dcgm-head.txt"
if command -v promtool >/dev/null; then
  promtool check metrics <"$OUT_DIR/agent-metrics.prom" >"$OUT_DIR/promtool.txt" 2>&1 || true
fi

step "anvil node check"
"$ANVIL" node check gpu-node | tee "$OUT_DIR/node-check.txt" || true
step "a 1-GPU job"
(cd "$WORK" && "$ANVIL" run --gpus 1 --name env --wait -- sh -c \
  'id; env | grep -E "^(CUDA|NVIDIA|NCCL)_" | sort; nvidia-smi -L 2>/dev/null || true') \
  | tee "$OUT_DIR/job.txt"
step "done: $OUT_DIR"
