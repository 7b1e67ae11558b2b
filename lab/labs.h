#pragma once
// One function per lab, each in its own file lab/<name>.cpp; registry.cpp lists them.
#include "lab/lab.h"

namespace gf::lab {

Lab scale_lab();  // lab/scale.cpp: why 1/sqrt(d_k)
Lab entropy_lab();  // lab/entropy.cpp: attention entropy collapse
Lab graph_lab();  // lab/graph.cpp: the autograd graph of a decoder layer

}  // namespace gf::lab
