#include "models/positions.h"

#include <cmath>
#include <vector>

#include "models/layers.h"

namespace loom {

namespace {

// (T) float positions on the device of `to`.
torch::Tensor positions(int64_t first, int64_t length, const torch::TensorOptions& to) {
  return torch::arange(first, first + length, to.dtype(torch::kFloat));
}

// (n) base^(-2i/dim) for i in [0, n), the frequencies of both sinusoids and RoPE.
torch::Tensor inverse_frequencies(double base, int64_t dim, const torch::TensorOptions& to) {
  const auto exponents = torch::arange(0, dim, 2, to.dtype(torch::kFloat)) / static_cast<double>(dim);
  return 1.0 / torch::pow(base, exponents);
}

// p (...) float positions -> (..., n) angles p * frequency.
torch::Tensor angles_at(const torch::Tensor& p, const torch::Tensor& frequencies) {
  return p.unsqueeze(-1) * frequencies;
}

// p (...) float -> (..., C): sin and cos interleaved.
torch::Tensor sinusoids(const torch::Tensor& p, int64_t dim, const torch::TensorOptions& options) {
  const auto angles = angles_at(p, inverse_frequencies(10000.0, dim, options));  // (..., C/2)
  return torch::stack({angles.sin(), angles.cos()}, -1).flatten(-2).to(options.dtype());
}

// p (...) float -> cos and sin (..., D).
std::pair<torch::Tensor, torch::Tensor> rope_at(torch::Tensor p, int64_t head_dim, const RopeOptions& options,
                                                const torch::TensorOptions& to) {
  const double d = static_cast<double>(head_dim);
  const double theta =
      options.scaling == RopeScaling::kNtk ? options.theta * std::pow(options.factor, d / (d - 2.0)) : options.theta;
  if (options.scaling == RopeScaling::kLinear) p = p / options.factor;
  const auto angles = angles_at(p, inverse_frequencies(theta, head_dim, to));  // (..., D/2)
  const auto both = torch::cat({angles, angles}, -1);                           // (..., D)
  return {both.cos().to(to.dtype()), both.sin().to(to.dtype())};
}

}  // namespace

torch::Tensor sinusoidal_positions(int64_t first, int64_t length, int64_t dim, const torch::TensorOptions& options) {
  return sinusoids(positions(first, length, options), dim, options);
}

torch::Tensor sinusoidal_positions_at(const torch::Tensor& p, int64_t dim, const torch::TensorOptions& options) {
  return sinusoids(p.to(options.device(), torch::kFloat), dim, options);
}

std::pair<torch::Tensor, torch::Tensor> rope_cos_sin(int64_t first, int64_t length, int64_t head_dim,
                                                     const RopeOptions& options, const torch::TensorOptions& to) {
  return rope_at(positions(first, length, to), head_dim, options, to);
}

std::pair<torch::Tensor, torch::Tensor> rope_cos_sin_at(const torch::Tensor& p, int64_t head_dim,
                                                        const RopeOptions& options, const torch::TensorOptions& to) {
  auto [cos, sin] = rope_at(p.to(to.device(), torch::kFloat), head_dim, options, to);  // (B, T, D)
  return {cos.unsqueeze(1), sin.unsqueeze(1)};
}

torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const auto rotated = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);  // rotate_half
  return x * cos + rotated * sin;
}

torch::Tensor alibi_slopes(int64_t n_heads) {
  auto power_of_two = [](int64_t n) {
    std::vector<float> s;
    for (int64_t i = 1; i <= n; ++i) s.push_back(static_cast<float>(std::pow(2.0, -8.0 * i / n)));
    return s;
  };
  int64_t lower = 1;
  while (lower * 2 <= n_heads) lower *= 2;
  std::vector<float> slopes = power_of_two(lower);
  const std::vector<float> higher = power_of_two(2 * lower);
  for (int64_t i = 0; static_cast<int64_t>(slopes.size()) < n_heads; i += 2) slopes.push_back(higher[i]);
  return torch::tensor(slopes);
}

}  // namespace loom
