#pragma once
// Every op of the backward graph, named once. A Node says which op it is (Node::kind()); its
// name, which the profiler (profile.h), anomaly reports and the graph export (graph_dot.h) key
// on, comes from this table. A new op adds its enumerator to Op and its name to kOpNames at the
// same place: the static_assert below refuses a table out of step with the enum's count
// (ggml keeps GGML_OP_NAME in step with its enum the same way).
#include <cstddef>
#include <iterator>

namespace gf {

enum class Op : int {
  AccumulateGrad,  // a leaf's gradient sink
  // arithmetic (ops/arith.h, ops/unary.h)
  Add, AddScalar, Sub, Mul, MulScalar, Div, Pow, Where,
  Exp, Log, Sqrt, Tanh, Relu, Gelu, Sigmoid,
  // reductions and products (ops/reduce.h, ops/matmul.h)
  Sum, Mean, Max, Matmul, Linear,
  // normalisation, attention, losses (ops/softmax.h, ops/layer_norm.h, ops/attention.h, ops/cross_entropy.h)
  Softmax, LogSoftmax, LayerNorm, AddLayerNorm, Attention, CrossEntropy, LinearCrossEntropy,
  // dropout (ops/dropout.h)
  Dropout, ReluDropout,
  // indexing and shape (ops/indexing.h, ops/shape.h)
  IndexSelect, MaskedFill, Narrow, Expand, Concat, Contiguous,
  Reshape, Unsqueeze, Squeeze, Permute, Transpose,
  Count  // not an op: the number of ops
};

inline constexpr const char* kOpNames[] = {
    "AccumulateGrad",
    "add", "add_scalar", "sub", "mul", "mul_scalar", "div", "pow", "where",
    "exp", "log", "sqrt", "tanh", "relu", "gelu", "sigmoid",
    "sum", "mean", "max", "matmul", "linear",
    "softmax", "log_softmax", "layer_norm", "add_layer_norm", "attention", "cross_entropy", "linear_cross_entropy",
    "dropout", "relu_dropout",
    "index_select", "masked_fill", "narrow", "expand", "concat", "contiguous",
    "reshape", "unsqueeze", "squeeze", "permute", "transpose",
};
static_assert(std::size(kOpNames) == static_cast<std::size_t>(Op::Count), "kOpNames must name every Op, in the enum's order");

constexpr const char* op_name(Op op) { return kOpNames[static_cast<std::size_t>(op)]; }

}  // namespace gf
