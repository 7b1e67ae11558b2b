#pragma once
// Whether ops record a graph, and the anomaly mode that stops at the first NaN/Inf.
#include <string>
#include <vector>

namespace gf {

class GradMode {
 public:
  static bool enabled();
  static void set_enabled(bool on);
};

// While alive, ops record no graph (inference, optimizer updates).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Anomaly mode: every op checks its forward output, and backward checks every gradient, for
// NaN/Inf; the error names the op, its input shapes and the scope it was created in.
class AnomalyMode {
 public:
  static bool enabled();
  static void set_enabled(bool on);
};

class AnomalyGuard {
 public:
  AnomalyGuard() : prev_(AnomalyMode::enabled()) { AnomalyMode::set_enabled(true); }
  ~AnomalyGuard() { AnomalyMode::set_enabled(prev_); }
  AnomalyGuard(const AnomalyGuard&) = delete;
  AnomalyGuard& operator=(const AnomalyGuard&) = delete;

 private:
  bool prev_;
};

// A named scope ("decoder.layers.0.self_attn") that anomaly reports quote as "where it was
// created". Modules open one around their forward.
class NameScope {
 public:
  explicit NameScope(const std::string& name);
  ~NameScope();
  NameScope(const NameScope&) = delete;
  NameScope& operator=(const NameScope&) = delete;
  static std::string current();  // "a/b/c" or ""
};

}  // namespace gf
