#pragma once
// A lab run as `gradflow lab NAME` runs it, in-process, for the labs' tests: its defaults with some
// settings overridden ("control" or "ablate" "1" for those runs), into a fresh scratch folder; the
// printed report is discarded. Returns NAME.json.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "lab/lab.h"
#include "lab/report.h"
#include "temp_dir.h"

namespace gf::test {

struct LabRun {
  nlohmann::json j;
  int exit_code = -1;
};

inline LabRun run_lab_in(const TempDir& dir, const std::string& name, const std::map<std::string, std::string>& settings) {
  const lab::Lab& l = lab::find_lab(name);
  std::map<std::string, std::string> all{{"out", dir.path.string()}, {"seeds", "2"}, {"seed", "1"}};
  for (const auto& o : l.options) all[o.name] = o.kind == lab::Option::Switch ? "0" : o.default_value;
  for (const auto& [k, v] : settings) all[k] = v;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> sink(std::tmpfile(), &std::fclose);
  REQUIRE(sink != nullptr);
  lab::Report report(l, all, sink.get());
  l.run(report);
  LabRun r;
  r.exit_code = report.finish();
  std::ifstream in(dir.path / (name + ".json"));
  REQUIRE(in.good());
  r.j = nlohmann::json::parse(in);
  return r;
}

// The entry of `list` (a JSON array of objects) whose "id" is `id`.
inline const nlohmann::json& entry(const nlohmann::json& list, const std::string& id) {
  auto it = std::find_if(list.begin(), list.end(), [&](const nlohmann::json& c) { return c.at("id") == id; });
  REQUIRE_MESSAGE(it != list.end(), "no entry " << id);
  return *it;
}
// The claim `id` of a lab's JSON, and its placebo entry (a --control run of a placebo lab).
inline const nlohmann::json& claim_of(const nlohmann::json& j, const std::string& id) { return entry(j.at("claims"), id); }
inline const nlohmann::json& placebo_of(const nlohmann::json& j, const std::string& id) { return entry(j.at("placebo").at("claims"), id); }

}  // namespace gf::test
