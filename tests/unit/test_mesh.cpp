// The mesh's rank arithmetic (parallel/mesh.h): the rank formula, the groups over any set of axes, the one
// check that a layout fills the world, and the names logs and checkpoints give a layout and a rank.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include "core/config.h"
#include "core/error.h"
#include "core/strings.h"
#include "parallel/mesh.h"

using loom::AxisSet;
using loom::MeshAxis;
using loom::starts_with;

namespace {

loom::Config layout(const std::vector<std::string>& sets) { return loom::parse_config("", "x.yaml", sets); }

}  // namespace

TEST_CASE("mesh: ranks are TP innermost, then DP, then PP", "[mesh]") {
  const auto c = layout({"parallel.dp=-1", "parallel.tp=2", "parallel.pp=2"});
  const int64_t world = 12;
  for (int64_t rank = 0; rank < world; ++rank) {
    const loom::Mesh mesh(c, world, rank);
    REQUIRE(mesh.dp() == 3);  // -1 resolves to 12 / (2 * 2)
    CHECK(mesh.world_size() == world);
    const auto coords = mesh.coords();
    CHECK(coords[MeshAxis::kTp] == rank % 2);
    CHECK(mesh.coord(loom::kDpAxes) == (rank / 2) % 3);
    CHECK(coords[MeshAxis::kDpShard] == (rank / 2) % 3);  // without hybrid sharding dp_shard is all of dp
    CHECK(coords[MeshAxis::kDpReplicate] == 0);
    CHECK(coords[MeshAxis::kPp] == rank / 6);
    CHECK(mesh.rank_of(coords) == rank);
    CHECK(mesh.first_stage() == (rank < 6));
    CHECK(mesh.last_stage() == (rank >= 6));
  }
  const loom::Mesh mesh(c, world, 9);  // 9 = 1 + 2 * (1 + 3 * 1)
  CHECK(mesh.coords_name() == "dp1-cp0-tp1-pp1");
  CHECK(mesh.describe() == "dp=3 cp=1 tp=2 pp=2");
  CHECK(mesh.shape().describe(" x ", " ") == "dp 3 x cp 1 x tp 2 x pp 2");
  const std::vector<std::pair<std::string, int64_t>> sizes{{"dp", 3}, {"cp", 1}, {"tp", 2}, {"pp", 2}, {"shard_size", 3}, {"ep", 1}};
  CHECK(mesh.shape().named_sizes() == sizes);
  loom::MeshCoords c2;
  c2[MeshAxis::kDpShard] = 2;
  c2[MeshAxis::kPp] = 1;
  CHECK(mesh.rank_of(c2) == 0 + 2 * (2 + 3 * 1));
  // A set of axes as one flattened axis, innermost first: rank 9 is tp 1, dp 1, pp 1.
  CHECK(mesh.size(loom::kDpAxes) == 3);
  CHECK(mesh.coord(loom::kDpAxes) == 1);
  CHECK(mesh.size(loom::kDpAxes.with(MeshAxis::kTp)) == 6);
  CHECK(mesh.coord(loom::kDpAxes.with(MeshAxis::kTp)) == 1 + 2 * 1);
  CHECK(mesh.size(loom::kDpAxes.with(MeshAxis::kPp)) == 6);
  CHECK(mesh.coord(loom::kDpAxes.with(MeshAxis::kPp)) == 1 + 3 * 1);
  CHECK(mesh.coord(loom::kDpAxes.with(MeshAxis::kTp).with(MeshAxis::kPp)) == 9);  // every axis: the rank itself
}

TEST_CASE("mesh: a group over any set of axes holds the ranks equal outside it, in their order inside it", "[mesh]") {
  // (a batch that splits over dp 3: the config's own check)
  const auto c = layout({"parallel.dp=3", "parallel.tp=2", "parallel.pp=2", "train.batch_size=30"});
  const loom::MeshShape shape = loom::MeshShape(c.parallel).resolved(c, 12);
  const MeshAxis axes[] = {MeshAxis::kTp, MeshAxis::kDpShard, MeshAxis::kPp};  // dp_shard: all of dp here
  for (unsigned bits = 1; bits < 8; ++bits) {
    // Every subset of {tp, dp, pp}.
    std::vector<MeshAxis> members;
    for (unsigned i = 0; i < 3; ++i)
      if (bits & (1u << i)) members.push_back(axes[i]);
    const AxisSet set = members.size() == 1   ? AxisSet(members[0])
                        : members.size() == 2 ? AxisSet({members[0], members[1]})
                                              : AxisSet({members[0], members[1], members[2]});
    CAPTURE(bits);
    int64_t expected_size = 1;
    for (MeshAxis a : members) expected_size *= shape.size(a);
    CHECK(shape.group_size(set) == expected_size);
    std::map<int64_t, std::vector<int64_t>> groups;  // color -> ranks in key order
    for (int64_t rank = 0; rank < 12; ++rank) {
      auto& group = groups[shape.group_color(rank, set)];
      const int64_t key = shape.group_key(rank, set);
      if (static_cast<int64_t>(group.size()) <= key) group.resize(static_cast<size_t>(key + 1), -1);
      CHECK(group[static_cast<size_t>(key)] == -1);  // keys are distinct within a group
      group[static_cast<size_t>(key)] = rank;
    }
    CHECK(static_cast<int64_t>(groups.size()) == 12 / expected_size);
    for (const auto& [color, ranks] : groups) {
      REQUIRE(static_cast<int64_t>(ranks.size()) == expected_size);
      for (size_t k = 0; k < ranks.size(); ++k) {
        const auto a = shape.coords_of(ranks[0]), b = shape.coords_of(ranks[k]);
        for (MeshAxis axis : axes)
          if (!set.contains(axis)) CHECK(a[axis] == b[axis]);  // equal outside the set
        if (k > 0) CHECK(ranks[k - 1] < ranks[k]);              // key order is rank order
      }
    }
  }
  // The dp group of rank 9 (dp1-cp0-tp1-pp1): tp 1 and pp 1 with every dp, 1 + 2 * (d + 3).
  std::vector<int64_t> dp_group;
  for (int64_t rank = 0; rank < 12; ++rank)
    if (shape.group_color(rank, loom::kDpAxes) == shape.group_color(9, loom::kDpAxes)) dp_group.push_back(rank);
  CHECK(dp_group == std::vector<int64_t>{7, 9, 11});
}

TEST_CASE("mesh: the cp axis sits between tp and dp, and dp x cp holds the ranks with the same parameters", "[mesh]") {
  const auto c = layout({"parallel.dp=-1", "parallel.tp=2", "parallel.cp=2", "parallel.pp=2", "data.seq_len=64",
                           "model.dropout=0"});
  const int64_t world = 16;
  for (int64_t rank = 0; rank < world; ++rank) {
    const loom::Mesh mesh(c, world, rank);
    REQUIRE(mesh.dp() == 2);  // 16 / (2 * 2 * 2)
    CHECK(mesh.cp() == 2);
    const auto coords = mesh.coords();
    // rank = tp + 2 * (cp + 2 * (dp + 2 * pp))
    CHECK(coords[MeshAxis::kTp] == rank % 2);
    CHECK(mesh.coord(loom::kCpAxes) == (rank / 2) % 2);
    CHECK(mesh.coord(loom::kDpAxes) == (rank / 4) % 2);
    CHECK(coords[MeshAxis::kPp] == rank / 8);
    // dp x cp flattened cp first: the shard index of ZeRO and of a checkpoint's per-rank files.
    CHECK(mesh.size(loom::kDataParallelAxes) == 4);
    CHECK(mesh.coord(loom::kDataParallelAxes) == mesh.coord(loom::kCpAxes) + 2 * mesh.coord(loom::kDpAxes));
    CHECK(mesh.coord(loom::kShardAxes) == mesh.coord(loom::kDataParallelAxes));  // no hybrid sharding
  }
  const loom::Mesh mesh(c, world, 13);  // 13 = 1 + 2 * (0 + 2 * (1 + 2 * 1))
  CHECK(mesh.coords_name() == "dp1-cp0-tp1-pp1");
  CHECK(mesh.describe() == "dp=2 cp=2 tp=2 pp=2");
  // Ranks 1, 3, 5, 7 share tp 1 and pp 0: one dp x cp group, in cp-then-dp order.
  std::vector<int64_t> group;
  const loom::MeshShape& shape = mesh.shape();
  for (int64_t rank = 0; rank < world; ++rank)
    if (shape.group_color(rank, loom::kDataParallelAxes) == shape.group_color(1, loom::kDataParallelAxes))
      group.push_back(rank);
  CHECK(group == std::vector<int64_t>{1, 3, 5, 7});
}

TEST_CASE("mesh: a layout that does not fill the world is a ConfigError", "[mesh]") {
  const loom::Config c = loom::parse_config("parallel:\n  dp: 2\n  tp: 2\n", "x.yaml");
  CHECK(loom::Mesh(c, 4, 3).coords_name() == "dp1-cp0-tp1-pp0");
  CHECK_THROWS_AS(loom::Mesh(c, 8, 0), loom::ConfigError);
  try {
    loom::Mesh(c, 1, 0);
    FAIL("expected a ConfigError");
  } catch (const loom::ConfigError& e) {
    const std::string message = e.what();
    CHECK(starts_with(message, "x.yaml:2: parallel.dp * cp * tp * pp = 2 * 1 * 2 * 1 = 4 but the job has 1 process(es)"));
    CHECK(message.find("mpirun -np 4") != std::string::npos);
  }
  const auto auto_dp = layout({"parallel.dp=-1", "parallel.tp=4"});
  CHECK(loom::Mesh(auto_dp, 8, 0).dp() == 2);
  try {
    loom::Mesh(auto_dp, 6, 0);
    FAIL("expected a ConfigError");
  } catch (const loom::ConfigError& e) {
    CHECK(std::string(e.what()) == "--set parallel.tp=4: parallel.cp * parallel.tp * parallel.pp = 4 does not divide the world size 6");
  }
  CHECK_THROWS_AS(loom::Mesh(auto_dp, 8, 8), loom::Error);  // rank outside the world
}

TEST_CASE("mesh: a world of one is every group, and a mesh without a world has none", "[mesh]") {
  const auto c = layout({});
  const loom::Mesh alone(c, 1, 0);
  CHECK(alone.host_group(loom::kDpAxes).size() == 1);
  CHECK(&alone.device_group(MeshAxis::kTp) == &alone.host_group(MeshAxis::kTp));
  CHECK(alone.embedding_group().size() == 1);
  const loom::Mesh rank_only(layout({"parallel.dp=2"}), 2, 1);
  CHECK_THROWS_WITH(rank_only.host_group(loom::kDpAxes), Catch::Contains("built without communicators"));
  CHECK_THROWS_WITH(alone.host_group(loom::kDpAxes.with(MeshAxis::kTp)),
                    Catch::Contains("the mesh builds no dp x tp group"));
}

TEST_CASE("mesh: hybrid sharding splits dp into shard (inner) and replica axes", "[mesh]") {
  // tp 2 x cp 2 x dp 4 (shard_size 2: 2 replicas) = 16 ranks; rank = tp + 2 * (cp + 2 * (dp + 4 * pp)) as
  // without hybrid sharding, the DP rank = dp_shard + 2 * dp_replicate.
  const auto c = layout({"parallel.dp=-1", "parallel.tp=2", "parallel.cp=2", "parallel.shard_size=2", "parallel.zero=3",
                         "data.seq_len=64", "model.dropout=0"});
  const int64_t world = 16;
  std::map<int64_t, std::vector<int64_t>> shard_groups, replica_groups;  // color -> ranks in key order
  for (int64_t rank = 0; rank < world; ++rank) {
    const loom::Mesh mesh(c, world, rank);
    REQUIRE(mesh.dp() == 4);
    CHECK(mesh.shape().hybrid_sharding());
    const auto coords = mesh.coords();
    const int64_t dp_rank = (rank / 4) % 4;
    CHECK(mesh.coord(loom::kDpAxes) == dp_rank);
    CHECK(coords[MeshAxis::kDpShard] == dp_rank % 2);
    CHECK(coords[MeshAxis::kDpReplicate] == dp_rank / 2);
    CHECK(mesh.rank_of(coords) == rank);
    // The shard group: cp x dp_shard, cp innermost (a checkpoint's optimizer shard index); the replica group:
    // the ranks holding the same shard.
    CHECK(mesh.size(loom::kShardAxes) == 4);
    CHECK(mesh.coord(loom::kShardAxes) == mesh.coord(loom::kCpAxes) + 2 * (dp_rank % 2));
    CHECK(mesh.size(loom::kReplicaAxes) == 2);
    CHECK(mesh.coord(loom::kReplicaAxes) == dp_rank / 2);
    CHECK(mesh.size(loom::kDataParallelAxes) == 8);
    shard_groups[mesh.shape().group_color(rank, loom::kShardAxes)].push_back(rank);
    replica_groups[mesh.shape().group_color(rank, loom::kReplicaAxes)].push_back(rank);
  }
  // Rank 13 (tp 1, cp 0, dp 3 = shard 1 of replica 1): its shard group holds tp 1 of dp 2 and 3, cp 0 and 1,
  // cp first; its replicas are dp 1 and dp 3.
  const loom::Mesh mesh(c, world, 13);
  const auto& shape = mesh.shape();
  CHECK(shard_groups.at(shape.group_color(13, loom::kShardAxes)) == std::vector<int64_t>{9, 11, 13, 15});
  CHECK(replica_groups.at(shape.group_color(13, loom::kReplicaAxes)) == std::vector<int64_t>{5, 13});
  CHECK(shard_groups.size() == 4);
  CHECK(replica_groups.size() == 8);
  // Names: dp stays the DP rank and size; the layout names its shard size.
  CHECK(mesh.coords_name() == "dp3-cp0-tp1-pp0");
  CHECK(mesh.describe() == "dp=4 (shard_size=2) cp=2 tp=2 pp=1");
  CHECK(shape.describe(" x ", " ") == "dp 4 (shard_size 2) x cp 2 x tp 2 x pp 1");
  const std::vector<std::pair<std::string, int64_t>> sizes{{"dp", 4}, {"cp", 2}, {"tp", 2}, {"pp", 1}, {"shard_size", 2}, {"ep", 1}};
  CHECK(shape.named_sizes() == sizes);
  // Without a world, the config's sizes: dp -1 is not known, shard_size is.
  const loom::MeshShape asked(c.parallel);
  CHECK(asked.named_sizes() == std::vector<std::pair<std::string, int64_t>>{
                                   {"dp", -1}, {"cp", 2}, {"tp", 2}, {"pp", 1}, {"shard_size", 2}, {"ep", 1}});
  // shard_size = dp is no hybrid sharding: one shard group holds all of dp x cp.
  const loom::Mesh whole(layout({"parallel.dp=4", "parallel.shard_size=4", "parallel.zero=1"}), 4, 2);
  CHECK_FALSE(whole.shape().hybrid_sharding());
  CHECK(whole.size(loom::kShardAxes) == 4);
  CHECK(whole.size(loom::kReplicaAxes) == 1);
  CHECK(whole.describe() == "dp=4 cp=1 tp=1 pp=1");
}

TEST_CASE("mesh: a shard size that does not divide the dp the world leaves is a ConfigError", "[mesh]") {
  const auto c = layout({"parallel.dp=-1", "parallel.tp=2", "parallel.shard_size=4", "parallel.zero=2"});
  CHECK(loom::Mesh(c, 16, 0).size(loom::kReplicaAxes) == 2);  // dp 8: 2 groups of 4
  try {
    loom::Mesh(c, 12, 0);  // dp 6
    FAIL("expected a ConfigError");
  } catch (const loom::ConfigError& e) {
    CHECK(std::string(e.what()) == "--set parallel.shard_size=4: parallel.shard_size = 4 does not divide parallel.dp = 6 "
                                   "(the world size 12 / parallel.cp * parallel.tp * parallel.pp)");
  }
}

TEST_CASE("mesh: expert parallelism is the innermost part of dp, its groups closed forms", "[mesh]") {
  // dp 8 = ep 2 x shard 2 x replica 2 (shard_size 4), tp 2: rank = tp + 2 * dp_rank, dp_rank = ep + 2 * (shard + 2 * replica).
  loom::Config c;
  c.parallel.dp = -1;
  c.parallel.tp = 2;
  c.parallel.ep = 2;
  c.parallel.zero = loom::ZeroStage::kOptimizer;
  c.parallel.shard_size = 4;
  c.model.moe.num_experts = 4;
  const loom::MeshShape shape = loom::MeshShape(c.parallel).resolved(c, 16);
  CHECK(shape.describe() == "dp=8 (ep=2 shard_size=4) cp=1 tp=2 pp=1");
  const std::vector<std::pair<std::string, int64_t>> sizes{{"dp", 8}, {"cp", 1}, {"tp", 2}, {"pp", 1}, {"shard_size", 4}, {"ep", 2}};
  CHECK(shape.named_sizes() == sizes);
  std::map<int64_t, std::vector<int64_t>> ep_groups, expert_dp_groups, expert_shard_groups;
  for (int64_t rank = 0; rank < 16; ++rank) {
    const loom::Mesh mesh(c, 16, rank);
    const int64_t dp_rank = rank / 2, ep_rank = dp_rank % 2, shard = (dp_rank / 2) % 2, replica = dp_rank / 4;
    CHECK(mesh.coord(loom::kDpAxes) == dp_rank);
    CHECK(mesh.coord(loom::kExpertAxes) == ep_rank);
    CHECK(mesh.ep() == 2);
    CHECK(mesh.coord(loom::kShardAxes) == dp_rank % 4);  // ep x dp_shard: the shard_size ranks
    CHECK(mesh.coord(loom::kExpertShardAxes) == shard);
    CHECK(mesh.coord(loom::kExpertDataParallelAxes) == shard + 2 * replica);
    CHECK(mesh.size(loom::kExpertDataParallelAxes) == 4);
    ep_groups[shape.group_color(rank, loom::kExpertAxes)].push_back(rank);
    expert_dp_groups[shape.group_color(rank, loom::kExpertDataParallelAxes)].push_back(rank);
    expert_shard_groups[shape.group_color(rank, loom::kExpertShardAxes)].push_back(rank);
  }
  // Rank 13: tp 1, dp 6 (ep 0, shard 1, replica 1).
  CHECK(ep_groups.at(shape.group_color(13, loom::kExpertAxes)) == std::vector<int64_t>{13, 15});
  CHECK(expert_dp_groups.at(shape.group_color(13, loom::kExpertDataParallelAxes)) == std::vector<int64_t>{1, 5, 9, 13});
  CHECK(expert_shard_groups.at(shape.group_color(13, loom::kExpertShardAxes)) == std::vector<int64_t>{9, 13});
  // ep must divide the dp the world leaves.
  c.parallel.shard_size = 0;
  c.parallel.zero = loom::ZeroStage::kNone;
  CHECK_THROWS_WITH(loom::MeshShape(c.parallel).resolved(c, 6),
                    Catch::Contains("parallel.ep = 2 does not divide parallel.dp x parallel.cp = 3 x 1"));
}

namespace {
// The groups over `axes` of every rank of `shape` (color -> ranks in key order), checking that each rank's
// key is its place in its group.
std::map<int64_t, std::vector<int64_t>> mesh_groups_of(const loom::MeshShape& shape, loom::AxisSet axes) {
  std::map<int64_t, std::vector<int64_t>> out;
  for (int64_t rank = 0; rank < shape.world_size(); ++rank) {
    auto& group = out[shape.group_color(rank, axes)];
    CHECK(shape.group_key(rank, axes) == static_cast<int64_t>(group.size()));
    group.push_back(rank);
  }
  return out;
}
std::vector<std::vector<int64_t>> mesh_group_lists(const loom::MeshShape& shape, loom::AxisSet axes) {
  std::vector<std::vector<int64_t>> out;
  for (auto& [color, ranks] : mesh_groups_of(shape, axes)) out.push_back(ranks);
  std::sort(out.begin(), out.end());
  return out;
}
using MeshRankLists = std::vector<std::vector<int64_t>>;
}  // namespace

TEST_CASE("mesh: expert parallelism folds dp x cp, its groups ep consecutive ranks, cp innermost", "[mesh]") {
  loom::Config c;
  c.model.moe.num_experts = 8;
  c.parallel.dp = -1;
  c.parallel.cp = 2;
  c.data.seq_len = 64;
  c.model.dropout = 0;
  {  // ep 4 = cp 2 x dp 2 at tp 2: rank = tp + 2 * (cp + 2 * dp); an ep group is tp's whole dp x cp.
    c.parallel.tp = 2;
    c.parallel.ep = 4;
    const loom::MeshShape shape = loom::MeshShape(c.parallel).resolved(c, 8);
    CHECK(shape.describe() == "dp=2 cp=2 (ep=4) tp=2 pp=1");
    CHECK(mesh_group_lists(shape, loom::kExpertAxes) == MeshRankLists{{0, 2, 4, 6}, {1, 3, 5, 7}});
    CHECK(mesh_group_lists(shape, loom::kExpertDataParallelAxes) == MeshRankLists{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}});
    CHECK(mesh_group_lists(shape, loom::kCpAxes) == MeshRankLists{{0, 2}, {1, 3}, {4, 6}, {5, 7}});
    for (int64_t rank = 0; rank < 8; ++rank) {
      const loom::Mesh mesh(c, 8, rank);
      CHECK(mesh.ep() == 4);
      CHECK(mesh.cp() == 2);
      CHECK(mesh.coord(loom::kExpertAxes) == rank / 2);  // cp + 2 * dp: its place in dp x cp
      CHECK(mesh.coord(loom::kCpAxes) == (rank / 2) % 2);
      CHECK(mesh.coord(loom::kDpAxes) == rank / 4);
    }
  }
  {  // dp 4 with shard_size 2, cp 2, ep 4: rank = cp + 2 * dp, dp = shard + 2 * replica; an ep group is 4
     // consecutive ranks (dp 2 x cp 2), the experts' replicas 4 apart, each its own expert shard.
    c.parallel.tp = 1;
    c.parallel.zero = loom::ZeroStage::kOptimizer;
    c.parallel.shard_size = 2;
    const loom::MeshShape shape = loom::MeshShape(c.parallel).resolved(c, 8);
    CHECK(shape.describe() == "dp=4 (shard_size=2) cp=2 (ep=4) tp=1 pp=1");
    const std::vector<std::pair<std::string, int64_t>> sizes{{"dp", 4}, {"cp", 2}, {"tp", 1}, {"pp", 1}, {"shard_size", 2}, {"ep", 4}};
    CHECK(shape.named_sizes() == sizes);
    CHECK(mesh_group_lists(shape, loom::kExpertAxes) == MeshRankLists{{0, 1, 2, 3}, {4, 5, 6, 7}});
    CHECK(mesh_group_lists(shape, loom::kExpertDataParallelAxes) == MeshRankLists{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
    CHECK(mesh_group_lists(shape, loom::kExpertShardAxes) == MeshRankLists{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}});
    CHECK(mesh_group_lists(shape, loom::kShardAxes) == MeshRankLists{{0, 1, 2, 3}, {4, 5, 6, 7}});
    CHECK(mesh_group_lists(shape, loom::kReplicaAxes) == MeshRankLists{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  }
  {  // ep 2 dividing cp 4, dp 2: rank = cp + 4 * dp; an ep group is 2 consecutive cp ranks, the experts'
     // data-parallel ranks the other half of the cp group and the other dp, cp_outer first.
    c.parallel.zero = loom::ZeroStage::kNone;
    c.parallel.shard_size = 0;
    c.parallel.cp = 4;
    c.parallel.ep = 2;
    const loom::MeshShape shape = loom::MeshShape(c.parallel).resolved(c, 8);
    CHECK(shape.describe() == "dp=2 cp=4 (ep=2) tp=1 pp=1");
    CHECK(mesh_group_lists(shape, loom::kExpertAxes) == MeshRankLists{{0, 1}, {2, 3}, {4, 5}, {6, 7}});
    CHECK(mesh_groups_of(shape, loom::kExpertDataParallelAxes).at(shape.group_color(5, loom::kExpertDataParallelAxes)) ==
          std::vector<int64_t>{1, 3, 5, 7});
    CHECK(mesh_group_lists(shape, loom::kCpAxes) == MeshRankLists{{0, 1, 2, 3}, {4, 5, 6, 7}});
    CHECK(mesh_group_lists(shape, loom::kDpAxes) == MeshRankLists{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
    const loom::Mesh mesh(c, 8, 5);
    CHECK(mesh.coords_name() == "dp1-cp1-tp0-pp0");
    CHECK(mesh.coord(loom::kShardAxes) == 5);
  }
  {  // ep 1 under cp: the expert groups are a rank alone and the dense ones.
    c.parallel.ep = 1;
    c.parallel.cp = 2;
    const loom::MeshShape shape = loom::MeshShape(c.parallel).resolved(c, 4);
    CHECK(mesh_group_lists(shape, loom::kExpertAxes) == MeshRankLists{{0}, {1}, {2}, {3}});
    CHECK(mesh_group_lists(shape, loom::kExpertDataParallelAxes) == MeshRankLists{{0, 1, 2, 3}});
  }
  // Refused: an ep neither a multiple nor a divisor of cp, and one that does not divide dp x cp.
  c.parallel.ep = 3;
  CHECK_THROWS_WITH(loom::MeshShape(c.parallel).resolved(c, 6),
                    Catch::Contains("parallel.ep = 3 with parallel.cp = 2: an ep group is ep consecutive ranks of dp x cp"));
  c.parallel.ep = 4;
  CHECK_THROWS_WITH(loom::MeshShape(c.parallel).resolved(c, 2),
                    Catch::Contains("parallel.ep = 4 does not divide parallel.dp x parallel.cp = 1 x 2"));
}
