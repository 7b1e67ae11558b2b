// Lab `graph` (lab/labs/graph.cpp): its checks at tiny settings, one seed and two.
#include <doctest/doctest.h>

#include <filesystem>

#include "lab/graph.h"
#include "lab_run.h"

using namespace gf;
using gf::test::claim_of;

namespace {

const std::map<std::string, std::string> kTiny{{"d-model", "8"}, {"heads", "2"}, {"ff", "16"}, {"batch", "1"}, {"src-len", "3"},
                                               {"tgt-len", "4"}, {"lengths", "4,8,16"}};

}  // namespace

TEST_CASE("lab graph, tiny settings: every check passes, the slopes between consecutive lengths are kept, and the graph is drawn") {
  const test::TempDir dir("gf_test_lab_graph");
  auto settings = kTiny;
  settings["seeds"] = std::string("1");
  const test::LabRun run = test::run_lab_in(dir, "graph", settings);
  CHECK(run.exit_code == 0);
  REQUIRE(run.j.at("claims").size() == 6);
  for (const auto& c : run.j.at("claims")) {
    CAPTURE(c.at("id"));
    CHECK(c.at("holds").get<bool>());
  }
  const auto& quadratic = claim_of(run.j, "self_maps_quadratic").at("values");
  REQUIRE(quadratic.size() == 2);  // 4 -> 8, 8 -> 16
  for (double v : quadratic) CHECK(v == doctest::Approx(2.0));
  for (double v : claim_of(run.j, "fused_linear").at("values")) CHECK(v == doctest::Approx(1.0));
  CHECK(run.j.at("data").at("runs").size() == 1 + 3 + 3 + 2);  // picture, composed x 3, fused x 3, two backward passes
  CHECK(std::filesystem::exists(dir.path / "decoder_layer.dot"));
}

TEST_CASE("lab graph, two seeds: each seed's own layer, and backward frees what it saved on both") {
  const test::TempDir dir("gf_test_lab_graph");
  const test::LabRun run = test::run_lab_in(dir, "graph", kTiny);  // run_lab_in's 2 seeds
  CHECK(claim_of(run.j, "self_maps_quadratic").at("values").size() == 4);
  CHECK(claim_of(run.j, "backward_frees").at("values") == nlohmann::json({0.0, 0.0}));
  CHECK(claim_of(run.j, "backward_reaches_all").at("values") == nlohmann::json({0.0, 0.0}));
  CHECK(run.exit_code == 0);
}

TEST_CASE("local_slopes: the log-log slope between each two consecutive lengths") {
  const std::vector<double> s = lab::local_slopes({2, 4, 8}, {3, 12, 24});
  REQUIRE(s.size() == 2);
  CHECK(s[0] == doctest::Approx(2.0));
  CHECK(s[1] == doctest::Approx(1.0));
}
