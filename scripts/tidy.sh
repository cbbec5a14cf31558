#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy: bug-finding checks) over every C source.
# Needs a configured build dir for compile_commands.json (default build/asan).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/asan}
command -v clang-tidy >/dev/null || { echo "tidy: clang-tidy not installed, skipped"; exit 0; }
git ls-files 'src/*.c' | xargs -P 2 -n 8 clang-tidy -quiet -p "$build" 2>/dev/null
