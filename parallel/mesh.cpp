#include "parallel/mesh.h"

#include "core/error.h"

namespace loom {

Mesh::Mesh(const Config& config, int64_t world_size, int64_t rank)
    : dp_(config.parallel.dp), tp_(config.parallel.tp), pp_(config.parallel.pp), rank_(rank) {
  const auto& p = config.parallel;
  if (dp_ == -1) {
    if (world_size % (tp_ * pp_) != 0)
      throw ConfigError(config.where("parallel.tp") + ": parallel.tp * parallel.pp = " + std::to_string(tp_ * pp_) +
                        " does not divide the world size " + std::to_string(world_size));
    dp_ = world_size / (tp_ * pp_);
  }
  if (dp_ * tp_ * pp_ != world_size)
    throw ConfigError(config.where("parallel.dp") + ": parallel.dp * tp * pp = " + std::to_string(p.dp) + " * " +
                      std::to_string(tp_) + " * " + std::to_string(pp_) + " = " + std::to_string(dp_ * tp_ * pp_) +
                      " but the job has " + std::to_string(world_size) + " process(es)" +
                      (world_size == 1 ? "; start it with mpirun -np " + std::to_string(dp_ * tp_ * pp_) : ""));
  LOOM_CHECK(rank >= 0 && rank < world_size, "rank ", rank, " outside a world of ", world_size);
}

MeshCoords Mesh::coords_of(int64_t rank) const {
  MeshCoords c;
  c.tp = rank % tp_;
  c.dp = (rank / tp_) % dp_;
  c.pp = rank / (tp_ * dp_);
  return c;
}

std::string Mesh::coords_name() const {
  const auto c = coords();
  return "dp" + std::to_string(c.dp) + "-tp" + std::to_string(c.tp) + "-pp" + std::to_string(c.pp);
}

}  // namespace loom
