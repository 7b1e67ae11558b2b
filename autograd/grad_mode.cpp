#include "autograd/grad_mode.h"

namespace gf {
namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_anomaly = false;
thread_local std::vector<std::string> t_scopes;
}  // namespace

bool GradMode::enabled() { return t_grad_enabled; }
void GradMode::set_enabled(bool on) { t_grad_enabled = on; }
bool AnomalyMode::enabled() { return t_anomaly; }
void AnomalyMode::set_enabled(bool on) { t_anomaly = on; }

NameScope::NameScope(const std::string& name) { t_scopes.push_back(name); }
NameScope::~NameScope() { t_scopes.pop_back(); }
std::string NameScope::current() {
  std::string s;
  for (const auto& n : t_scopes) {
    if (!s.empty() && !n.empty()) s += "/";
    s += n;
  }
  return s;
}

}  // namespace gf
