#pragma once
// One function per lab, each in its own file lab/<name>.cpp; registry.cpp lists them.
#include "lab/lab.h"

namespace gf::lab {

Lab scale_lab();  // lab/scale.cpp: why 1/sqrt(d_k)
Lab entropy_lab();  // lab/entropy.cpp: attention entropy collapse
Lab graph_lab();  // lab/graph.cpp: the autograd graph of a decoder layer
Lab leak_lab();  // lab/leak.cpp: the causal mask
Lab padding_lab();  // lab/padding.cpp: padding masks and ignore_index
Lab nan_lab();  // lab/nan.cpp: a fully masked row
Lab scale_lab();        // lab/scale.cpp: why 1/sqrt(d_k)
Lab attribution_lab();  // lab/attribution.cpp: attention is not gradient
Lab exposure_lab();     // lab/exposure.cpp: exposure bias
Lab norm_lab();  // lab/norm.cpp: Post-LN vs Pre-LN gradients
Lab depth_lab();  // lab/depth.cpp: amplification and rank collapse

}  // namespace gf::lab
