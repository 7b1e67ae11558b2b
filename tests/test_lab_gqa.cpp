// Lab `gqa`: the multi-head expansion of a grouped model computes the same function, Ainslie et
// al.'s mean-pooling conversion undoes it exactly, and the shared key/value head's gradient is the
// sum of its query heads' parts.
#include <doctest/doctest.h>

#include <cmath>

#include "lab/common.h"
#include "lab/gqa.h"
#include "nn_test_util.h"
#include "train/run/batch_loss.h"

using namespace gf;
using namespace gf::lab;
using gf::testing::error_of;
using gf::testing::max_abs_diff;

namespace {

train::BatchTensors batch() {
  return train::teacher_forced(Tensor::of({4, 5, 6, 7, 8, 9, 0, 0, 10, 11, 4, 0}, {3, 4}, DType::Int64),
                               Tensor::of({2, 5, 6, 3, 0, 2, 7, 3, 0, 0, 2, 8, 9, 10, 3}, {3, 5}, DType::Int64));
}

}  // namespace

TEST_CASE("expand_to_multihead: the same logits from multi-head attention with each key/value head copied to its group") {
  for (int64_t kv : {4, 2, 1}) {
    CAPTURE(kv);
    nn::Seq2SeqTransformer g(gf::testing::grouped_query_options(kv), 7);
    g.to(DType::Float64);
    auto e = expand_to_multihead(g);
    CHECK(e->options().layer.key_value_heads() == 4);
    const train::BatchTensors t = batch();
    CHECK(max_abs_diff(g.forward(t.src, t.tgt_in).data(), e->forward(t.src, t.tgt_in).data()) < 1e-13);
  }
}

TEST_CASE("pool_to_grouped: the mean of a group's heads; it undoes expand_to_multihead exactly") {
  nn::Seq2SeqTransformer g(gf::testing::grouped_query_options(2), 8);
  g.to(DType::Float64);
  auto back = pool_to_grouped(*expand_to_multihead(g), 2);
  const auto want = g.state_dict(), got = back->state_dict();
  REQUIRE(want.size() == got.size());
  for (const auto& [name, t] : want) {
    CAPTURE(name);
    CHECK(max_abs_diff(t, got.at(name)) == 0.0);  // copies of one value average to it exactly
  }
  // From a multi-head model: key head 0 of the pooled model is the mean of heads 0 and 1.
  nn::Seq2SeqTransformer mh(gf::testing::grouped_query_options(4), 9);
  auto pooled = pool_to_grouped(mh, 2);
  const auto& a = *attention_modules(mh).front();
  const auto& p = *attention_modules(*pooled).front();
  const Tensor w = a.in_proj_weight.data();  // (24, 8): q, k, v rows
  for (int64_t c = 0; c < 8; ++c)
    CHECK(p.k_proj->weight.data().at({0, c}) == doctest::Approx((w.at({8, c}) + w.at({10, c})) / 2));
  GF_CHECK_CONTAINS(error_of([&] { pool_to_grouped(mh, 3); }), "3 key/value heads do not divide 4 heads");
  GF_CHECK_CONTAINS(error_of([&] { pool_to_grouped(*pooled, 1); }), "grouped already");
}

TEST_CASE("shared_head_grads: the shared head's gradient is the sum of its query heads' parts") {
  for (int64_t kv : {4, 2, 1}) {
    CAPTURE(kv);
    nn::Seq2SeqTransformer g(gf::testing::grouped_query_options(kv), 10);
    g.to(DType::Float64);
    const SharedHeadGrads s = shared_head_grads(g, batch());
    CHECK(s.loss_difference < 1e-13);
    CHECK(s.sum_difference < 1e-12);
    CHECK(s.heads == 6 * kv);  // 6 attention modules (2 encoder, 2 x 2 decoder)
    const double G = 4.0 / static_cast<double>(kv);
    if (kv == 4) {
      CHECK(s.ratio == 1.0);
      CHECK(std::isnan(s.cosine));
    } else {
      CHECK(s.ratio > 0);
      CHECK(s.ratio <= G + 1e-12);  // |sum of G parts| <= G x their mean size
      CHECK(std::abs(s.cosine) <= 1.0);
    }
    for (const auto& p : g.parameters()) CHECK(!p.grad().defined());  // cleared after
  }
}

TEST_CASE("check_groups: 4 or more group sizes from 1,2 to the head count, each dividing it") {
  check_groups({1, 2, 4, 8}, 8);
  check_groups({1, 2, 3, 6}, 6);
  GF_CHECK_CONTAINS(error_of([] { check_groups({1, 2, 8}, 8); }), "--groups needs 4 or more group sizes");
  GF_CHECK_CONTAINS(error_of([] { check_groups({1, 4, 2, 8}, 8); }), "--groups must increase");
  GF_CHECK_CONTAINS(error_of([] { check_groups({2, 4, 8, 16}, 16); }), "must start 1,2");
  GF_CHECK_CONTAINS(error_of([] { check_groups({1, 2, 4, 8}, 16); }), "must end at --heads 16");
  GF_CHECK_CONTAINS(error_of([] { check_groups({1, 2, 5, 12}, 12); }), "group size 5 of --groups does not divide --heads 12");
}
