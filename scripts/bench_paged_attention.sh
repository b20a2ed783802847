#!/usr/bin/env bash
# One attention layer over the paged KV cache (issue 35): the paged kernel (KVCache::append_and_attend,
# models/paged_decode_attention.h) against what attention did before for several new positions a row: the cache's
# gather (append: index_select over the slots) and SDPA with the causal mask offset by the cache. Prefill chunks,
# speculative verifications and decode steps, float pool, best of 30, milliseconds. Compiles a small program
# against the built libraries (build/, Release) and runs it.
#   scripts/bench_paged_attention.sh     env: BUILD (build), THREADS (2)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}; export THREADS=${THREADS:-2} OMP_WAIT_POLICY=PASSIVE
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
torch=$(sed -nE 's/^Torch_DIR:[A-Z]*=(.*)\/share\/cmake\/Torch$/\1/p' "$BUILD/CMakeCache.txt")
cat > "$out/bench.cpp" <<'CPP'
// One attention layer over a paged cache: append_and_attend (the paged kernel) against append (gather) + SDPA with
// the mask attention.cpp builds; prefill chunks, verifications, decode steps. Best of R, milliseconds.
#include <torch/torch.h>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include "models/paged_kv_cache.h"
using Clock = std::chrono::steady_clock;
int main() {
  torch::NoGradGuard ng;
  torch::set_num_threads(std::getenv("THREADS") ? std::atoi(std::getenv("THREADS")) : 2);
  struct Case { const char* name; int64_t B, T, history, H, D, K = 0; };
  const Case cases[] = {{"prefill chunk B=4 T=64 after 448", 4, 64, 448, 8, 64},
                        {"prefill chunk B=1 T=128 after 0", 1, 128, 0, 8, 64},
                        {"verify B=16 T=5 after 256", 16, 5, 256, 8, 64},
                        {"verify B=1 T=5 after 100", 1, 5, 100, 4, 64},
                        {"decode B=64 T=1 after 40", 64, 1, 40, 4, 64},
  {"decode GQA K=2 B=64 T=1 after 200", 64, 1, 200, 8, 64, 2}, {"verify GQA K=2 B=16 T=3 after 200", 16, 3, 200, 8, 64, 2}};
  for (const auto& c : cases) {
    const int64_t B = c.B, T = c.T, H = c.H, K = c.K > 0 ? c.K : c.H, D = c.D, R = 30;
    double best[2] = {1e9, 1e9};
    for (int way = 0; way < 2; ++way) {
      loom::KVBlockPool pool(1, B * ((c.history + T) / 16 + 2), 16, K, D, torch::kFloat);
      std::vector<loom::BlockTable> tables(B);
      std::vector<loom::BlockTable*> rows;
      for (auto& t : tables) rows.push_back(&t);
      if (c.history > 0) {
        auto caches = loom::paged_kv_caches(pool, rows);
        caches[0].append(torch::randn({B, K, c.history, D}), torch::randn({B, K, c.history, D}));
      }
      const auto q = torch::randn({B, H, T, D}), k = torch::randn({B, K, T, D}), v = torch::randn({B, K, T, D});
      for (int r = 0; r < R; ++r) {
        for (auto& t : tables) t.length = c.history;  // the same forward again
        auto caches = loom::paged_kv_caches(pool, rows);
        const auto start = Clock::now();
        torch::Tensor o;
        if (way == 0) {
          loom::KVCache::DecodeAttention how;
          how.scale = 0.125;
          o = caches[0].append_and_attend(q, k, v, how);
        } else {  // attention.cpp before: gather, causal mask offset by the cache (and padding: none here), SDPA
          auto [kk, vv] = caches[0].append(k, v);
          const int64_t S = kk.size(2);
          const auto rowsT = torch::arange(S - T, S).unsqueeze(1), cols = torch::arange(S).unsqueeze(0);
          const auto mask = (rowsT - cols >= 0).view({1, 1, T, S});
          o = at::scaled_dot_product_attention(q, kk, vv, T == 1 ? std::optional<at::Tensor>() : mask, 0.0, false,
                                               0.125, true);
        }
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
        best[way] = std::min(best[way], ms);
      }
    }
    std::cout << c.name << " (H=" << c.H << ", D=" << c.D << "): paged kernel " << best[0] << " ms, gather + SDPA "
              << best[1] << " ms, x" << best[1] / best[0] << std::endl;
  }
}
CPP
c++ -O3 -DNDEBUG -fopenmp -std=c++17 -w -I. -isystem "$BUILD/fmt-first" -isystem "$torch/include" \
  -isystem "$torch/include/torch/csrc/api/include" -c "$out/bench.cpp" -o "$out/bench.o"
# the unit tests' link line: loom's libraries and LibTorch's
eval "c++ -O3 -fopenmp $out/bench.o -o $out/bench $BUILD/libloom_models.a $BUILD/libloom_parallel.a $BUILD/libloom_core.a \
  $(sed -E 's/.*libloom_core.a//' "$BUILD/tests/CMakeFiles/loom_tests.dir/link.txt")"
LD_LIBRARY_PATH="$torch/lib:${LD_LIBRARY_PATH:-}" "$out/bench"
