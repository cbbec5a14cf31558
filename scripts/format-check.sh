#!/usr/bin/env bash
# Fails when a C file differs from what .clang-format says it should be.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "format-check: clang-format not installed, skipped"; exit 0; }
bad=0
for f in $(git ls-files 'src/*.c' 'src/*.h' 'tests/*.c' 'tests/*.h'); do
  if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "format-check: $f is not formatted (run: make format)"; bad=1
  fi
done
exit $bad
