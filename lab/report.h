#pragma once
// One run of a lab: its common settings (--out, --seeds, --seed, --control, --ablate, --pools,
// --models), what it writes (Output: lab/output.h), its claims as the runner reports them, and at
// the end the decision (lab/verdict.h), NAME.json, NAME.svg and the verdict line. The runner
// (lab/runner.h) is the only one that fills it; a lab sees it as the Output of its describe().
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "lab/claims.h"
#include "lab/lab.h"
#include "lab/output.h"
#include "lab/verdict.h"

namespace gf::lab {

class Report : public Output {
 public:
  // settings: "out", "seeds", "seed", optionally "control", "ablate" ("1": on), "pools", "models"
  // (folders a line each), and every option of the lab by name. The claims are the lab's own.
  Report(const Lab& lab, std::map<std::string, std::string> settings, std::FILE* out = stdout);
  // The same with the claims given (the tests' labs).
  Report(const Lab& lab, std::map<std::string, std::string> settings, std::FILE* out, std::vector<ClaimSpec> specs);

  // ---- the run's common settings ----
  const std::map<std::string, std::string>& settings() const { return settings_; }
  int seeds() const { return models_.empty() ? seeds_ : static_cast<int>(models_.size()); }
  uint64_t seed(int i) const { return seed_ + static_cast<uint64_t>(i); }  // --seed + i: the i-th run's seed
  bool control() const { return control_; }  // --control: the placebo, or the ablation of a lab without one
  bool ablate() const { return ablate_; }    // --ablate: the protocol without the causal ingredient (Lab::ablation)
  bool ablation_mode() const { return ablate_ || (control_ && !lab_.placebo); }
  bool placebo_mode() const { return control_ && lab_.placebo; }
  int placebo_pools(int lab_default) const { return pools_ > 0 ? pools_ : lab_default; }  // --pools, else the lab's
  const std::vector<std::string>& models() const { return models_; }  // --models: one folder a seed
  std::string model(int i) const { return models_.empty() ? "" : models_.at(static_cast<size_t>(i)); }
  const Lab& lab() const { return lab_; }

  // ---- claims (the runner's) ----
  void paper(const std::string& id, const std::vector<double>& per_seed, const std::string& evidence = "");
  void check(const std::string& id, double value, const std::string& evidence = "");
  void check(const std::string& id, const std::vector<double>& per_seed, const std::string& evidence);  // the worst seed decides
  void no_placebo(const std::string& id, const std::string& why);
  void record_placebo(const Placebo& p, const std::vector<double>& first);  // its first pool's values reported as the claim
  const std::vector<Claim>& claims() const { return claims_; }
  const std::vector<Placebo>& placebos() const { return placebos_; }
  const std::vector<ClaimSpec>& specs() const { return specs_; }

  // Decides the claims, prints them, writes NAME.json and NAME.svg, prints where, and the verdict
  // line. Returns 0, 3 or 4 (lab/verdict.h; a placebo: 0 when every rate is within bounds, else 3).
  // Throws std::logic_error when a claim of the lab was never reported, or reported twice.
  int finish();
  const std::string& verdict() const { return verdict_; }

 private:
  const ClaimSpec& spec(const std::string& id, ClaimKind kind) const;
  void record(Claim c);

  const Lab& lab_;
  std::map<std::string, std::string> settings_;
  int seeds_ = 1, pools_ = 0;
  uint64_t seed_ = 1;
  bool control_ = false, ablate_ = false;
  std::vector<std::string> models_;
  std::vector<ClaimSpec> specs_;
  std::vector<Claim> claims_;
  std::vector<Placebo> placebos_;
  std::string verdict_;
  double start_seconds_;
};

}  // namespace gf::lab
