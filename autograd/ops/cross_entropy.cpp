// cross_entropy fused with log_softmax: the forward keeps the logits and one log-sum-exp per row
// (no (N, C) probability tensor); the backward writes (softmax - smoothed one-hot) * g / count
// in one pass, over the logits themselves when nothing else can see them.
#include "autograd/ops/cross_entropy.h"

#include <algorithm>

#include "autograd/function.h"
#include "autograd/grad_mode.h"
#include "tensor/kernels/bf16.h"
#include "tensor/kernels/binary.h"
#include "tensor/kernels/cross_entropy.h"
#include "tensor/kernels/matmul.h"
#include "tensor/kernels/reduce.h"

namespace gf {

struct CrossEntropyBackward : Node {
  Tensor logits;  // (N, C)
  Tensor lse;     // (N,)
  Tensor target;  // (N,) int64
  int64_t ignore_index = -100;
  int64_t count = 0;
  double label_smoothing = 0.0;
  Op kind() const override { return Op::CrossEntropy; }
  std::vector<Tensor> backward(const Tensor& g) override {  // g: ()
    const double scale = count > 0 ? g.item() / static_cast<double>(count) : 0.0;
    // The logits are (N, V), the step's largest tensor. On the last backward, when no other
    // tensor or view shares their buffer (no user variable, hook or retain_grad holds them), the
    // gradient is written over them instead of into a second (N, V) buffer.
    const bool in_place = last_backward && logits.is_contiguous() && logits.storage().use_count() == 1;
    return {kernels::cross_entropy_backward(logits, lse, target, ignore_index, label_smoothing, scale, in_place)};  // (N, C)
  }
  std::vector<SavedTensor> saved() override { return {{"logits", &logits}, {"lse", &lse}, {"target", &target}}; }
};

Variable cross_entropy(const Variable& logits, const Tensor& target, int64_t ignore_index, double label_smoothing) {
  kernels::CrossEntropyResult r = kernels::cross_entropy(logits.data(), target, ignore_index, label_smoothing);
  auto node = make_node<CrossEntropyBackward>({&logits});
  if (node) {
    node->logits = logits.data();
    node->lse = std::move(r.lse);
    node->target = target;
    node->ignore_index = ignore_index;
    node->count = r.count;
    node->label_smoothing = label_smoothing;
  }
  return Variable::from_op(std::move(r.loss), node);
}

Variable cross_entropy(const Variable& logits, const Variable& target, int64_t ignore_index, double label_smoothing) {
  return cross_entropy(logits, target.data(), ignore_index, label_smoothing);
}

// ---- linear_cross_entropy: the gradients are made in forward, chunk by chunk ----
struct LinearCrossEntropyBackward : Node {
  Tensor grad_h;       // (N, D): d loss / d h for an upstream gradient of 1; kept if h needs it
  Tensor grad_weight;  // (V, D), likewise
  Tensor grad_bias;    // (V), likewise
  Op kind() const override { return Op::LinearCrossEntropy; }
  std::vector<Tensor> backward(const Tensor& g) override {  // g: ()
    const double s = g.item();
    auto scaled = [s](const Tensor& t) { return !t.defined() || s == 1.0 ? t : kernels::mul_scalar(t, s); };
    return {scaled(grad_h), scaled(grad_weight), scaled(grad_bias)};
  }
  std::vector<SavedTensor> saved() override { return {{"grad_h", &grad_h}, {"grad_weight", &grad_weight}, {"grad_bias", &grad_bias}}; }
};

namespace {

void check_linear_cross_entropy(const Variable& h, const Variable& weight, const Variable& bias, const Tensor& target) {
  GF_CHECK(h.ndim() == 2 && weight.ndim() == 2 && h.size(1) == weight.size(1) && target.ndim() == 1 && target.size(0) == h.size(0),
           "linear_cross_entropy: h {}, weight {} and target {}: expected h (N, D), weight (V, D) and target (N,)", shape_str(h.shape()),
           shape_str(weight.shape()), shape_str(target.shape()));
  // A weight kept in bfloat16 (nn::lay_out_for_decoding, for bf16 decoding and scoring) is read by
  // bf16 products only, with no gradient for it.
  const bool kept_bf16 = weight.dtype() == DType::BFloat16 && kernels::bf16_products(h.dtype()) &&
                         !(GradMode::enabled() && weight.requires_grad());
  GF_CHECK((h.dtype() == weight.dtype() || kept_bf16) && (!bias.defined() || bias.dtype() == h.dtype()),
           "linear_cross_entropy: h {} {} and weight {} {} (and bias) must share a dtype (a bfloat16 weight: under bf16 products, "
           "without its gradient)", dtype_name(h.dtype()), shape_str(h.shape()), dtype_name(weight.dtype()), shape_str(weight.shape()));
  GF_CHECK(!bias.defined() || bias.shape() == Shape{weight.size(0)}, "linear_cross_entropy: bias {} does not match weight {}",
           shape_str(bias.shape()), shape_str(weight.shape()));
}

}  // namespace

Variable linear_cross_entropy(const Variable& h, const Variable& weight, const Variable& bias, const Tensor& target, int64_t ignore_index,
                              double label_smoothing, int64_t rows_per_chunk) {
  check_linear_cross_entropy(h, weight, bias, target);
  // Checked here, on the whole batch, so that an error names the row in it (a chunk's kernel
  // would name the row within the chunk).
  check_dtype(target, DType::Int64, "linear_cross_entropy");
  const int64_t count = kernels::count_targets(target, weight.size(0), ignore_index, "linear_cross_entropy", "weight", weight.shape());
  const int64_t N = h.size(0), D = h.size(1), V = weight.size(0);
  Tensor hc = h.data().contiguous(), w = weight.data().contiguous(), b = bias.defined() ? bias.data() : Tensor();  // (N, D), (V, D), (V)
  // Under bf16 the three products take h and W rounded to bfloat16 once for all chunks, and each
  // chunk's logit gradient rounded (in place) for its two products; the loss and its gradient
  // stay float32. The chunks are half as large: the step's memory peak is here, at a chunk's
  // float32 logits, and the faster products lose nothing to smaller calls.
  const bool bf16 = kernels::bf16_products(h.dtype());
  const int64_t per_chunk = bf16 ? kLinearCrossEntropyChunk / 2 : kLinearCrossEntropyChunk;
  const int64_t chunk = rows_per_chunk > 0 ? rows_per_chunk : std::max<int64_t>(1, per_chunk / std::max<int64_t>(V, 1));
  const Tensor hb = bf16 ? kernels::to_bf16(hc) : Tensor(), wb = bf16 ? kernels::bf16_weight(w) : Tensor();  // (N, D), (V, D)
  auto node = make_node<LinearCrossEntropyBackward>({&h, &weight, &bias});
  const bool need_h = node && node->needs_grad(0), need_w = node && node->needs_grad(1), need_b = node && node->needs_grad(2);
  if (need_h) node->grad_h = Tensor::empty({N, D}, h.dtype());            // (N, D): every row written once
  if (need_w) node->grad_weight = Tensor::zeros({V, D}, h.dtype());       // (V, D): chunks add into it
  if (need_b) node->grad_bias = Tensor::zeros({V}, h.dtype());            // (V)
  // Every chunk's gradient is already divided by the whole batch's count, as the unfused backward.
  const double scale = count > 0 ? 1.0 / static_cast<double>(count) : 0.0;
  double total = 0;  // summed losses of the counted rows
  for (int64_t r0 = 0; r0 < N; r0 += chunk) {
    const int64_t rows = std::min(chunk, N - r0);
    Tensor hr = hc.narrow(0, r0, rows), tr = target.narrow(0, r0, rows);  // (rows, D), (rows,)
    Tensor logits = bf16 ? kernels::linear_bf16(hb.narrow(0, r0, rows), wb, b) : kernels::linear(hr, w, b);  // (rows, V)
    if (!node) {
      total += kernels::cross_entropy(logits, tr, ignore_index, label_smoothing).total;
      continue;
    }
    // The loss and d loss / d logits in one pass over each row (over the logits' own buffer), with
    // the bias gradient's column sums; then the two GEMMs of linear's backward.
    Tensor bias_part = need_b ? Tensor::empty({V}, h.dtype()) : Tensor();  // (V)
    total += kernels::cross_entropy_and_backward(logits, tr, ignore_index, label_smoothing, scale, need_b ? &bias_part : nullptr, bf16)
                 .total;
    const Tensor& gl = logits;  // (rows, V): now the gradient; under bf16 rounded in place, rows 2V apart
    if (bf16) {
      const bfloat16 *pg = reinterpret_cast<const bfloat16*>(gl.data<float>()), *ph = hb.data<bfloat16>() + r0 * D;
      if (need_h)  // grad_h[rows] = gl @ W
        kernels::gemm_bf16(false, false, rows, D, V, pg, 2 * V, wb.data<bfloat16>(), D, 0.0f, node->grad_h.data<float>() + r0 * D, D);
      if (need_w)  // grad_W += gl^T @ h[rows]
        kernels::gemm_bf16(true, false, V, D, rows, pg, 2 * V, ph, D, 1.0f, node->grad_weight.data<float>(), D);
      if (need_b) kernels::add_(node->grad_bias, bias_part);  // (V)
      continue;
    }
    dispatch_float(h.dtype(), "linear_cross_entropy", [&]<class T>() {
      if (need_h)  // grad_h[rows] = gl @ W
        kernels::gemm<T>(false, false, rows, D, V, gl.data<T>(), V, w.data<T>(), D, T(0), node->grad_h.data<T>() + r0 * D, D);
      if (need_w)  // grad_W += gl^T @ h[rows]
        kernels::gemm<T>(true, false, V, D, rows, gl.data<T>(), V, hr.data<T>(), D, T(1), node->grad_weight.data<T>(), D);
    });
    if (need_b) kernels::add_(node->grad_bias, bias_part);  // (V)
  }
  Tensor loss = Tensor::scalar(count > 0 ? total / static_cast<double>(count) : 0.0, h.dtype());  // ()
  return Variable::from_op(std::move(loss), node);
}

}  // namespace gf
