#pragma once
// One function per lab, each in its own file lab/<name>.cpp; registry.cpp lists them in this order
// (issue 7's, then issue 27's new labs).
#include "lab/lab.h"

namespace gf::lab {


}  // namespace gf::lab
