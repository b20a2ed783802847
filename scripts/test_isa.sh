#!/usr/bin/env bash
# The unit tests under restricted CPU instruction sets, so that one machine runs the CPU paths of the others
# (a Xeon with AMX, an AVX-512 EPYC without it, an AVX2-only CPU): ATen's own kernels follow
# ATEN_CPU_CAPABILITY (and loom's with them, core/cpu_kernels.h), oneDNN's (bf16 GEMMs) ONEDNN_MAX_CPU_ISA, MKL's
# (fp32 GEMMs) MKL_ENABLE_INSTRUCTIONS. A setting can only lower what the CPU has: on a CPU without AMX, "no AMX"
# is the native path. Each setting runs the Catch2 binary, then the tensor-parallel and ring-attention cases on 2
# MPI ranks, and prints one line: setting, test cases passed / failed, seconds. Logs: BUILD_DIR/test-isa/. Exit 1
# if any failed.
#   scripts/test_isa.sh                          every setting (3 ATen x 4 GEMM), every unit test
#   scripts/test_isa.sh --ci                     the settings and tests CI runs (tests/CMakeLists.txt: "isa: ...")
#   scripts/test_isa.sh --setting 'ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2' [-- CATCH2 TEST SPEC...]
# Build first (scripts/setup.sh). Each setting takes about as long as the unit suite (a few minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
tests_binary=${LOOM_TESTS:-$build/tests/loom_tests}  # LOOM_TESTS: another build of the binary (say, before a change)
[[ -x $tests_binary ]] || { echo "test_isa.sh: no $tests_binary; build first (bash scripts/setup.sh)" >&2; exit 2; }

aten=("" "ATEN_CPU_CAPABILITY=avx2" "ATEN_CPU_CAPABILITY=default")
gemm=("" "ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16" "ONEDNN_MAX_CPU_ISA=AVX512_CORE MKL_ENABLE_INSTRUCTIONS=AVX512"
      "ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2")
settings=()
for a in "${aten[@]}"; do
  for g in "${gemm[@]}"; do settings+=("$(echo "$a $g" | xargs)"); done
done
# The numeric unit tests: all but those of parsing, files, tokenizers, corpus preparation, weight files (safetensors
# and Hugging Face names, [hf]: their logits checks run the forwards the variants, models and family tests run here), allocation, schedules'
# closed forms in double and process plumbing, whose results do not depend on the CPU's arithmetic.
numeric='~[.]~[config]~[data]~[file_io]~[checkpoint]~[schedule]~[mesh]~[mpi]~[reliability]~[bleu]~[prepare]~[fuzz]'
numeric+='~[safetensors]~[hf]~[tokenizer]~[pairs]~[allocator]'
spec=()
mpi=1
while (($#)); do
  case $1 in
    --ci) settings=("ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2"
                    "ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16"); spec=("$numeric"); shift ;;
    --numeric) spec=("$numeric"); shift ;;
    --setting) settings=("$2"); shift 2 ;;
    --no-mpi) mpi=0; shift ;;
    --) shift; spec=("$@"); break ;;
    *) echo "test_isa.sh: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done

logs=$build/test-isa
mkdir -p "$logs"
export LOOM_SOURCE_DIR=$PWD LOOM_BINARY_DIR=$build OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
status=0
printf '%-80s %8s %8s %8s\n' setting passed failed seconds
for setting in "${settings[@]}"; do
  name=$(echo "${setting:-native}" | tr ' =' '_-')
  start=$SECONDS
  runs=("$logs/$name.log")
  # shellcheck disable=SC2086  # a setting is a list of VAR=value words
  env $setting "$tests_binary" --use-colour no "${spec[@]}" >"$logs/$name.log" 2>&1 && rcs=(0) || rcs=($?)
  if ((mpi)); then
    runs+=("$logs/$name.mpi.log")
    env $setting mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$tests_binary" --use-colour no "[tp],[cp]" \
      >"$logs/$name.mpi.log" 2>&1 && rcs+=(0) || rcs+=($?)
  fi
  # Catch2's summary: "test cases: N | P passed | F failed", or "All tests passed (A assertions in N test cases)";
  # of the MPI run's ranks, the last one's.
  passed=0 failed=0
  for i in "${!runs[@]}"; do
    log=${runs[$i]}
    p=0 f=0
    if line=$(grep -E '^test cases:' "$log" | tail -1); then
      p=$(sed -nE 's/.*\| *([0-9]+) passed.*/\1/p' <<<"$line")
      f=$(sed -nE 's/.*\| *([0-9]+) failed.*/\1/p' <<<"$line")
    elif line=$(grep -E '^All tests passed' "$log" | tail -1); then
      p=$(sed -nE 's/.* in ([0-9]+) test case.*/\1/p' <<<"$line")
    fi
    if ((rcs[i] != 0 && ${f:-0} == 0)); then
      f=1  # no failed case counted, yet it failed: a crash or a hang; the log says how
      echo "  exit status ${rcs[$i]} without a failed test case: $log" >&2
    fi
    passed=$((passed + ${p:-0})) failed=$((failed + ${f:-0}))
  done
  printf '%-80s %8d %8d %8d\n' "${setting:-native}" "$passed" "$failed" $((SECONDS - start))
  ((failed == 0)) || { status=1; grep -hE 'FAILED' -A4 "${runs[@]}" | head -40 | sed 's/^/  /'; }
done
exit $status
