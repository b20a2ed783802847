#!/usr/bin/env bash
# Launches `loom train` on several processes with OpenMPI's mpirun, with the flags loom needs:
# every rank multi-threaded (--bind-to none), root allowed, more ranks than cores allowed.
#   scripts/train_mpi.sh -np 4 [--hostfile hosts] configs/gpt-kjv.yaml --set parallel.dp=4
# hosts (one line per node, slots = ranks on it):
#   node1 slots=8
#   node2 slots=8
# Every node needs the same loom build and the data at the same path, and run.dir on a shared
# filesystem. Threads per rank default to the node's cores / its ranks (runtime.threads overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${1:-}" = "-np" ] && [ -n "${2:-}" ] || { echo "usage: $0 -np N [--hostfile FILE] CONFIG [--set ...]" >&2; exit 2; }
ranks=$2; shift 2
mpi_args=(-np "$ranks" --bind-to none --oversubscribe -x OMP_NUM_THREADS=1)
if [ "${1:-}" = "--hostfile" ]; then mpi_args+=(--hostfile "$2"); shift 2; fi
[ "$(id -u)" -eq 0 ] && mpi_args+=(--allow-run-as-root)
exec mpirun "${mpi_args[@]}" "$PWD/build/loom" train "$@"
