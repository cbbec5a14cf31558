#!/usr/bin/env bash
# sched_compare.sh - the figures for a before/after table of a scheduler change:
# bench/sched_sim on the reference fleet and on 1k nodes, 12 seeds each, the
# full outputs kept, and the lines the table needs printed: per seed (useful
# utilization, 8-16-node waits, preemptions and lost work), the pooled
# 8-16-node waits, the totals line, the reclaim delay and the targets rows.
# Run it on the old scheduler and on the new one and compare the two.
#
#   bench/sched_compare.sh [OUTDIR]   # ~2 min for ref + 1k on one free core
#
# Build first: cmake --preset release && cmake --build build/release -j2 --target sched_sim
# Environment: SCHED_SIM (the binary), SEEDS (12). Exit status 1 if sched_sim
# found a contract violation (its VIOLATION lines are printed too).
set -euo pipefail
cd "$(dirname "$0")/.."
sim=${SCHED_SIM:-build/release/bench/sched_sim}
seeds=${SEEDS:-12}
out=${1:-$(mktemp -d /tmp/sched_compare.XXXXXX)}
if [ ! -x "$sim" ]; then
  echo "sched_compare: $sim is not built; run:" \
    "cmake --preset release && cmake --build build/release -j2 --target sched_sim" >&2
  exit 2
fi
mkdir -p "$out"
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- src bench 2>/dev/null || rev="$rev + uncommitted changes"
rc=0
for sc in ref 1k; do
  f="$out/sched_sim-$sc.txt"
  "$sim" --scenario "$sc" --seeds "$seeds" --no-micro >"$f" 2>&1 || rc=1
  echo "## $sc, $seeds seeds, $rev (full output: $f)"
  echo
  grep -E '^### |^\| seed \||^\| [0-9]+ \||^\| 8-16 nodes \||^anvil over the|^\| (reclaim delay|all|queue prod|queue research|a reclaim for them|the same, from the first reclaim for them|only priority preemption for them) \||^\| (useful GPU utilization >=|lower 8-16-node)|VIOLATION' "$f" || true
  echo
done
exit $rc
