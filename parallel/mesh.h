// The device mesh: the world's ranks as a grid of named axes, listed innermost first. The axes are
// tp, cp_inner, cp_outer, ep, dp_shard, dp_replicate, pp (TP innermost: the ranks of a TP group are neighbours,
// on one node); context parallelism is the two cp axes together, data parallelism the three dp axes (ep,
// dp_shard, dp_replicate: hybrid sharding, parallel.shard_size: ZeRO shards over ep x dp_shard and replicates
// over dp_replicate; without it that is the whole of dp), so that
//   rank = tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank)),  dp_rank = shard_rank + shard_size * replica_rank,
// in general rank = c[0] + n[0] * (c[1] + n[1] * (c[2] + ...)) over the axes' coordinates c and sizes n.
// Expert parallelism (parallel.ep) folds dp x cp as Megatron-LM does: its groups are ep consecutive ranks of
// dp x cp in this order (cp innermost). So cp is cut in two: cp_inner, the cp ranks one ep group spans, and
// cp_outer, the rest; and the ep axis is the DP ranks one ep group spans. With ep a multiple of cp an ep group
// is a whole cp group times ep / cp DP ranks (cp_inner = cp, ep = ep / cp, cp_outer = 1); with ep dividing cp
// it lies in one cp group (cp_inner = ep, cp_outer = cp / ep, ep = 1); other ep are refused. Without expert
// parallelism cp_inner and ep are 1. The expert groups below are fixed sets of these axes, whatever the layout.
// This file is the one place that knows the axes: their order and names (kMeshAxes, mesh.cpp), the sizes a
// config asks for and the one check that they fill the world (MeshShape), the rank arithmetic, how a
// layout and a rank's place in it are named in logs, checkpoints and `loom info`, and every process group.
// A group is the ranks that differ only in some axes (the dp group: the ranks equal in tp, cp and pp). The mesh
// builds each of its groups twice over, for tensors on its device (NCCL on a GPU, MPI on the CPU) and for
// host scalars (MPI always: loss sums, token counts, partial norms, flags), so that nothing above
// parallel/ picks a backend. A set of axes reads as one flattened axis (Mesh::size, Mesh::coord), so a
// group over dp x cp, or dp itself (its shard and replica axes), is addressed like a single axis. Adding an
// axis is a MeshAxis, its line in kMeshAxes (and kLayoutNames), its size in MeshShape's constructor and the
// groups that span it in kMeshGroups, all in this file and mesh.cpp (docs/ARCHITECTURE.md, "Adding things").
#pragma once
#include <torch/torch.h>

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "parallel/communicator.h"

namespace loom {

// The axes, by their place in the rank order (innermost first).
enum class MeshAxis { kTp = 0, kCpInner = 1, kCpOuter = 2, kEp = 3, kDpShard = 4, kDpReplicate = 5, kPp = 6 };
constexpr size_t kMeshAxisCount = 7;

// A set of axes: the coordinates the ranks of a group differ in.
class AxisSet {
 public:
  constexpr AxisSet() = default;
  constexpr AxisSet(MeshAxis axis) : bits_(bit(axis)) {}  // implicit: an axis is the set of itself
  constexpr AxisSet(std::initializer_list<MeshAxis> axes) {
    for (MeshAxis a : axes) bits_ |= bit(a);
  }
  constexpr bool contains(MeshAxis axis) const { return (bits_ & bit(axis)) != 0; }
  constexpr AxisSet with(MeshAxis axis) const {
    AxisSet out = *this;
    out.bits_ |= bit(axis);
    return out;
  }
  constexpr bool operator==(AxisSet other) const { return bits_ == other.bits_; }

 private:
  static constexpr unsigned bit(MeshAxis axis) { return 1u << static_cast<unsigned>(axis); }
  unsigned bits_ = 0;
};

// Context parallelism (parallel.cp): the ranks holding parts of the same sequences. A CP rank is
// mesh.coord(kCpAxes), the CP size mesh.cp().
constexpr AxisSet kCpAxes{MeshAxis::kCpInner, MeshAxis::kCpOuter};
// Data parallelism: the ranks that share out the batch's sequences (parallel.dp). A DP rank is
// mesh.coord(kDpAxes), the DP size mesh.size(kDpAxes).
constexpr AxisSet kDpAxes{MeshAxis::kEp, MeshAxis::kDpShard, MeshAxis::kDpReplicate};
// The ranks that hold the same parameters and see different tokens: data parallelism's, and context
// parallelism's (each holding part of the same sequences). Gradients are averaged over them, and loss and
// token sums add them up.
constexpr AxisSet kDataParallelAxes{MeshAxis::kCpInner, MeshAxis::kCpOuter, MeshAxis::kEp, MeshAxis::kDpShard,
                                    MeshAxis::kDpReplicate};
// ZeRO's shard group: the ranks of dp x cp that split the optimizer state (gradients, parameters) between
// them; all of dp x cp unless parallel.shard_size makes groups of shard_size DP ranks (hybrid sharding).
constexpr AxisSet kShardAxes{MeshAxis::kCpInner, MeshAxis::kCpOuter, MeshAxis::kEp, MeshAxis::kDpShard};
// Hybrid sharding's replica group: the ranks holding the same shard, over which the reduced shard
// gradients are all-reduced (a group of one without hybrid sharding).
constexpr AxisSet kReplicaAxes{MeshAxis::kDpReplicate};
// Expert parallelism (parallel.ep): the ranks of one ep group (ep consecutive ranks of dp x cp, cp innermost:
// cp_inner x ep) hold different experts of every MoE layer and exchange tokens by all-to-all
// (models/moe_dispatch.h). The expert-data-parallel ranks (the rest of dp x cp: cp_outer x dp_shard x
// dp_replicate) hold the same experts: the expert parameters' gradients are averaged over them, ZeRO shards
// those over the expert shard group (the shard group less the ep group) and replicates them over the same
// replicas as the dense ones. With ep 1 these are a group of one and the dense parameters' groups.
constexpr AxisSet kExpertAxes{MeshAxis::kCpInner, MeshAxis::kEp};
constexpr AxisSet kExpertDataParallelAxes{MeshAxis::kCpOuter, MeshAxis::kDpShard, MeshAxis::kDpReplicate};
constexpr AxisSet kExpertShardAxes{MeshAxis::kCpOuter, MeshAxis::kDpShard};

// A coordinate per axis.
class MeshCoords {
 public:
  int64_t& operator[](MeshAxis axis) { return values_[static_cast<size_t>(axis)]; }
  int64_t operator[](MeshAxis axis) const { return values_[static_cast<size_t>(axis)]; }
  bool operator==(const MeshCoords& other) const { return values_ == other.values_; }

 private:
  std::array<int64_t, kMeshAxisCount> values_{};
};

// The axes' sizes: as a config asks for them (the data-parallel size may be -1, "what the world leaves":
// then the dp axis that parallel.shard_size does not fix is -1), or resolved against a world.
class MeshShape {
 public:
  explicit MeshShape(const ParallelConfig& parallel);
  // The -1 size filled in from world_size, and the checks that the sizes multiply to it and that
  // parallel.shard_size divides the dp it leaves (ConfigError naming the keys and where they were set).
  MeshShape resolved(const Config& config, int64_t world_size) const;

  int64_t size(MeshAxis axis) const { return sizes_[axis]; }
  int64_t world_size() const;  // the product of the sizes
  // In the naming order (dp, cp, tp, pp, then shard_size: dp_shard's size): the layout of a checkpoint's
  // manifest and of `loom info --json`. A size not resolved yet is -1.
  std::vector<std::pair<std::string, int64_t>> named_sizes() const;
  // "dp=2 cp=1 tp=2 pp=1" (between_axes " ", name_size "="), "dp 2 x cp 1 x tp 2 x pp 1" (" x ", " "); with
  // hybrid sharding dp says its shard size; expert parallelism's ep follows the last of dp and cp its groups
  // span: "dp=4 (ep=2 shard_size=2) cp=1 tp=1 pp=1", "dp=2 cp=2 (ep=4) tp=1 pp=1".
  std::string describe(const std::string& between_axes = " ", const std::string& name_size = "=") const;
  // Hybrid sharding: ZeRO shards over groups of shard_size DP ranks and replicates across them.
  bool hybrid_sharding() const { return sizes_[MeshAxis::kDpReplicate] != 1; }

  MeshCoords coords_of(int64_t rank) const;
  int64_t rank_of(const MeshCoords& coords) const;
  // "dp0-cp0-tp1-pp0": a rank's place, in the naming order.
  std::string coords_name(const MeshCoords& coords) const;
  // The group of `rank` over `axes`, as MPI_Comm_split takes it: ranks with the same color form a group,
  // ordered by key. color indexes the coordinates outside `axes`, key those inside (both innermost first).
  int64_t group_color(int64_t rank, AxisSet axes) const;
  int64_t group_key(int64_t rank, AxisSet axes) const;
  int64_t group_size(AxisSet axes) const;  // -1 while one of the axes is not resolved

 private:
  // The coordinates c over `axes` as one flattened axis, innermost first.
  int64_t flattened(const MeshCoords& c, AxisSet axes) const;

  MeshCoords sizes_;
};

// A checkpoint shard file's place, "dp1-tp0-pp1": the rank's place in ZeRO's shard group (0 where the ranks
// of dp x cp hold the same state), then the coordinate of each axis whose ranks hold different parameters (tp,
// pp), under its layout name. An axis added with parameters of its own names its files by its line in
// kLayoutNames (mesh.cpp).
std::string shard_coords_name(int64_t shard_rank, const MeshCoords& coords);

class Mesh {
 public:
  // The rank arithmetic of `rank` in a world of `world_size`, without groups (a world of one gets the
  // process itself as every group). Throws ConfigError if the layout does not fill the world.
  Mesh(const Config& config, int64_t world_size, int64_t rank);
  // The same over `world` (which must outlive the mesh), with every group built for tensors on `device`.
  Mesh(const Config& config, Communicator& world, torch::Device device = torch::kCPU);
  // The same, owning the world.
  Mesh(const Config& config, std::unique_ptr<Communicator> world, torch::Device device);
  ~Mesh();
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  const MeshShape& shape() const { return shape_; }
  // The ranks of this rank's group over `axes` (a single axis, or several flattened innermost first, as the
  // rank formula orders them): how many, and this rank's place among them.
  int64_t size(AxisSet axes) const { return shape_.group_size(axes); }
  int64_t coord(AxisSet axes) const { return shape_.group_key(rank_, axes); }
  int64_t dp() const { return size(kDpAxes); }
  int64_t tp() const { return size(MeshAxis::kTp); }
  int64_t cp() const { return size(kCpAxes); }
  int64_t pp() const { return size(MeshAxis::kPp); }
  int64_t ep() const { return size(kExpertAxes); }
  int64_t world_size() const { return shape_.world_size(); }
  int64_t rank() const { return rank_; }

  MeshCoords coords() const { return shape_.coords_of(rank_); }
  MeshCoords coords_of(int64_t rank) const { return shape_.coords_of(rank); }
  int64_t rank_of(const MeshCoords& c) const { return shape_.rank_of(c); }
  bool first_stage() const { return coord(MeshAxis::kPp) == 0; }
  bool last_stage() const { return coord(MeshAxis::kPp) == pp() - 1; }

  // "dp0-cp0-tp0-pp0" (dp: the DP rank): names this rank's log lines and its groups.
  std::string coords_name() const { return shape_.coords_name(coords()); }
  // "dp=1 cp=1 tp=2 pp=1": the layout, as logs name it.
  std::string describe() const { return shape_.describe(); }

  // Every rank (host scalars: flags, the checkpoint step to resume).
  Communicator& world() const;
  // This rank's group over `axes` (one of kMeshGroups): for tensors on the mesh's device (gradients,
  // activations), and for CPU scalars (sums of losses and tokens, norms' partial sums).
  Communicator& device_group(AxisSet axes) const;
  Communicator& host_group(AxisSet axes) const;
  // The first and the last pipeline stage of this rank's (dp, cp, tp) position, which both hold a tied token
  // embedding, for device tensors; on a middle stage (or with pp = 1) this rank alone.
  Communicator& embedding_group() const;

 private:
  // Shared: sets of axes that span the same ranks (dp x cp with cp 1, and dp; cp x dp_shard without hybrid
  // sharding, and dp x cp) share one group.
  struct Group {
    AxisSet axes;
    std::shared_ptr<Communicator> host;
    std::shared_ptr<Communicator> device;  // null: host serves device tensors too (CPU, or a group of one)
  };
  const Group& group(AxisSet axes) const;
  void build_groups(const Config& config, torch::Device device);

  MeshShape shape_;
  int64_t rank_;
  std::unique_ptr<Communicator> own_world_;
  Communicator* world_ = nullptr;
  std::vector<Group> groups_;
  Group embedding_;
};

}  // namespace loom
