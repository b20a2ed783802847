// Learning-rate schedules against their closed forms, written out here independently of optim/schedule.cpp.
#include <cmath>
#include <sstream>

#include "core/config.h"
#include "optim/schedule.h"
#include "test_util.h"

namespace {

std::string num(double v) {
  std::ostringstream out;
  out.precision(17);
  out << v;
  return out.str();
}

loom::Config schedule_config(const std::string& name, int64_t warmup, double lr, double min_lr, int64_t max_steps,
                             int64_t total_steps = 0, double decay_fraction = 0.2) {
  return loom::parse_config("", "x.yaml",
                            {"schedule.name=" + name, "schedule.warmup_steps=" + std::to_string(warmup),
                             "optim.lr=" + num(lr), "schedule.min_lr=" + num(min_lr),
                             "train.max_steps=" + std::to_string(max_steps),
                             "schedule.total_steps=" + std::to_string(total_steps),
                             "schedule.decay_fraction=" + num(decay_fraction), "model.d_model=256"});
}

void check_close(double actual, double expected) { CHECK(actual == Approx(expected).epsilon(1e-12).margin(1e-15)); }

}  // namespace

TEST_CASE("schedule: warmup_cosine", "[schedule]") {
  const double lr = 1e-3, min_lr = 1e-4;
  const loom::LrSchedule schedule(schedule_config("warmup_cosine", 10, lr, min_lr, 100));
  // Warmup: step k (0-based) uses lr * (k + 1) / 10.
  check_close(schedule.at(0), 1e-4);
  check_close(schedule.at(4), 5e-4);
  check_close(schedule.at(9), lr);
  // Decay over steps 11..100 (1-based): cosine from lr to min_lr.
  for (int64_t s : {11, 20, 33, 55, 77, 99, 100}) {
    const double p = (s - 10) / 90.0;
    check_close(schedule.at(s - 1), min_lr + (lr - min_lr) * (std::cos(M_PI * p) + 1.0) / 2.0);
  }
  check_close(schedule.at(54), (lr + min_lr) / 2);  // halfway through the decay
  check_close(schedule.at(99), min_lr);
  check_close(schedule.at(500), min_lr);  // past the horizon it stays at min_lr
  // It only ever decreases after warmup.
  for (int64_t k = 10; k < 120; ++k) CHECK(schedule.at(k) <= schedule.at(k - 1));
}

TEST_CASE("schedule: schedule.total_steps overrides train.max_steps as the horizon", "[schedule]") {
  const loom::LrSchedule schedule(schedule_config("warmup_cosine", 0, 2e-3, 0.0, 1000, 40));
  check_close(schedule.at(19), 1e-3);  // s = 20 of 40, no warmup: half of the peak
  check_close(schedule.at(0), 2e-3 * (1 + std::cos(M_PI / 40)) / 2);
  check_close(schedule.at(39), 0.0);
  check_close(schedule.at(999), 0.0);
}

TEST_CASE("schedule: inverse_sqrt (Noam)", "[schedule]") {
  const double scale = 2.0;
  const loom::LrSchedule schedule(schedule_config("inverse_sqrt", 400, scale, 0.0, 10000));
  for (int64_t s : {1, 2, 100, 399, 400, 401, 1600, 10000}) {
    const double warm = s * std::pow(400.0, -1.5), decay = 1.0 / std::sqrt(static_cast<double>(s));
    check_close(schedule.at(s - 1), scale / 16.0 * (s < 400 ? warm : decay));  // 256^-0.5 = 1/16
  }
  check_close(schedule.at(399), scale / 16.0 / 20.0);       // the peak, at s = warmup: 1/sqrt(400)
  check_close(schedule.at(1599), schedule.at(399) / 2.0);  // 4x the steps, half the rate
}

TEST_CASE("schedule: constant", "[schedule]") {
  const loom::LrSchedule schedule(schedule_config("constant", 5, 3e-4, 0.0, 100));
  check_close(schedule.at(0), 3e-4 / 5);
  check_close(schedule.at(2), 3e-4 * 3 / 5);
  for (int64_t k : {4, 5, 50, 99, 1000}) check_close(schedule.at(k), 3e-4);
  const loom::LrSchedule no_warmup(schedule_config("constant", 0, 3e-4, 0.0, 100));
  check_close(no_warmup.at(0), 3e-4);
}

TEST_CASE("schedule: linear", "[schedule]") {
  const double lr = 1e-3, min_lr = 2e-4;
  const loom::LrSchedule schedule(schedule_config("linear", 10, lr, min_lr, 110));
  check_close(schedule.at(0), lr / 10);
  check_close(schedule.at(9), lr);
  for (int64_t s : {11, 35, 60, 85, 110}) check_close(schedule.at(s - 1), lr - (lr - min_lr) * (s - 10) / 100.0);
  check_close(schedule.at(59), (lr + min_lr) / 2);
  check_close(schedule.at(109), min_lr);
  check_close(schedule.at(200), min_lr);
}

TEST_CASE("schedule: wsd (warmup, stable, decay)", "[schedule]") {
  const double lr = 1e-3, min_lr = 1e-5;
  const loom::LrSchedule schedule(schedule_config("wsd", 10, lr, min_lr, 100, 0, 0.2));
  check_close(schedule.at(0), lr / 10);
  check_close(schedule.at(9), lr);
  for (int64_t s : {11, 50, 80}) check_close(schedule.at(s - 1), lr);  // stable until 80% of the steps
  for (int64_t s : {81, 90, 95, 100}) check_close(schedule.at(s - 1), lr - (lr - min_lr) * (s - 80) / 20.0);
  check_close(schedule.at(89), (lr + min_lr) / 2);
  check_close(schedule.at(150), min_lr);

  // A decay phase longer than the post-warmup part starts right after warmup.
  const loom::LrSchedule long_decay(schedule_config("wsd", 10, lr, 0.0, 100, 0, 0.95));
  for (int64_t s : {11, 55, 100}) check_close(long_decay.at(s - 1), lr * (1 - (s - 10) / 90.0));
}
