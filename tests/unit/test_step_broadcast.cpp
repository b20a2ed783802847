// Tensor-parallel serving's step messages (serve/step_broadcast.h): a step's adds and cancellations survive the
// wire form exactly (doubles to the last bit, stop strings with any bytes), so a follower's engine gets rank 0's
// requests; a single-process StepLeader passes through to its engine.
#include <catch2/catch.hpp>

#include "serve/step_broadcast.h"

TEST_CASE("step broadcast: a step's ops round-trip exactly through their wire form", "[serve]") {
  loom::EngineOp add;
  add.request.prompt = {5, 0, 60, 7};
  add.request.max_tokens = 33;
  add.request.sampling.temperature = 0.1 + 0.2;  // not a short decimal
  add.request.sampling.top_k = 9;
  add.request.sampling.top_p = 1.0 / 3.0;
  add.request.sampling.seed = 18446744073709551557ull;  // beyond int64
  add.request.stop = {"\n\n", "é\"x", ""};
  add.request.stop_token = 2;
  add.request.stream = true;
  add.request.logprobs = true;
  loom::EngineOp cancel;
  cancel.cancel = true;
  cancel.id = 41;
  bool finish = true;
  const auto ops = loom::decode_engine_ops(loom::encode_engine_ops({add, cancel, add}, false), finish);
  CHECK_FALSE(finish);
  REQUIRE(ops.size() == 3);
  const auto& r = ops[0].request;
  CHECK_FALSE(ops[0].cancel);
  CHECK(r.prompt == add.request.prompt);
  CHECK(r.max_tokens == 33);
  CHECK(r.sampling.temperature == add.request.sampling.temperature);
  CHECK(r.sampling.top_k == 9);
  CHECK(r.sampling.top_p == add.request.sampling.top_p);
  CHECK(r.sampling.seed == add.request.sampling.seed);
  CHECK(r.stop == add.request.stop);
  CHECK(r.stop_token == 2);
  CHECK(r.stream);
  CHECK(r.logprobs);
  CHECK(ops[1].cancel);
  CHECK(ops[1].id == 41);
  CHECK(loom::decode_engine_ops(loom::encode_engine_ops({}, true), finish).empty());
  CHECK(finish);
}
