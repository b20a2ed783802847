#include "parallel/mesh.h"

#include <algorithm>

#include "core/error.h"
#include "parallel/nccl_communicator.h"

namespace loom {
namespace {

struct AxisInfo {
  MeshAxis axis;
  const char* name;  // the axis's name in group names
};
// Every axis, in the rank order (innermost first).
constexpr AxisInfo kMeshAxes[kMeshAxisCount] = {{MeshAxis::kTp, "tp"},
                                                {MeshAxis::kCpInner, "cp_inner"},
                                                {MeshAxis::kCpOuter, "cp_outer"},
                                                {MeshAxis::kEp, "ep_dp"},
                                                {MeshAxis::kDpShard, "dp_shard"},
                                                {MeshAxis::kDpReplicate, "dp_replicate"},
                                                {MeshAxis::kPp, "pp"}};

// How layouts name the axes, in the order names list them (dp first, as every log line and checkpoint
// shard has it): each name is a parallel.<name> key and the axes it sizes, dp both of its axes. The shard
// axis's own size, parallel.shard_size, follows them in a layout's named sizes.
// own_parameters: the ranks along it hold different parameters, each writing checkpoint files of its own
// (shard_coords_name); such an axis is a single mesh axis.
struct LayoutName {
  const char* name;
  AxisSet axes;
  MeshAxis axis;  // own_parameters: the one axis
  bool own_parameters;
};
constexpr LayoutName kLayoutNames[] = {{"dp", kDpAxes, MeshAxis::kDpShard, false},
                                       {"cp", kCpAxes, MeshAxis::kCpOuter, false},
                                       {"tp", MeshAxis::kTp, MeshAxis::kTp, true},
                                       {"pp", MeshAxis::kPp, MeshAxis::kPp, true}};
constexpr const char* kShardSizeName = "shard_size";
constexpr const char* kEpName = "ep";

// The groups a mesh builds (every rank is in one of each), by the axes their ranks differ in: data
// parallelism's (the batch's sequences), tensor parallelism's (the layers' collectives, norms' partial
// sums), the pipeline's (messages between stages), context parallelism's (ring attention's exchanges),
// dp x cp, the ranks holding the same parameters (gradient averages, loss and token sums), and ZeRO's shard
// and replica groups inside it (hybrid sharding; without it the shard group is dp x cp's ranks).
// Expert parallelism adds the ep group (the all-to-alls) and the expert-data-parallel and expert shard groups
// (the expert parameters' gradient sync).
const AxisSet kMeshGroups[] = {kDpAxes,           AxisSet(MeshAxis::kTp), AxisSet(MeshAxis::kPp),
                               kCpAxes,           kDataParallelAxes,      kShardAxes,
                               kReplicaAxes,      kExpertAxes,            kExpertDataParallelAxes,
                               kExpertShardAxes};

// The axes of `axes` with more than one rank: two sets alike in these hold the same ranks.
AxisSet spanned(const MeshShape& shape, AxisSet axes) {
  AxisSet out;
  for (const auto& a : kMeshAxes)
    if (axes.contains(a.axis) && shape.size(a.axis) > 1) out = out.with(a.axis);
  return out;
}

// Whether every axis of `part` is in `axes`.
bool includes(AxisSet axes, AxisSet part) {
  for (const auto& a : kMeshAxes)
    if (part.contains(a.axis) && !axes.contains(a.axis)) return false;
  return true;
}

// "dp x tp", "dp_shard x cp": a layout name for the axes it covers, the axes' own names for the rest.
std::string set_name(AxisSet axes) {
  std::string name;
  auto add = [&name](const char* part) { name += (name.empty() ? "" : " x ") + std::string(part); };
  for (const auto& n : kLayoutNames) {
    if (includes(axes, n.axes)) {
      add(n.name);
      continue;
    }
    for (const auto& a : kMeshAxes)
      if (n.axes.contains(a.axis) && axes.contains(a.axis)) add(a.name);
  }
  return name;
}

}  // namespace

MeshShape::MeshShape(const ParallelConfig& parallel) {
  sizes_[MeshAxis::kTp] = parallel.tp;
  sizes_[MeshAxis::kPp] = parallel.pp;
  // dp's shard axis is parallel.shard_size (0: the whole of dp), its replica axis what that leaves of dp.
  // Without a dp (-1), the one shard_size does not fix is unknown until resolved.
  // Expert parallelism folds dp x cp (mesh.h): an ep group spans cp_inner CP ranks and ep_dp DP ranks, the
  // innermost of the shard axis (resolved() checks that ep is a multiple or a divisor of cp and that ep_dp
  // divides dp and shard_size).
  const bool shard_size_set = parallel.shard_size > 0;
  const int64_t ep = std::max<int64_t>(parallel.ep, 1), cp = std::max<int64_t>(parallel.cp, 1);
  const int64_t cp_inner = ep % cp == 0 ? cp : std::min(ep, cp), ep_dp = ep / cp_inner;
  sizes_[MeshAxis::kCpInner] = cp_inner;
  sizes_[MeshAxis::kCpOuter] = cp / cp_inner;
  const int64_t shard = shard_size_set ? parallel.shard_size : parallel.dp;
  sizes_[MeshAxis::kEp] = ep_dp;
  sizes_[MeshAxis::kDpShard] = shard == -1 ? -1 : shard / ep_dp;
  sizes_[MeshAxis::kDpReplicate] = parallel.dp == -1 ? (shard_size_set ? -1 : 1) : parallel.dp / shard;
}

MeshShape MeshShape::resolved(const Config& config, int64_t world_size) const {
  MeshShape out = *this;
  const int64_t ep = std::max<int64_t>(config.parallel.ep, 1), cp = std::max<int64_t>(config.parallel.cp, 1);
  if (ep % cp != 0 && cp % ep != 0)
    throw ConfigError(config.where("parallel.ep") + ": parallel.ep = " + std::to_string(config.parallel.ep) +
                      " with parallel.cp = " + std::to_string(cp) + ": an ep group is ep consecutive ranks of dp x cp "
                      "(cp innermost), so ep must be a multiple of parallel.cp (each group whole cp groups) or divide "
                      "it (each group inside one cp group)");
  int64_t fixed = 1;  // the product of the sizes besides dp's
  std::string fixed_keys, first_fixed;
  bool fixed_size_one = true;
  for (const auto& n : kLayoutNames) {
    if (n.axes == kDpAxes) continue;
    fixed *= group_size(n.axes);
    fixed_keys += (fixed_keys.empty() ? "parallel." : " * parallel.") + std::string(n.name);
    if (first_fixed.empty() || (fixed_size_one && group_size(n.axes) != 1)) {  // where: a key that was set, if any
      first_fixed = n.name;
      fixed_size_one = group_size(n.axes) == 1;
    }
  }
  if (group_size(kDpAxes) == -1) {
    if (world_size % fixed != 0)
      throw ConfigError(config.where("parallel." + first_fixed) + ": " + fixed_keys + " = " + std::to_string(fixed) +
                        " does not divide the world size " + std::to_string(world_size));
    const int64_t ep_dp = sizes_[MeshAxis::kEp];
    const int64_t dp = world_size / fixed,
                  shard = sizes_[MeshAxis::kDpShard] == -1 ? dp : sizes_[MeshAxis::kDpShard] * ep_dp;
    if (dp % ep_dp != 0)
      throw ConfigError(config.where("parallel.ep") + ": parallel.ep = " + std::to_string(ep) +
                        " does not divide parallel.dp x parallel.cp = " + std::to_string(dp) + " x " + std::to_string(cp) +
                        " (dp: the world size " + std::to_string(world_size) + " / " + fixed_keys +
                        "): expert parallelism splits the ranks of dp x cp");
    if (dp % shard != 0)
      throw ConfigError(config.where("parallel.shard_size") + ": parallel.shard_size = " + std::to_string(shard) +
                        " does not divide parallel.dp = " + std::to_string(dp) + " (the world size " +
                        std::to_string(world_size) + " / " + fixed_keys + ")");
    out.sizes_[MeshAxis::kDpShard] = shard / ep_dp;
    out.sizes_[MeshAxis::kDpReplicate] = dp / shard;
  }
  if (out.world_size() != world_size) {
    std::string keys, values;
    for (const auto& n : kLayoutNames) {
      keys += (keys.empty() ? "parallel." : " * ") + std::string(n.name);
      values += (values.empty() ? "" : " * ") + std::to_string(out.group_size(n.axes));
    }
    const std::string product = std::to_string(out.world_size());
    throw ConfigError(config.where("parallel.dp") + ": " + keys + " = " + values + " = " + product +
                      " but the job has " + std::to_string(world_size) + " process(es)" +
                      (world_size == 1 ? "; start it with mpirun -np " + product : ""));
  }
  return out;
}

int64_t MeshShape::world_size() const {
  int64_t n = 1;
  for (const auto& a : kMeshAxes) n *= sizes_[a.axis];
  return n;
}

std::vector<std::pair<std::string, int64_t>> MeshShape::named_sizes() const {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& n : kLayoutNames) out.emplace_back(n.name, group_size(n.axes));
  out.emplace_back(kShardSizeName, sizes_[MeshAxis::kDpShard] == -1 ? -1 : sizes_[MeshAxis::kDpShard] * sizes_[MeshAxis::kEp]);
  out.emplace_back(kEpName, group_size(kExpertAxes));
  return out;
}

std::string MeshShape::describe(const std::string& between_axes, const std::string& name_size) const {
  std::string out;
  const int64_t ep = group_size(kExpertAxes);
  const bool ep_spans_cp = sizes_[MeshAxis::kCpInner] != 1;  // then ep follows cp, else dp
  for (const auto& n : kLayoutNames) {
    out += (out.empty() ? "" : between_axes) + n.name + name_size + std::to_string(group_size(n.axes));
    const bool is_dp = n.axes == kDpAxes;
    if (!is_dp && !(n.axes == kCpAxes)) continue;
    std::string inside;
    if (ep != 1 && is_dp != ep_spans_cp) inside = std::string(kEpName) + name_size + std::to_string(ep);
    if (is_dp && hybrid_sharding())
      inside += (inside.empty() ? "" : " ") + std::string(kShardSizeName) + name_size +
                std::to_string(sizes_[MeshAxis::kDpShard] * sizes_[MeshAxis::kEp]);
    if (!inside.empty()) out += " (" + inside + ")";
  }
  return out;
}

MeshCoords MeshShape::coords_of(int64_t rank) const {
  MeshCoords c;
  for (const auto& a : kMeshAxes) {
    c[a.axis] = rank % sizes_[a.axis];
    rank /= sizes_[a.axis];
  }
  return c;
}

int64_t MeshShape::rank_of(const MeshCoords& c) const {
  int64_t rank = 0;
  for (size_t i = kMeshAxisCount; i-- > 0;) rank = rank * sizes_[kMeshAxes[i].axis] + c[kMeshAxes[i].axis];
  return rank;
}

std::string MeshShape::coords_name(const MeshCoords& c) const {
  std::string out;
  for (const auto& n : kLayoutNames)
    out += (out.empty() ? "" : "-") + std::string(n.name) + std::to_string(flattened(c, n.axes));
  return out;
}

std::string shard_coords_name(int64_t shard_rank, const MeshCoords& coords) {
  std::string out = "dp" + std::to_string(shard_rank);
  for (const auto& n : kLayoutNames)
    if (n.own_parameters) out += "-" + std::string(n.name) + std::to_string(coords[n.axis]);
  return out;
}

int64_t MeshShape::group_color(int64_t rank, AxisSet axes) const {
  const MeshCoords c = coords_of(rank);
  int64_t color = 0, stride = 1;
  for (const auto& a : kMeshAxes) {
    if (axes.contains(a.axis)) continue;
    color += c[a.axis] * stride;
    stride *= sizes_[a.axis];
  }
  return color;
}

int64_t MeshShape::group_key(int64_t rank, AxisSet axes) const { return flattened(coords_of(rank), axes); }

int64_t MeshShape::flattened(const MeshCoords& c, AxisSet axes) const {
  int64_t key = 0, stride = 1;
  for (const auto& a : kMeshAxes) {
    if (!axes.contains(a.axis)) continue;
    key += c[a.axis] * stride;
    stride *= sizes_[a.axis];
  }
  return key;
}

int64_t MeshShape::group_size(AxisSet axes) const {
  int64_t n = 1;
  for (const auto& a : kMeshAxes) {
    if (!axes.contains(a.axis)) continue;
    if (sizes_[a.axis] == -1) return -1;
    n *= sizes_[a.axis];
  }
  return n;
}

Mesh::Mesh(const Config& config, int64_t world_size, int64_t rank)
    : shape_(MeshShape(config.parallel).resolved(config, world_size)), rank_(rank) {
  LOOM_CHECK(rank >= 0 && rank < world_size, "rank ", rank, " outside a world of ", world_size);
  if (world_size != 1) return;
  own_world_ = make_self_communicator("world");
  world_ = own_world_.get();
  for (AxisSet axes : kMeshGroups) groups_.push_back({axes, make_self_communicator(set_name(axes) + " group"), nullptr});
  embedding_ = {AxisSet(), make_self_communicator("embedding group"), nullptr};
}

Mesh::Mesh(const Config& config, Communicator& world, torch::Device device) : Mesh(config, world.size(), world.rank()) {
  own_world_.reset();
  world_ = &world;
  build_groups(config, device);
}

Mesh::Mesh(const Config& config, std::unique_ptr<Communicator> world, torch::Device device)
    : Mesh(config, *world, device) {
  own_world_ = std::move(world);
}

Mesh::~Mesh() = default;

void Mesh::build_groups(const Config& config, torch::Device device) {
  groups_.clear();
  // The device's groups of more than one rank go over NCCL, each made from the MPI group of its ranks
  // (which carries NCCL's unique id). Every rank makes them in the same order.
  auto device_twin = [&](Communicator& host) -> std::unique_ptr<Communicator> {
    if (!device.is_cuda() || host.size() == 1) return nullptr;
    return make_nccl_communicator(host, device.index(), "NCCL " + host.name(), config.parallel.timeout_s);
  };
  for (AxisSet axes : kMeshGroups) {
    // A set holding the same ranks as an earlier one (dp x cp when cp is 1) shares its communicators: no
    // second NCCL communicator over the same GPUs.
    // The ep group never shares: its all-to-alls (in forward and backward) must not queue on one worker
    // behind the gradient collectives that backward starts at the same time.
    const bool expert_parallel = shape_.group_size(kExpertAxes) > 1;
    const bool own = axes == kExpertAxes && expert_parallel;
    const auto same = own ? groups_.end() : std::find_if(groups_.begin(), groups_.end(), [&](const Group& g) {
      return !(g.axes == kExpertAxes && expert_parallel) && spanned(shape_, g.axes) == spanned(shape_, axes);
    });
    if (same != groups_.end()) {
      groups_.push_back({axes, same->host, same->device});
      continue;
    }
    Group g{axes, world_->split(static_cast<int>(shape_.group_color(rank_, axes)),
                                static_cast<int>(shape_.group_key(rank_, axes)),
                                set_name(axes) + " group of " + coords_name()),
            nullptr};
    g.device = device_twin(*g.host);
    groups_.push_back(std::move(g));
  }
  // The first and last stage of each (dp, cp, tp) position; colors past those groups leave each middle
  // stage on its own.
  const AxisSet stages(MeshAxis::kPp);
  const int64_t positions = shape_.world_size() / pp();
  const int64_t color = first_stage() || last_stage() ? shape_.group_color(rank_, stages) : positions + rank_;
  embedding_.host = world_->split(static_cast<int>(color), static_cast<int>(coord(MeshAxis::kPp)),
                                  "embedding group of " + coords_name());
  embedding_.device = device_twin(*embedding_.host);
}

Communicator& Mesh::world() const {
  LOOM_CHECK(world_ != nullptr, "this mesh was built without communicators: no world");
  return *world_;
}

const Mesh::Group& Mesh::group(AxisSet axes) const {
  for (const auto& g : groups_)
    if (g.axes == axes) return g;
  LOOM_CHECK(world_ != nullptr, "this mesh was built without communicators: no ", set_name(axes), " group");
  throw Error("the mesh builds no " + set_name(axes) + " group: add it to kMeshGroups (parallel/mesh.cpp)");
}

Communicator& Mesh::device_group(AxisSet axes) const {
  const Group& g = group(axes);
  return g.device ? *g.device : *g.host;
}

Communicator& Mesh::host_group(AxisSet axes) const { return *group(axes).host; }

Communicator& Mesh::embedding_group() const {
  LOOM_CHECK(embedding_.host != nullptr, "this mesh was built without communicators: no embedding group");
  return embedding_.device ? *embedding_.device : *embedding_.host;
}

}  // namespace loom
