#pragma once
// `gradflow lab run FILE`: an experiment file (app/lab_spec.h) as a lab of the one runner.
#include "app/lab_spec.h"
#include "lab/lab.h"

namespace gf::app {

// The file's lab: its arms, levels and claims; each run trains the recipe (app/lab_run.cpp).
lab::Lab spec_lab(const LabSpec& spec);

}  // namespace gf::app
