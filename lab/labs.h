#pragma once
// One function per lab, each in its own file lab/<name>.cpp; registry.cpp lists them in this order
// (issue 7's, then issue 27's new labs).
#include "lab/lab.h"

namespace gf::lab {

Lab attribution_lab();  // lab/attribution.cpp: attention is not gradient
Lab exposure_lab();     // lab/exposure.cpp: exposure bias
Lab crossattn_lab();    // lab/crossattn.cpp: cross-attention, the encoder's only gradient path

}  // namespace gf::lab
