#include "train/checkpoint.h"

#include <spdlog/spdlog.h>

#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <map>

#include "core/error.h"
#include "core/fault_injection.h"
#include "core/file_io.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/tensor_parallel.h"
#include "train/checkpoint_reshard.h"
#include "train/checkpoint_weights.h"
#include "train/optimizer_state.h"

namespace loom {
namespace fs = std::filesystem;
namespace {

constexpr const char* kManifest = "manifest.json";
// 2: optimizer state by parameter range (train/optimizer_state.h); 3: the weights too (checkpoint_weights.h);
// 4: expert parallelism's groups fold dp x cp (parallel/mesh.h), so under cp a shard rank's experts are not
// those of format 3 (whose ep groups were at one cp position): those are read by range from every file.
constexpr int kFormat = 4;
constexpr int kOldestResumable = 2;

// The shard holding this rank's state: the ranks holding the same parameters (dp x cp) share the one
// written by the first of them, unless each holds its own part of the optimizer state; then the shard's
// "dp" is the rank's place in ZeRO's shard group (dp x cp, its DP rank when cp is 1; under hybrid sharding
// cp x dp_shard), written by the first of its replicas.
std::string shard_name(int64_t dp, const Mesh& mesh) { return shard_file_name(dp, mesh.coords()); }
// Under expert parallelism the ranks of an ep group hold different experts: each writes its own file, as
// under ZeRO (the dense parameters then whole in each, the experts by range of their whole tensors).
bool per_rank_files(const Mesh& mesh, bool sharded_optimizer) { return sharded_optimizer || mesh.ep() > 1; }
std::string shard_name(const Mesh& mesh, bool per_shard_rank) {
  return shard_name(per_shard_rank ? mesh.coord(kShardAxes) : 0, mesh);
}
bool writes_shard(const Mesh& mesh, bool per_shard_rank) {
  return mesh.coord(per_shard_rank ? kReplicaAxes : kDataParallelAxes) == 0;
}

// The size of an axis in a manifest's layout (written as MeshShape::named_sizes() plus "zero"): an axis
// a checkpoint does not name is one its writer did not have, of size 1.
int64_t saved_size(const nlohmann::json& layout, const char* axis) { return layout.value(axis, int64_t{1}); }

OptimizerLayout optimizer_layout(const CheckpointParts& parts) {
  if (parts.optimizer_slices.empty()) return whole_parameter_layout(*parts.optimizer);
  return {parts.optimizer, parts.optimizer_slices};
}

// What a shard stores of the weights and a load fills: the optimizer's tensors (this rank's part of the
// fp32 values), or the model's parameters whole for an inference-only load.
WeightLayout weights_of(const CheckpointParts& parts) {
  if (parts.optimizer == nullptr) return weight_layout(parts.model, nullptr);
  const auto optimizer = optimizer_layout(parts);
  return weight_layout(parts.model, &optimizer);
}

// At most 18 digits: a step number that std::stoll cannot overflow on.
bool is_step_name(const std::string& name) {
  return !name.empty() && name.size() <= 18 &&
         std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::vector<int64_t> checkpoint_steps(const fs::path& run_dir) {
  std::vector<int64_t> steps;
  const auto root = run_dir / "checkpoints";
  if (fs::exists(root) && !fs::is_directory(root))
    throw Error(root.string() + " is not a directory: the run keeps its checkpoints there; move it away");
  if (!fs::is_directory(root)) return steps;
  for (const auto& entry : fs::directory_iterator(root)) {
    const auto name = entry.path().filename().string();
    if (entry.is_directory() && is_step_name(name)) steps.push_back(std::stoll(name));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

namespace {

torch::Tensor scalar(int64_t v) { return torch::tensor({v}, torch::kLong); }

}  // namespace

std::string shard_file_name(int64_t shard_rank, const MeshCoords& coords) {
  return "shard-" + shard_coords_name(shard_rank, coords) + ".pt";
}

std::string shard_file_name(int64_t shard_rank, int64_t tp, int64_t pp) {
  MeshCoords coords;
  coords[MeshAxis::kTp] = tp;
  coords[MeshAxis::kPp] = pp;
  return shard_file_name(shard_rank, coords);
}

fs::path checkpoint_dir(const fs::path& run_dir, int64_t step) {
  return run_dir / "checkpoints" / std::to_string(step);
}

namespace {

// The device of the model's tensors (CPU for a model without any).
torch::Device model_device(const torch::nn::Module& model) {
  const auto parameters = model.parameters();
  return parameters.empty() ? torch::Device(torch::kCPU) : parameters.front().device();
}

// `generator` is a handle to a global generator, shared with every thread that draws from it.
void set_generator_state(at::Generator generator, const torch::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

// Collective: true on every rank when `ok` is true on every rank, so all ranks fail together.
bool all_ranks_ok(Communicator& world, bool ok) {
  auto failures = torch::tensor({ok ? 0 : 1}, torch::kInt);
  world.all_reduce(failures);
  return failures.item<int>() == 0;
}

// The sizes of a sharded optimizer's tensors in order (one per gradient bucket): two runs with the same DP
// size cut the optimizer state the same way only if these agree (parallel.bucket_mb may have changed).
torch::Tensor optimizer_partition(const CheckpointParts& parts) {
  std::vector<int64_t> sizes;
  for (const auto& group : parts.optimizer->param_groups())
    for (const auto& p : group.params()) sizes.push_back(p.numel());
  return torch::tensor(sizes, torch::kLong);
}

// This rank's RNG states by checkpoint key: the default generators' ("rng.cpu"; on a GPU, where dropout draws,
// "rng.cuda" too) and the TP stream's ("rng.tp.<device>").
std::map<std::string, torch::Tensor> own_rng_states(const CheckpointParts& parts) {
  std::map<std::string, torch::Tensor> states;
  states["rng.cpu"] = at::detail::getDefaultCPUGenerator().get_state();
  if (const auto device = model_device(parts.model); device.is_cuda())
    states["rng.cuda"] = at::globalContext().defaultGenerator(device).get_state();
  if (parts.tp_rng != nullptr)
    for (const auto& [device, rng_state] : parts.tp_rng->states()) states["rng.tp." + device] = rng_state;
  return states;
}

// The key of CP rank `cp_rank`'s RNG state `key`: rank 0 keeps the key of a run without CP.
std::string cp_rng_key(int64_t cp_rank, const std::string& key) {
  return cp_rank == 0 ? key : "cp" + std::to_string(cp_rank) + "." + key;
}

// Collective over the CP group: the RNG states a shard keeps. Every CP rank draws its own dropout masks
// (seed_dropout, train/task.h) but only one rank of dp x cp writes a shard, so every rank gets the states of
// all, each under cp_rng_key.
std::map<std::string, torch::Tensor> rng_states_of_cp_group(const Mesh& mesh, const CheckpointParts& parts) {
  const auto own = own_rng_states(parts);
  if (mesh.cp() == 1) return own;
  std::vector<torch::Tensor> pieces;
  for (const auto& [key, rng_state] : own) pieces.push_back(rng_state.to(torch::kCPU).contiguous().view(-1));
  const auto blob = torch::cat(pieces);
  auto& group = mesh.host_group(kCpAxes);
  auto lengths = torch::empty({mesh.cp()}, torch::kLong);
  group.all_gather(torch::tensor({blob.numel()}, torch::kLong), lengths);
  if (!(lengths == blob.numel()).all().item<bool>())
    throw Error("context-parallel ranks hold RNG states of different sizes (" +
                c10::str(lengths.sizes()) + "): they do not run the same model");
  auto all = torch::empty({mesh.cp() * blob.numel()}, blob.options());
  group.all_gather(blob, all);
  std::map<std::string, torch::Tensor> states;
  for (int64_t r = 0; r < mesh.cp(); ++r) {
    int64_t offset = r * blob.numel();
    for (const auto& [key, rng_state] : own) {
      states[cp_rng_key(r, key)] = all.narrow(0, offset, rng_state.numel()).clone();
      offset += rng_state.numel();
    }
  }
  return states;
}

void write_shard(const fs::path& path, const CheckpointParts& parts, const TrainState& state,
                 const std::map<std::string, torch::Tensor>& rng_states) {
  torch::serialize::OutputArchive shard;
  write_weights(shard, weights_of(parts));
  if (parts.optimizer != nullptr) write_optimizer_state(shard, optimizer_layout(parts), parts.model);
  if (parts.optimizer != nullptr && parts.sharded_optimizer) shard.write("optimizer.partition", optimizer_partition(parts));
  if (parts.loss_scaler != nullptr) shard.write("loss_scaler", parts.loss_scaler->state());
  for (const auto& [key, rng_state] : rng_states) shard.write(key, rng_state);
  shard.write("state.step", scalar(state.step));
  shard.write("state.tokens", scalar(state.tokens));
  shard.write("state.elapsed_s", torch::tensor({state.elapsed_s}, torch::kDouble));
  shard.write("state.skipped_steps", scalar(state.skipped_steps));
  shard.write("state.bad_streak", scalar(state.bad_streak));
  if (!state.tokens_by_source.empty())
    shard.write("state.tokens_by_source", torch::tensor(state.tokens_by_source, torch::kLong));
  // Serialised in memory and written by loom's own checked I/O: LibTorch's file writer aborts the
  // process when the disk fills up, instead of reporting it.
  std::string bytes;
  shard.save_to([&bytes](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  write_file_atomic(path, bytes);
}

// What one pipeline stage holds: the names of its parameters and buffers, and how its tensor-parallel
// parameters are cut.
nlohmann::json stage_record(const torch::nn::Module& model) {
  nlohmann::json names = nlohmann::json::array(), tp = nlohmann::json::object();
  for (const auto& p : model.named_parameters()) names.push_back(p.key());
  for (const auto& b : model.named_buffers()) names.push_back(b.key());
  for (const auto& [name, layout] : shard_layouts(model)) tp[name] = {{"dim", layout.dim}, {"sections", layout.sections}};
  return {{"names", names}, {"tensor_parallel", tp}};
}

// Collective over the PP group of rank 0 (dp 0, tp 0): rank 0 gets every stage's record, in stage order
// (sent as JSON text, its length first); the other ranks get nothing.
std::vector<nlohmann::json> gather_stage_records(const Mesh& mesh, const torch::nn::Module& model) {
  if (mesh.coord(kDataParallelAxes) != 0 || mesh.coord(MeshAxis::kTp) != 0) return {};
  auto& group = mesh.host_group(MeshAxis::kPp);
  if (!mesh.first_stage()) {
    const std::string text = stage_record(model).dump();
    auto bytes = torch::empty({static_cast<int64_t>(text.size())}, torch::kByte);
    std::memcpy(bytes.data_ptr(), text.data(), text.size());
    group.send(torch::tensor({bytes.numel()}, torch::kLong), 0);
    group.send(bytes, 0);
    return {};
  }
  std::vector<nlohmann::json> records = {stage_record(model)};
  for (int peer = 1; peer < group.size(); ++peer) {
    auto length = torch::empty({1}, torch::kLong);
    group.recv(length, peer);
    auto bytes = torch::empty({length.item<int64_t>()}, torch::kByte);
    group.recv(bytes, peer);
    records.push_back(nlohmann::json::parse(std::string(static_cast<const char*>(bytes.data_ptr()), bytes.numel())));
  }
  return records;
}

void write_manifest(const fs::path& dir, const Config& config, const Mesh& mesh, const TrainState& state,
                    const std::vector<nlohmann::json>& stages) {
  write_file_atomic(dir / "config.yaml", to_yaml(config));
  nlohmann::json manifest;
  manifest["format"] = kFormat;
  manifest["step"] = state.step;
  manifest["tokens"] = state.tokens;
  manifest["layout"] = nlohmann::json::object();
  for (const auto& [axis, size] : mesh.shape().named_sizes()) manifest["layout"][axis] = size;
  manifest["layout"]["zero"] = static_cast<int>(config.parallel.zero);
  // How each tensor-parallel parameter is cut into the tp shards (the others are whole in every shard),
  // and which parameters each pipeline stage holds (so that another layout finds them).
  manifest["tensor_parallel"] = nlohmann::json::object();
  manifest["pipeline"] = {{"layers", stage_layers(config.model.pipeline_layers(), mesh.pp(), config.parallel.pp_layers)},
                          {"names", nlohmann::json::array()}};
  for (const auto& stage : stages) {
    manifest["tensor_parallel"].update(stage.at("tensor_parallel"));
    manifest["pipeline"]["names"].push_back(stage.at("names"));
  }
  for (const auto& entry : fs::directory_iterator(dir)) {
    const auto name = entry.path().filename().string();
    manifest["files"][name] = {{"bytes", fs::file_size(entry.path())}, {"crc32", crc32_file(entry.path())}};
  }
  write_file_atomic(dir / kManifest, manifest.dump(2) + "\n");
  fsync_path(dir);
}

}  // namespace

// Collective over the mesh's world. Data- and context-parallel replicas hold identical model, optimizer and
// RNG state, so only rank 0 of dp x cp of each (tp, pp) position writes a shard (with ZeRO every rank of the
// shard group, of the first replica); rank 0 then writes the config and the manifest and renames the
// directory into place.
void save_checkpoint(const fs::path& run_dir, const Config& config, const Mesh& mesh, const CheckpointParts& parts,
                     const TrainState& state) {
  const auto final_dir = checkpoint_dir(run_dir, state.step);
  const auto tmp_dir = run_dir / "checkpoints" / (".tmp-" + std::to_string(state.step));
  auto& world = mesh.world();
  const bool leader = mesh.rank() == 0;
  std::string error;
  auto attempt = [&error](const std::function<void()>& write) {
    try {
      write();
    } catch (const std::exception& e) {
      error = e.what();
    }
  };
  if (leader) attempt([&] {
      fs::remove_all(tmp_dir);
      fs::create_directories(tmp_dir);
    });
  bool ok = all_ranks_ok(world, error.empty());
  const auto rng_states = ok ? rng_states_of_cp_group(mesh, parts) : std::map<std::string, torch::Tensor>{};
  const bool per_rank = per_rank_files(mesh, parts.sharded_optimizer);
  if (ok && writes_shard(mesh, per_rank))
    attempt([&] { write_shard(tmp_dir / shard_name(mesh, per_rank), parts, state, rng_states); });
  inject_save_faults(state.step, mesh.rank());  // tests only (LOOM_FAULT_INJECTION)
  ok = ok && all_ranks_ok(world, error.empty());
  const auto stages = ok ? gather_stage_records(mesh, parts.model) : std::vector<nlohmann::json>{};
  if (ok && leader) attempt([&] {
      write_manifest(tmp_dir, config, mesh, state, stages);
      fs::remove_all(final_dir);  // a broken directory of the same step, from an earlier crash
      fs::rename(tmp_dir, final_dir);
      fsync_path(final_dir.parent_path());
    });
  ok = ok && all_ranks_ok(world, error.empty());
  if (!ok) {
    std::error_code ignored;
    if (leader) fs::remove_all(tmp_dir, ignored);
    throw Error("cannot write checkpoint " + final_dir.string() + " (previous checkpoints are untouched): " +
                (error.empty() ? "another rank failed to write its shard" : error));
  }
}

std::optional<std::string> checkpoint_problem(const fs::path& dir) {
  const auto manifest_path = dir / kManifest;
  if (!fs::is_regular_file(manifest_path)) return "no " + std::string(kManifest);
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(read_file(manifest_path));
    for (const auto& [name, info] : manifest.at("files").items()) {
      const auto path = dir / name;
      if (!fs::is_regular_file(path)) return name + " is missing";
      if (fs::file_size(path) != info.at("bytes").get<uint64_t>()) return name + " has the wrong size";
      if (crc32_file(path) != info.at("crc32").get<uint32_t>()) return name + " fails its checksum";
    }
  } catch (const std::exception& e) {
    return std::string(kManifest) + " is unreadable: " + e.what();
  }
  return std::nullopt;
}

std::optional<int64_t> latest_checkpoint(const fs::path& run_dir) {
  auto steps = checkpoint_steps(run_dir);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const auto dir = checkpoint_dir(run_dir, *it);
    if (auto problem = checkpoint_problem(dir)) {
      spdlog::warn("skipping checkpoint {}: {}", dir.string(), *problem);
      continue;
    }
    return *it;
  }
  return std::nullopt;
}

TrainState load_checkpoint(const fs::path& run_dir, int64_t step, const Mesh& mesh, const CheckpointParts& parts,
                           bool restore_rng) {
  const auto dir = checkpoint_dir(run_dir, step);
  if (auto problem = checkpoint_problem(dir)) throw Error("checkpoint " + dir.string() + ": " + *problem);
  const auto manifest = nlohmann::json::parse(read_file(dir / kManifest));
  // Format 1 stored the optimizer state in LibTorch's own archive, in an order this loom no longer has:
  // its weights still load (generation, evaluation), its training does not resume.
  const int format = manifest.value("format", 0);
  if ((format < kOldestResumable || format > kFormat) && (format != 1 || parts.optimizer != nullptr))
    throw Error("checkpoint " + dir.string() + " was written by another version of loom (format " +
                std::to_string(format) + ", this loom resumes formats " + std::to_string(kOldestResumable) + " to " +
                std::to_string(kFormat) +
                "): start a new run.dir (`loom export` and model.init_from carry its weights over)");
  const auto& layout = manifest.at("layout");
  // Any DP size can resume (replicas are identical, optimizer state is re-partitioned), any TP size and
  // pipeline split by resharding. The same split: this stage held exactly this model's names.
  bool same_stage = saved_size(layout, "pp") == mesh.pp();
  if (same_stage && manifest.contains("pipeline")) {
    const auto& names = manifest.at("pipeline").at("names").at(static_cast<size_t>(mesh.coord(MeshAxis::kPp)));
    same_stage = names == stage_record(parts.model).at("names");
  }
  const bool reshard = saved_size(layout, "tp") != mesh.tp() || !same_stage;
  if (reshard && !manifest.contains("tensor_parallel"))
    throw Error("checkpoint " + dir.string() + " was written with layout " + layout.dump() +
                " by a loom that did not record its tensor-parallel layout: resume it with parallel.tp=" +
                layout.at("tp").dump());
  // A (tp, pp) position's shard holds its whole model and optimizer state; with ZeRO there is one per rank
  // of the shard group, each holding that rank's part of both.
  const int64_t saved_shards = saved_shard_files(layout);
  std::vector<fs::path> shard_paths;
  for (int64_t d = 0; d < saved_shards; ++d) shard_paths.push_back(dir / shard_name(d, mesh));
  const bool same_expert_groups = saved_size(layout, "ep") == mesh.ep() &&
                                  (format >= 4 || mesh.ep() == 1 || saved_size(layout, "cp") == 1);
  bool same_partition = !reshard && saved_shards == mesh.size(kShardAxes) && parts.sharded_optimizer && same_expert_groups;
  // Resharded, the counters and RNG state come from the first TP shard (TP ranks hold the same ones) of
  // the same stage, or the last stage there was.
  const int64_t saved_pp = saved_size(layout, "pp");
  const auto shard_path = reshard          ? dir / shard_file_name(0, 0, std::min(mesh.coord(MeshAxis::kPp), saved_pp - 1))
                          : same_partition ? shard_paths[mesh.coord(kShardAxes)]
                                           : shard_paths[0];
  torch::serialize::InputArchive shard;
  try {
    shard.load_from(shard_path.string(), torch::kCPU);  // copied onto the model's device as it loads
    // This rank's own file holds all it needs only if it was cut the same way; otherwise (or for a shard
    // that does not say) the weights and state are gathered by range from every file.
    if (torch::Tensor saved; same_partition)
      same_partition = shard.try_read("optimizer.partition", saved) && torch::equal(saved, optimizer_partition(parts));
    const auto weights = weights_of(parts);
    if (reshard) {
      const auto optimizer = parts.optimizer != nullptr ? std::optional(optimizer_layout(parts)) : std::nullopt;
      load_resharded(dir, manifest, mesh, parts.model, weights, optimizer ? &*optimizer : nullptr);
    } else {
      // Each file is loaded once (this rank's own one already is) for both its weights and its state.
      const auto optimizer = parts.optimizer != nullptr ? std::optional(optimizer_layout(parts)) : std::nullopt;
      auto moments = optimizer ? unread_moments(*optimizer, parts.model) : std::map<std::string, ParameterMoments>{};
      WeightReader weight_reader(weights);
      for (const auto& file : same_partition ? std::vector<fs::path>{shard_path} : shard_paths) {
        torch::serialize::InputArchive other;
        if (file != shard_path) other.load_from(file.string(), torch::kCPU);
        auto& archive = file == shard_path ? shard : other;
        weight_reader.add(archive, file.string());
        if (optimizer) add_parameter_moments(archive, file.string(), moments);
      }
      weight_reader.finish(same_partition ? shard_path.string() : dir.string());
      if (optimizer) install_optimizer_state(moments, *optimizer, parts.model);
    }
  } catch (const c10::Error& e) {
    throw Error(shard_path.string() + " does not fit this model (was the config changed?): " + e.what_without_backtrace());
  }
  auto read = [&shard](const char* key) {
    torch::Tensor t;  // a fresh tensor per key: reading into a loaded one would try to resize its storage
    shard.read(key, t);
    return t;
  };
  TrainState state;
  state.step = read("state.step").item<int64_t>();
  state.tokens = read("state.tokens").item<int64_t>();
  state.elapsed_s = read("state.elapsed_s").item<double>();
  // Checkpoints written before steps could be skipped for non-finite values hold no counts: none.
  if (torch::Tensor t; shard.try_read("state.skipped_steps", t)) state.skipped_steps = t.item<int64_t>();
  if (torch::Tensor t; shard.try_read("state.bad_streak", t)) state.bad_streak = t.item<int64_t>();
  if (torch::Tensor t; shard.try_read("state.tokens_by_source", t)) {
    const auto counts = t.to(torch::kLong).contiguous();
    state.tokens_by_source.assign(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + counts.numel());
  }
  // A checkpoint of a run without loss scaling (bf16, fp32) resumed in fp16 starts from the initial scale.
  if (torch::Tensor scaler; parts.loss_scaler != nullptr && shard.try_read("loss_scaler", scaler))
    parts.loss_scaler->load_state(scaler);
  // This rank's RNG states. Under CP each rank has its own (cp_rng_key) when the checkpoint was written at this
  // cp; at another cp the ranks beyond CP rank 0 keep the streams their seeds began. A checkpoint written on
  // the CPU resumed on a GPU: the device's stream starts from the run's seed. Resharded (another TP size or
  // pipeline split), the TP stream starts from its seed.
  if (restore_rng) {
    const int64_t cp_rank = mesh.coord(kCpAxes);
    if (cp_rank == 0 || saved_size(layout, "cp") == mesh.cp()) {
      auto saved = [&](const std::string& key, torch::Tensor& t) { return shard.try_read(cp_rng_key(cp_rank, key), t); };
      // (A checkpoint from before CP ranks had their own states holds only rank 0's.)
      if (torch::Tensor t; saved("rng.cpu", t)) set_generator_state(at::detail::getDefaultCPUGenerator(), t);
      if (const auto device = model_device(parts.model); device.is_cuda())
        if (torch::Tensor t; saved("rng.cuda", t)) set_generator_state(at::globalContext().defaultGenerator(device), t);
      if (parts.tp_rng != nullptr && !reshard)
        for (const char* device : {"cpu", "cuda"})
          if (torch::Tensor t; saved(std::string("rng.tp.") + device, t)) parts.tp_rng->set_state(torch::Device(device), t);
    }
  }
  return state;
}

void prune_checkpoints(const fs::path& run_dir, int64_t keep) {
  const auto root = run_dir / "checkpoints";
  if (!fs::is_directory(root)) return;
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.path().filename().string().rfind(".tmp-", 0) == 0) fs::remove_all(entry.path());
  auto steps = checkpoint_steps(run_dir);
  std::vector<int64_t> complete;
  for (int64_t s : steps)
    if (!checkpoint_problem(checkpoint_dir(run_dir, s))) complete.push_back(s);
  const int64_t excess = static_cast<int64_t>(complete.size()) - keep;
  for (int64_t i = 0; i < excess; ++i) fs::remove_all(checkpoint_dir(run_dir, complete[i]));
}

}  // namespace loom
