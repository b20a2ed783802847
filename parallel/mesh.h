// The device mesh: world = dp x tp x pp with TP innermost, then DP, then PP:
//   rank = tp_rank + tp * (dp_rank + dp * pp_rank).
// This file is the rank arithmetic only; the per-axis communicators arrive with the distributed runtime.
#pragma once
#include <cstdint>
#include <string>

#include "core/config.h"

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

 private:
  int64_t dp_, tp_, pp_, rank_;
};

}  // namespace loom
