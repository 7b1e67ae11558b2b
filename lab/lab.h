#pragma once
// The gradient-flow lab: experiments that reproduce, at a size a laptop CPU runs in under two
// minutes, what papers and courses say about gradients in attention. A lab is one function that
// runs small models through the public API of autograd/, nn/ and train/, and fills a Report:
// tables (printed and kept), figures (one SVG), raw numbers (JSON), and claims checked against its
// own numbers (lab/claims.h). `gradflow lab NAME` runs one; `gradflow lab` lists them
// (lab/registry.cpp); `gradflow lab NAME --control` runs its negative control.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "lab/claims.h"

namespace gf::lab {

class Report;

// A lab's own flag, beyond the ones every lab has (--out, --seeds, --seed).
struct Option {
  enum Kind { Int, Real, Text, Switch };
  std::string name;
  Kind kind;
  std::string default_value;  // "" for a switch (off)
  std::string help;
};

struct Lab {
  std::string name;       // "norm"
  std::string title;      // "Post-LN vs Pre-LN gradients at initialisation"
  std::string reference;  // "Xiong et al. 2020, arXiv:2002.04745 (Theorem 1, Figure 3)"
  std::string question;   // what the lab asks, one or two sentences
  // What --control removes or makes equal in both arms ("Pre-LN in both arms"); printed first in
  // the control's output and in its verdict line. Empty: the lab has no control (--control is refused).
  std::string control;
  // --control is a placebo (issue 35): each paper claim's contrast between two groups of different
  // seeds of one arm, whose false-positive rate over many splits must be at most 5% (lab/report.h).
  bool placebo = false;
  // What --ablate removes, for a lab whose --control is a placebo and which also has an ablation
  // that measures something real (entropy's safe learning rate). Empty: no --ablate.
  std::string ablation;
  int default_seeds = 3;
  // --models RUN [RUN ...]: the lab analyses trained run folders, one seed per folder, in place of
  // the toy models it trains (RunKey::model names the seed's folder).
  bool takes_models = false;
  uint64_t first_seed = 1;  // --seed's default: the first seed a run uses
  std::vector<Option> options;
  // Its claims (a lab declared with lab/experiment.h); empty: its rows of lab/claims.cpp.
  std::vector<ClaimSpec> claims;
  std::function<void(Report&)> run;
};

// Every lab, in the order `gradflow lab` lists them.
const std::vector<Lab>& labs();
// Throws std::invalid_argument naming the known labs when there is none of that name.
const Lab& find_lab(const std::string& name);

}  // namespace gf::lab
