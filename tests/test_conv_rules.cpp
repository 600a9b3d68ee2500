// Tests of kernels/conv_rules.h: which cuDNN candidates a convolution may take under the run's
// rules, the counts its error reports, and the order in which rules are relaxed. The candidate
// lists are the two cases a GPU run could meet (kernels/cuda/conv.cu applies the same functions
// to cuDNN's real answers; tests/cuda/test_cuda_new_ops.cpp runs that route on the GPU).
#include <string>
#include <utility>
#include <vector>

#include "catch2/catch.hpp"
#include "kernels/conv_rules.h"

using kernels::ConvCandidate;
using kernels::ConvRules;
using kernels::ConvVerdict;

namespace {

// What conv.cu does with one list under one rule set: the first usable candidate (or -1) and
// the counts of what each filter removed.
int first_usable(const std::vector<ConvCandidate>& cands, const ConvRules& rules, kernels::ConvFilterCounts* counts) {
  int chosen = -1;
  for (const ConvCandidate& c : cands) {
    const ConvVerdict v = kernels::judge_conv_candidate(c, rules);
    counts->add(v);
    if (v == ConvVerdict::Usable && chosen < 0) chosen = c.algo;
  }
  return chosen;
}

// Walks the relaxations as conv_op does; returns the algorithm taken and what it gave up.
std::pair<int, std::string> choose(const std::vector<ConvCandidate>& cands, const ConvRules& asked,
                                   std::vector<kernels::ConvFilterCounts>* per_level) {
  for (const ConvRules& r : kernels::conv_relaxations(asked)) {
    per_level->emplace_back();
    const int algo = first_usable(cands, r, &per_level->back());
    if (algo >= 0) {
      for (const ConvCandidate& c : cands)
        if (c.algo == algo) return {algo, kernels::conv_relaxation_note(c, asked)};
    }
  }
  return {-1, ""};
}

}  // namespace

TEST_CASE("conv rules: a grouped backward-filter with only non-deterministic algorithms relaxes determinism",
          "[conv_rules]") {
  // FP16, deterministic mode: cuDNN supports algo 0 and 3 (both add with atomics) and refuses 1.
  const std::vector<ConvCandidate> cands = {{0, true, true, false}, {1, false, true, true}, {3, true, true, false}};
  const ConvRules asked{false, true};
  std::vector<kernels::ConvFilterCounts> levels;
  const auto [algo, gave_up] = choose(cands, asked, &levels);
  CHECK(algo == 0);
  CHECK(gave_up == "not deterministic");
  REQUIRE(levels.size() == 2);  // the rules as asked, then without determinism
  CHECK(levels[0].candidates == 3);
  CHECK(levels[0].unsupported == 1);
  CHECK(levels[0].not_deterministic == 2);
  CHECK(levels[0].tensor_cores == 0);
  CHECK(levels[0].str() ==
        "3 candidates: 1 not supported by cuDNN, 0 Tensor Core (TF32), barred by strict FP32, 2 not deterministic, "
        "0 over the workspace limit, 0 refused when run");
}

TEST_CASE("conv rules: strict FP32 offered only TF32 engines takes TF32 but stays deterministic", "[conv_rules]") {
  // The non-deterministic TF32 engine comes first in cuDNN's order; determinism is kept anyway.
  const std::vector<ConvCandidate> cands = {{0, true, true, false}, {1, true, true, true}, {6, false, false, true}};
  const ConvRules asked{true, true};
  std::vector<kernels::ConvFilterCounts> levels;
  const auto [algo, gave_up] = choose(cands, asked, &levels);
  // Dropping determinism alone does not help (every supported one is Tensor Core only); TF32
  // with determinism does, before the rule set without either is reached.
  REQUIRE(levels.size() == 3);
  CHECK(levels[0].tensor_cores == 2);
  CHECK(levels[0].unsupported == 1);
  CHECK(levels[1].tensor_cores == 2);
  CHECK(levels[2].not_deterministic == 1);
  CHECK(algo == 1);
  CHECK(gave_up == "TF32 Tensor Cores");
  REQUIRE(kernels::conv_relaxations(asked).size() == 4);
  CHECK(kernels::conv_relaxations(asked)[3] == (ConvRules{false, false}));
}

TEST_CASE("conv rules: with only a non-deterministic TF32 engine, both rules go", "[conv_rules]") {
  const std::vector<ConvCandidate> cands = {{0, true, true, false}};
  std::vector<kernels::ConvFilterCounts> levels;
  const auto [algo, gave_up] = choose(cands, ConvRules{true, true}, &levels);
  CHECK(levels.size() == 4);
  CHECK(algo == 0);
  CHECK(gave_up == "not deterministic, TF32 Tensor Cores");
}

TEST_CASE("conv rules: an FMA algorithm that is not deterministic beats TF32 for strict FP32", "[conv_rules]") {
  const std::vector<ConvCandidate> cands = {{1, true, true, true}, {0, true, false, false}};
  std::vector<kernels::ConvFilterCounts> levels;
  const auto [algo, gave_up] = choose(cands, ConvRules{true, true}, &levels);
  CHECK(levels.size() == 2);
  CHECK(algo == 0);
  CHECK(gave_up == "not deterministic");
}

TEST_CASE("conv rules: nothing to relax without rules, and a usable candidate is taken as asked", "[conv_rules]") {
  CHECK(kernels::conv_relaxations(ConvRules{false, false}).size() == 1);
  const auto fp32 = kernels::conv_relaxations(ConvRules{true, false});
  REQUIRE(fp32.size() == 2);
  CHECK(fp32[1] == (ConvRules{false, false}));
  const std::vector<ConvCandidate> cands = {{2, true, false, true}};
  std::vector<kernels::ConvFilterCounts> levels;
  const auto [algo, gave_up] = choose(cands, ConvRules{true, true}, &levels);
  CHECK(algo == 2);
  CHECK(gave_up.empty());
  CHECK(levels.size() == 1);
  // No candidate at all: every rule set is tried and the shape has no algorithm.
  levels.clear();
  CHECK(choose({}, ConvRules{true, true}, &levels).first == -1);
  CHECK(levels.size() == 4);
}
