#pragma once
// One function per lab, each in its own file lab/<name>.cpp; registry.cpp lists them in this order
// (issue 7's, then issue 27's new labs).
#include "lab/lab.h"

namespace gf::lab {

Lab leak_lab();         // lab/leak.cpp: the causal mask
Lab padding_lab();      // lab/padding.cpp: padding masks and ignore_index
Lab nan_lab();          // lab/nan.cpp: a fully masked row
Lab scale_lab();        // lab/scale.cpp: why 1/sqrt(d_k)
Lab depth_lab();        // lab/depth.cpp: amplification and rank collapse
Lab entropy_lab();      // lab/entropy.cpp: attention entropy collapse
Lab graph_lab();        // lab/graph.cpp: the autograd graph of a decoder layer
Lab kvcache_lab();      // lab/kvcache.cpp: cached = recomputed decoding, its cost and its bytes
Lab gqa_lab();          // lab/gqa.cpp: grouped-query attention (Ainslie et al. 2023)
Lab smoothing_lab();    // lab/smoothing.cpp: label smoothing and calibration (Müller et al. 2019)
Lab precision_lab();    // lab/precision.cpp: what bfloat16 does to gradient flow

}  // namespace gf::lab
