#pragma once
// Whether ops record a graph, the anomaly mode that stops at the first NaN/Inf, and the name
// scopes that anomaly reports and graph pictures quote. All three are per thread.
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

// While alive, ops record a graph whatever the caller's grad mode (e.g. a gradient taken for a
// picture inside code that runs under a NoGradGuard); the mode before it comes back at the end.
class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(GradMode::enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

// Anomaly mode: every op that records a Node checks its forward output for NaN (not Inf: masked
// attention scores hold -inf on purpose), and backward checks every gradient for NaN and Inf. The
// std::runtime_error names the op, its input shapes, its creation number and the NameScope it was
// created in (recorded only while this mode is on).
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

// A named scope, pushed while alive; nested scopes join with "/" ("decoder.layers.0/self_attn").
// A Node stores the current scope (Node::created_in) only when it is made in anomaly mode; anomaly
// reports quote it as "created in ..." and graph_dot groups nodes by it (outside anomaly mode every
// Node's scope is ""). Not every module opens one: TransformerEncoder::forward and
// TransformerDecoder::forward open "encoder.layers.<i>" / "decoder.layers.<i>" around each layer
// (the decoder-only model runs through the former), and the decoder layer one per block
// (self_attn, multihead_attn, ff_block, norm1..norm3); every other op records the scope around
// it, or "".
class NameScope {
 public:
  explicit NameScope(const std::string& name);
  ~NameScope();
  NameScope(const NameScope&) = delete;
  NameScope& operator=(const NameScope&) = delete;
  static std::string current();  // "a/b/c", or "" outside every scope
};

}  // namespace gf
