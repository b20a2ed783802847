// safetensors files come from the internet: damaged or crafted ones are refused with a loom::Error naming
// the file before anything is allocated. Byte-level damage (fuzz_util.h), headers rewritten to lie about
// shapes, dtypes and offsets, and a header claiming a 10 GB tensor read under a 1 GiB address-space limit.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>

#include "core/error.h"
#include "models/safetensors.h"
#include "fuzz_util.h"
#include "test_util.h"

namespace {

// A file with the given JSON header and data bytes.
std::string with_header(const std::string& json, const std::string& data) {
  std::string bytes(8, '\0');
  const uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return bytes + json + data;
}

// Bytes in the tensors read: never more than the file holds.
int64_t tensor_bytes(const loom::SafetensorsFile& file) {
  int64_t total = 0;
  for (const auto& [name, t] : file.tensors) total += t.numel() * static_cast<int64_t>(t.element_size());
  return total;
}

// The header of a valid file: w (4 x 4 F32, 64 bytes) then b (4 F32, 16 bytes).
const std::string kData(80, '\x01');
std::string header(const std::string& w_shape, const std::string& w_dtype = "F32", const std::string& w_offsets = "[0,64]",
                   const std::string& b_offsets = "[64,80]") {
  return R"({"w":{"dtype":")" + w_dtype + R"(","shape":)" + w_shape + R"(,"data_offsets":)" + w_offsets +
         R"(},"b":{"dtype":"F32","shape":[4],"data_offsets":)" + b_offsets + "}}";
}

}  // namespace

TEST_CASE("safetensors fuzz: every damaged file is read within its size or refused naming the file", "[safetensors][fuzz]") {
  const auto dir = loom::test::scratch_dir("safetensors-fuzz");
  torch::manual_seed(3);
  const auto good = loom::safetensors_bytes({{"w", torch::randn({4, 4})}, {"b", torch::randn({4}).to(torch::kBFloat16)}},
                                            {{"format", "pt"}});
  const size_t header_end = 8 + good.find("}}") + 2;
  const int64_t opened = loom::test::fuzz(dir, loom::test::mutations(good, header_end), [&](const std::filesystem::path& path) {
    const auto file = loom::read_safetensors(path);
    CHECK(tensor_bytes(file) <= static_cast<int64_t>(good.size()));
  });
  CHECK(opened > 0);  // flips inside the data (and some in the metadata strings) still read
}

TEST_CASE("safetensors: headers that lie about shapes, dtypes or offsets are refused", "[safetensors][fuzz]") {
  const auto dir = loom::test::scratch_dir("safetensors-lies");
  const auto path = dir / "crafted.safetensors";
  loom::test::write_bytes(path, with_header(header("[4,4]"), kData));
  REQUIRE(loom::read_safetensors(path).tensors.size() == 2);  // the honest header reads
  const std::vector<std::pair<std::string, std::string>> lies = {
      {"10 GB shape", header("[50000,50000]")},
      {"shape product overflows 2^64", header("[4294967296,4294967296,16]")},
      {"shape product wraps to the true size", header("[4611686018427387905,16]")},
      {"dimension beyond int64", header("[18446744073709551615]")},
      {"negative dimension", header("[-4,-4]")},
      {"fractional dimension", header("[4.0,4]")},
      {"dimension as a string", header(R"(["4",4])")},
      {"shape not an array", header("16")},
      {"wider dtype", header("[4,4]", "F64")},
      {"offsets past the data", header("[4,4]", "F32", "[0,64]", "[64,96]")},
      {"offsets reversed", header("[4,4]", "F32", "[64,0]")},
      {"offsets beyond int64", header("[4,4]", "F32", "[0,18446744073709551615]")},
      {"negative offsets", header("[4,4]", "F32", "[-64,0]")},
      {"one offset", header("[4,4]", "F32", "[64]")},
      {"overlapping tensors", header("[4,4]", "F32", "[0,64]", "[48,64]")},
      {"a gap between tensors", header("[2,4]", "F32", "[0,32]")},
      {"data left over", R"({"w":{"dtype":"F32","shape":[4,4],"data_offsets":[0,64]}})"},
      {"entry not an object", R"({"w":[1,2,3]})"},
      {"dtype not a string", R"({"w":{"dtype":7,"shape":[4,4],"data_offsets":[0,64]}})"},
  };
  for (const auto& [what, json] : lies) {
    INFO(what << ": " << json);
    loom::test::write_bytes(path, with_header(json, kData));
    try {
      loom::read_safetensors(path);
      FAIL("read");
    } catch (const loom::Error& e) {
      CHECK_THAT(e.what(), Catch::Contains(path.string()) && Catch::Contains("not a valid safetensors file"));
    }
  }
  // The length field itself: past the file, and past the format's 100 MB limit.
  std::string huge = with_header(header("[4,4]"), kData);
  for (const uint64_t n : {uint64_t{1} << 62, uint64_t{200} << 20}) {
    for (int i = 0; i < 8; ++i) huge[i] = static_cast<char>((n >> (8 * i)) & 0xff);
    loom::test::write_bytes(path, huge);
    CHECK_THROWS_AS(loom::read_safetensors(path), loom::Error);
  }
}

TEST_CASE("safetensors: a header claiming 10 GB allocates nothing of it", "[safetensors][fuzz]") {
  const auto dir = loom::test::scratch_dir("safetensors-alloc");
  const auto path = dir / "crafted.safetensors";
  loom::test::write_bytes(path, with_header(header("[50000,50000]"), kData));
  // A child process with at most 1 GiB more address space than it has: allocating the claimed
  // 50000 x 50000 x 4 bytes fails there (a c10 error: exit 3); the size check refuses the file first (exit 0).
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::ifstream statm("/proc/self/statm");
    uint64_t pages = 0;
    statm >> pages;
    const rlim_t limit = pages * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) + (rlim_t{1} << 30);
    const rlimit rl{limit, limit};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(4);
    try {
      loom::read_safetensors(path);
      _exit(1);
    } catch (const loom::Error& e) {
      _exit(std::string(e.what()).find("10000000000 bytes") != std::string::npos ? 0 : 2);
    } catch (...) {
      _exit(3);
    }
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}
