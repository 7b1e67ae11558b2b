#pragma once
// gradflow's public API in one include: `#include <gradflow/gradflow.h>` in a program built against
// the installed package (find_package(gradflow), or pkg-config gradflow; examples/ shows both).
// Every header below can also be included on its own, as <gradflow/nn/linear.h>.
//
// Layers, each using only those before it: tensor (data and kernels) -> autograd (Variables and
// their gradients) -> nn (modules with PyTorch's names) -> optim (Adam and its schedule) -> train
// (data, the trainer, decoding, scores). Kernels other than the random fills, threading and the
// trainer's own parts (progress bar, signals, data-parallel collectives, SVG drawing) are left out
// here: they are the library's internals, installed because the headers above include them.

// ---- tensor: the n-d array, its element types, errors, seeded random fills, safetensors files
#include "tensor/check.h"
#include "tensor/dtype.h"
#include "tensor/io/safetensors.h"
#include "tensor/kernels/random.h"
#include "tensor/runtime.h"
#include "tensor/shape.h"
#include "tensor/tensor.h"

// ---- autograd: Variable, backward, hooks, grad mode, gradient checks, the differentiable ops
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/graph_dot.h"
#include "autograd/ops/arith.h"
#include "autograd/ops/attention.h"
#include "autograd/ops/cross_entropy.h"
#include "autograd/ops/dropout.h"
#include "autograd/ops/indexing.h"
#include "autograd/ops/layer_norm.h"
#include "autograd/ops/matmul.h"
#include "autograd/ops/reduce.h"
#include "autograd/ops/shape.h"
#include "autograd/ops/softmax.h"
#include "autograd/ops/unary.h"
#include "autograd/variable.h"

// ---- nn: modules, the Transformer and its layers, and the registries of layer kinds
#include "nn/activation.h"
#include "nn/decoder_only.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/ffn.h"
#include "nn/init.h"
#include "nn/kv_cache.h"
#include "nn/layer_norm.h"
#include "nn/layer_options.h"
#include "nn/linear.h"
#include "nn/masks.h"
#include "nn/module.h"
#include "nn/module_list.h"
#include "nn/multihead_attention.h"
#include "nn/norm.h"
#include "nn/positional_encoding.h"
#include "nn/registry.h"
#include "nn/rms_norm.h"
#include "nn/scale_norm.h"
#include "nn/seq2seq.h"
#include "nn/transformer_decoder.h"
#include "nn/transformer_encoder.h"

// ---- optim: Adam, gradient clipping, the warmup / inverse-square-root schedule
#include "optim/adam.h"

// ---- train: text and vocabularies, batches, the trainer, decoding, scores. The built-in
// English->Korean corpus is a library of its own (gradflow::korean, <gradflow/korean/corpus_ko.h>):
// a run without --data is handed it (korean/builtin_corpus.h).
#include "train/data/batching.h"
#include "train/data/parallel_text.h"
#include "train/run/run_data.h"
#include "train/data/utf8.h"
#include "train/data/vocab.h"
#include "train/decode/decode.h"
#include "train/eval/translator.h"
#include "train/eval/bleu.h"
#include "train/eval/score.h"
#include "train/run/batch_loss.h"
#include "train/run/model.h"
#include "train/run/run_config.h"
#include "train/loop/trainer.h"
