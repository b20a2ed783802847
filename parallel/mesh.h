// The device mesh: world = dp x tp x pp with TP innermost, then DP, then PP:
//   rank = tp_rank + tp * (dp_rank + dp * pp_rank).
// Built over a world communicator, it owns one sub-communicator per axis (the ranks that differ only
// in that coordinate). Built from a world size and rank alone, it is the rank arithmetic only, except
// for a world of one, whose groups are the process itself. Besides the three axes it has the group of the
// first and last pipeline stage (tied embeddings).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "core/config.h"
#include "parallel/communicator.h"

namespace loom {

struct MeshCoords {
  int64_t dp = 0;
  int64_t tp = 0;
  int64_t pp = 0;
};

class Mesh {
 public:
  // Resolves dp = -1 to world / (tp * pp); throws ConfigError if the layout does not fill the world.
  Mesh(const Config& config, int64_t world_size, int64_t rank);
  // The same, plus the dp, tp and pp groups split from `world` (which must outlive the mesh).
  Mesh(const Config& config, Communicator& world);

  int64_t dp() const { return dp_; }
  int64_t tp() const { return tp_; }
  int64_t pp() const { return pp_; }
  int64_t world_size() const { return dp_ * tp_ * pp_; }
  int64_t rank() const { return rank_; }

  MeshCoords coords() const { return coords_of(rank_); }
  MeshCoords coords_of(int64_t rank) const;
  int64_t rank_of(const MeshCoords& c) const { return c.tp + tp_ * (c.dp + dp_ * c.pp); }

  // "dp0-tp0-pp0": names this rank's checkpoint shard and tags its log lines.
  std::string coords_name() const;

  Communicator& world() const;
  Communicator& dp_group() const;
  Communicator& tp_group() const;
  Communicator& pp_group() const;
  // The first and the last pipeline stage of this rank's (dp, tp) position, which both hold the tied token
  // embedding; on a middle stage (or with pp = 1) this rank alone.
  Communicator& embedding_group() const;

 private:
  int64_t dp_, tp_, pp_, rank_;
  std::unique_ptr<Communicator> own_world_;  // a world of one made here
  Communicator* world_ = nullptr;
  std::unique_ptr<Communicator> dp_group_, tp_group_, pp_group_, embedding_group_;
};

}  // namespace loom
