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
  if (world_size == 1) {
    own_world_ = make_self_communicator("world");
    world_ = own_world_.get();
    dp_group_ = make_self_communicator("dp group");
    tp_group_ = make_self_communicator("tp group");
    pp_group_ = make_self_communicator("pp group");
    embedding_group_ = make_self_communicator("embedding group");
  }
}

Mesh::Mesh(const Config& config, Communicator& world) : Mesh(config, world.size(), world.rank()) {
  own_world_.reset();
  world_ = &world;
  const auto c = coords();
  // Each group holds the ranks equal in the other two coordinates, ordered by their own coordinate.
  dp_group_ = world.split(static_cast<int>(c.tp + tp_ * c.pp), static_cast<int>(c.dp), "dp group of " + coords_name());
  tp_group_ = world.split(static_cast<int>(c.dp + dp_ * c.pp), static_cast<int>(c.tp), "tp group of " + coords_name());
  pp_group_ = world.split(static_cast<int>(c.tp + tp_ * c.dp), static_cast<int>(c.pp), "pp group of " + coords_name());
  // Colors past the tp * dp first/last-stage groups leave each middle stage on its own.
  const bool end_stage = c.pp == 0 || c.pp == pp_ - 1;
  embedding_group_ = world.split(static_cast<int>(end_stage ? c.tp + tp_ * c.dp : tp_ * dp_ + rank_),
                                 static_cast<int>(c.pp), "embedding group of " + coords_name());
}

namespace {
Communicator& require(Communicator* group, const char* name) {
  LOOM_CHECK(group != nullptr, "this mesh was built without communicators: no ", name);
  return *group;
}
}  // namespace

Communicator& Mesh::world() const { return require(world_, "world"); }
Communicator& Mesh::dp_group() const { return require(dp_group_.get(), "dp group"); }
Communicator& Mesh::tp_group() const { return require(tp_group_.get(), "tp group"); }
Communicator& Mesh::pp_group() const { return require(pp_group_.get(), "pp group"); }
Communicator& Mesh::embedding_group() const { return require(embedding_group_.get(), "embedding group"); }

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
