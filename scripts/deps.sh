#!/usr/bin/env bash
# Installs the Debian packages anvil needs to build and test, if missing.
# Idempotent and quiet when everything is there. Run as root (or via sudo).
set -euo pipefail

packages=(
  gcc make cmake ninja-build pkg-config   # toolchain
  libmicrohttpd-dev    # HTTP server of every daemon
  libevent-dev         # HTTP client for http:// (every process: CLI, agent, server-to-agent)
  libcurl4-openssl-dev # HTTP client for https:// and the agent's sync long poll
  libjansson-dev       # JSON
  libsqlite3-dev       # the server's state database
  libssl-dev           # libcrypto: hashing
  libyaml-dev          # workflow files (src/flow/)
  python3              # Debian's python3 runs the integration tests
  python3-venv         # venv and its offline pip: the SDK's documented install (test_sdk)
  procps               # ps/pgrep, used by tests
  prometheus           # promtool: tests validate the /metrics exposition
  graphviz             # dot: the lineage test reads `anvil lineage --dot` back as a graph
  python3-distributed  # Dask: the head/worker integration test runs a real Dask cluster
  openmpi-bin          # Open MPI's mpirun and orted: the MPI integration test (anvil run --mpi)
  python3-mpi4py       # its MPI program, an allreduce across two nodes
  git                  # code bundles list a work tree's tracked files (src/cli/bundle.c)
  tar                  # deterministic archives: bundles, outputs, checkpoints (base/tarball.h)
  openssh-client       # ssh: `anvil fleet bootstrap` installs agents over it
  openssh-server       # sshd: the bootstrap integration test runs one per network namespace
                       # (its own config, key and address); a system sshd it may start is not used
)
extra=("$@")   # callers may add packages (bench: slurm-wlm munge)

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo

# The account ranks run as (anvil agent --rank-user, docs/security.md): no
# login, no home. The fleet's bootstrap makes it on every node the same way.
if ! getent passwd anvil-job >/dev/null; then
  echo "deps: creating the account anvil-job (ranks run as it)"
  $SUDO useradd --system --user-group --no-create-home --shell /usr/sbin/nologin anvil-job
fi

missing=()
for p in "${packages[@]}" "${extra[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
