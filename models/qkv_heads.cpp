#include "models/qkv_heads.h"

#include "core/error.h"

namespace loom {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The (B, n, T, D) view of heads [first, first + n) of a (B, T, W) buffer, W = (H + 2K) D.
torch::Tensor heads_view(const torch::Tensor& packed, int64_t first, int64_t n, int64_t D) {
  const int64_t B = packed.size(0), T = packed.size(1);
  return packed.narrow(2, first * D, n * D).view({B, T, n, D}).transpose(1, 2);
}

// Whether `grad` is exactly heads_view(buffer, first, n, D) of a (B, T, W) buffer of `dtype` that starts
// `offset` elements into grad's storage.
bool is_heads_view(const torch::Tensor& grad, c10::ScalarType dtype, int64_t offset, int64_t first, int64_t D,
                   int64_t W) {
  const int64_t T = grad.size(2);
  return grad.scalar_type() == dtype && grad.storage_offset() == offset + first * D &&
         grad.strides() == c10::IntArrayRef({T * W, D, W, 1});
}

struct QkvHeads : public torch::autograd::Function<QkvHeads> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& qkv, int64_t H, int64_t K, int64_t D) {
    ctx->saved_data["H"] = H;
    ctx->saved_data["K"] = K;
    ctx->saved_data["D"] = D;
    ctx->saved_data["sizes"] = qkv.sizes().vec();
    ctx->saved_data["dtype"] = qkv.scalar_type();
    const auto packed = qkv.contiguous();
    return {heads_view(packed, 0, H, D), heads_view(packed, H, K, D), heads_view(packed, H + K, K, D)};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const int64_t H = ctx->saved_data["H"].toInt(), K = ctx->saved_data["K"].toInt(), D = ctx->saved_data["D"].toInt();
    const auto sizes = ctx->saved_data["sizes"].toIntVector();
    const auto dtype = ctx->saved_data["dtype"].toScalarType();
    const int64_t first[3] = {0, H, H + K};
    const int64_t B = sizes[0], T = sizes[1], W = sizes[2];
    // Gradients that already lie in one buffer (q's view starts where it does) are that buffer's.
    bool packed = true;
    for (int i = 0; i < 3 && packed; ++i)
      packed = grads[i].defined() && grads[i].is_alias_of(grads[0]) &&
               is_heads_view(grads[i], dtype, grads[0].storage_offset(), first[i], D, W);
    if (packed)
      return {grads[0].as_strided({B, T, W}, {T * W, W, 1}, grads[0].storage_offset()), torch::Tensor(),
              torch::Tensor(), torch::Tensor()};
    const auto options = (grads[0].defined() ? grads[0] : grads[1].defined() ? grads[1] : grads[2]).options();
    auto grad = torch::empty({B, T, W}, options.dtype(dtype));
    const int64_t count[3] = {H, K, K};
    for (int i = 0; i < 3; ++i) {
      auto part = heads_view(grad, first[i], count[i], D);
      if (grads[i].defined())
        part.copy_(grads[i]);
      else
        part.zero_();
    }
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> qkv_heads(const torch::Tensor& qkv, int64_t heads,
                                                                  int64_t kv_heads, int64_t head_dim) {
  LOOM_CHECK(qkv.dim() == 3 && qkv.size(2) == (heads + 2 * kv_heads) * head_dim,
             "qkv_heads takes (B, T, (H + 2K) D), got ", qkv.sizes());
  const auto out = QkvHeads::apply(qkv, heads, kv_heads, head_dim);
  return {out[0], out[1], out[2]};
}

}  // namespace loom
