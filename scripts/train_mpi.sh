#!/usr/bin/env bash
# Launches `loom train` on several processes with OpenMPI's mpirun, with the flags loom needs:
# every rank multi-threaded (--bind-to none), root allowed, more ranks than cores allowed, and TCP
# keepalives on mpirun's control connections so that a node that drops off the network ends the job in
# about 20 s instead of hanging for TCP's many-minute retransmission timeout.
#   scripts/train_mpi.sh -np 4 [--hostfile hosts] configs/gpt-kjv.yaml --set parallel.dp=4
# hosts (one line per node, slots = ranks on it):
#   node1 slots=8
#   node2 slots=8
# LOOM names another loom binary (default build/loom). More mpirun options go in MPIRUN_ARGS, for example the network to use between nodes:
#   MPIRUN_ARGS="--mca btl_tcp_if_include 10.0.0.0/24 --mca oob_tcp_if_include 10.0.0.0/24" scripts/train_mpi.sh ...
# Every node needs the same loom build and the data at the same path, and run.dir on a shared
# filesystem. Threads per rank default to the node's cores / its ranks (runtime.threads overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${1:-}" = "-np" ] && [ -n "${2:-}" ] || { echo "usage: $0 -np N [--hostfile FILE] CONFIG [--set ...]" >&2; exit 2; }
ranks=$2; shift 2
mpi_args=(-np "$ranks" --bind-to none --oversubscribe -x OMP_NUM_THREADS=1
          --mca oob_tcp_keepalive_time 10 --mca oob_tcp_keepalive_intvl 5 --mca oob_tcp_keepalive_probes 2)
if [ "${1:-}" = "--hostfile" ]; then mpi_args+=(--hostfile "$2"); shift 2; fi
[ "$(id -u)" -eq 0 ] && mpi_args+=(--allow-run-as-root)
# shellcheck disable=SC2206
mpi_args+=(${MPIRUN_ARGS:-})
exec mpirun "${mpi_args[@]}" "${LOOM:-$PWD/build/loom}" train "$@"
