// Tests of kernels/conv_rules.h: which cuDNN candidates a convolution may take under the run's
// rules, the counts its error reports, the order in which rules are relaxed and routes tried,
// and the copies of the fallback routes. The candidate lists are the two cases a GPU run could
// meet (kernels/cuda/conv.cu applies the same functions to cuDNN's real answers;
// tests/cuda/test_cuda_new_ops.cpp runs those routes on the GPU). The NCHW and per-group
// routes are run here on the CPU with the very index arithmetic conv.cu uses, against the
// CPU's grouped convolution.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "catch2/catch.hpp"
#include "kernels/conv_rules.h"
#include "kernels/cpu/conv.h"

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

// ---- routes and their copies -----------------------------------------------------------------

using kernels::ConvPath;
using kernels::ConvShape;

TEST_CASE("conv routes: the order per rule set, padding only ungrouped, per group only grouped and last", "[conv_rules]") {
  using P = std::vector<ConvPath>;
  for (bool last : {false, true}) {
    INFO("last resort " << last);
    CHECK(kernels::conv_paths(ConvShape{2, 8, 8, 16, 32, 3, 3}, last) == (P{ConvPath::Nhwc, ConvPath::Nchw}));
    CHECK(kernels::conv_paths(ConvShape{2, 8, 8, 3, 16, 3, 3}, last) ==
          (P{ConvPath::Nhwc, ConvPath::NhwcPadded, ConvPath::Nchw}));
    CHECK(kernels::conv_paths(ConvShape{2, 8, 8, 16, 13, 1, 1}, last) ==
          (P{ConvPath::Nhwc, ConvPath::NhwcPadded, ConvPath::Nchw}));
  }
  // Grouped (odd channels too): no padding, which would move channels across groups; one
  // convolution per group (C of them for depthwise) only once no rule is left to relax.
  const ConvShape dw{2, 9, 9, 6, 6, 5, 5, 2, 2, 6};
  CHECK(kernels::conv_paths(dw, false) == (P{ConvPath::Nhwc, ConvPath::Nchw}));
  CHECK(kernels::conv_paths(dw, true) == (P{ConvPath::Nhwc, ConvPath::Nchw, ConvPath::PerGroup}));
  // A group's sub-shape is ungrouped: its routes end before another split.
  const ConvShape sub = kernels::conv_group_slices(dw, 0).sub;
  CHECK(sub.groups == 1);
  CHECK(kernels::conv_paths(sub, true) == (P{ConvPath::Nhwc, ConvPath::NhwcPadded, ConvPath::Nchw}));
}

namespace {

namespace kc = kernels::cpu;

// Three tensors of one direction: fwd (x, w -> y), bwd-data (gy, w -> gx), bwd-filter (x, gy -> gw).
struct ConvData {
  std::vector<double> x, w, gy;
};

// Small integers: every sum is exact in FP64, so any route must match bit for bit.
std::vector<double> ints(int64_t n, int seed) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>((i * 7 + seed * 13) % 9) - 4;
  return v;
}

ConvData data_for(const ConvShape& d) {
  return ConvData{ints(d.n * d.h * d.w * d.c, 1), ints(d.k * d.r * d.s * d.group_c(), 2),
                  ints(d.n * d.out_h() * d.out_w() * d.k, 3)};
}

// cudaMemcpy2D's contract, in elements: `rows` runs of `width`, from pitch `spitch` to `dpitch`.
void memcpy2d(double* dst, int64_t dpitch, const double* src, int64_t spitch, int64_t width, int64_t rows) {
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * dpitch, src + r * spitch, sizeof(double) * width);
}
// The slice lies inside a buffer of `full` elements (a slice past the end would be a write
// out of bounds on the GPU; here it fails the test instead of corrupting the heap).
void require_inside(const kernels::ConvSlice& s, size_t full) {
  INFO("slice offset " << s.offset << " pitch " << s.pitch << " width " << s.width << " rows " << s.rows
                       << " in a buffer of " << full);
  REQUIRE(s.fits(static_cast<int64_t>(full)));
}
// conv.cu's gather and scatter: the same calls, with the slice's fields.
void gather(std::vector<double>& packed, const std::vector<double>& full, const kernels::ConvSlice& s) {
  require_inside(s, full.size());
  REQUIRE(static_cast<int64_t>(packed.size()) == s.size());
  memcpy2d(packed.data(), s.width, full.data() + s.offset, s.pitch, s.width, s.rows);
}
void scatter(std::vector<double>& full, const std::vector<double>& packed, const kernels::ConvSlice& s) {
  require_inside(s, full.size());
  REQUIRE(static_cast<int64_t>(packed.size()) == s.size());
  memcpy2d(full.data() + s.offset, s.pitch, packed.data(), s.width, s.width, s.rows);
}

struct Outputs {
  std::vector<double> y, gx, gw;
};

Outputs grouped_reference(const ConvShape& d, const ConvData& in) {
  Outputs o{std::vector<double>(in.gy.size()), std::vector<double>(in.x.size()), std::vector<double>(in.w.size())};
  kc::conv2d_forward<double>(d, in.x.data(), in.w.data(), nullptr, o.y.data());
  kc::conv2d_backward_data<double>(d, in.gy.data(), in.w.data(), o.gx.data());
  kc::conv2d_backward_filter<double>(d, in.x.data(), in.gy.data(), o.gw.data(), nullptr);
  return o;
}

// conv_per_group on the CPU: per group, packed copies of its slices, one ungrouped convolution,
// the result scattered into the group's slice. Outputs start as NaN: every element must be written.
Outputs per_group(const ConvShape& d, const ConvData& in) {
  const double nan = std::nan("");
  Outputs o{std::vector<double>(in.gy.size(), nan), std::vector<double>(in.x.size(), nan),
            std::vector<double>(in.w.size(), nan)};
  const kernels::ConvGroupSlices g0 = kernels::conv_group_slices(d, 0);
  std::vector<double> xs(static_cast<size_t>(g0.x.size())), ws(static_cast<size_t>(g0.w.size())),
      ys(static_cast<size_t>(g0.y.size()));
  for (int64_t g = 0; g < d.groups; ++g) {
    const kernels::ConvGroupSlices s = kernels::conv_group_slices(d, g);
    REQUIRE(s.sub.groups == 1);
    REQUIRE(s.x.size() == s.sub.n * s.sub.h * s.sub.w * s.sub.c);
    REQUIRE(s.w.size() == s.sub.k * s.sub.r * s.sub.s * s.sub.c);
    REQUIRE(s.y.size() == s.sub.n * s.sub.out_h() * s.sub.out_w() * s.sub.k);
    // Forward: x, w in; y out.
    gather(xs, in.x, s.x);
    gather(ws, in.w, s.w);
    kc::conv2d_forward<double>(s.sub, xs.data(), ws.data(), nullptr, ys.data());
    scatter(o.y, ys, s.y);
    // Backward data: gy, w in; gx out.
    gather(ys, in.gy, s.y);
    gather(ws, in.w, s.w);
    kc::conv2d_backward_data<double>(s.sub, ys.data(), ws.data(), xs.data());
    scatter(o.gx, xs, s.x);
    // Backward filter: x, gy in; gw out.
    gather(xs, in.x, s.x);
    gather(ys, in.gy, s.y);
    kc::conv2d_backward_filter<double>(s.sub, xs.data(), ys.data(), ws.data(), nullptr);
    scatter(o.gw, ws, s.w);
  }
  return o;
}

// A plain-loop convolution on NCHW tensors and KCRS filters, all three directions (what cuDNN
// computes with NCHW descriptors), grouped as cuDNN groups: output channel k sees input
// channels [k / Kg * Cg, +Cg).
Outputs nchw_loops(const ConvShape& d, const ConvData& in) {
  Outputs o{std::vector<double>(in.gy.size(), 0.0), std::vector<double>(in.x.size(), 0.0),
            std::vector<double>(in.w.size(), 0.0)};
  const int64_t oh = d.out_h(), ow = d.out_w(), cg = d.group_c(), kg = d.group_k();
  for (int64_t n = 0; n < d.n; ++n)
    for (int64_t k = 0; k < d.k; ++k)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j)
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t r = 0; r < d.r; ++r)
              for (int64_t s = 0; s < d.s; ++s) {
                const int64_t iy = i * d.stride - d.pad + r, ix = j * d.stride - d.pad + s;
                if (iy < 0 || iy >= d.h || ix < 0 || ix >= d.w) continue;
                const size_t xi = static_cast<size_t>(((n * d.c + k / kg * cg + c) * d.h + iy) * d.w + ix);
                const size_t wi = static_cast<size_t>(((k * cg + c) * d.r + r) * d.s + s);
                const size_t yi = static_cast<size_t>(((n * d.k + k) * oh + i) * ow + j);
                o.y[yi] += in.x[xi] * in.w[wi];
                o.gx[xi] += in.gy[yi] * in.w[wi];
                o.gw[wi] += in.gy[yi] * in.x[xi];
              }
  return o;
}

std::vector<double> transposed(const std::vector<double>& v, const kernels::ConvTranspose& t) {
  REQUIRE(static_cast<int64_t>(v.size()) == t.size());
  std::vector<double> out(v.size());
  for (int64_t i = 0; i < t.size(); ++i) out[static_cast<size_t>(i)] = v[static_cast<size_t>(t.source(i))];
  return out;
}

// conv_nchw on the CPU: the inputs transposed to NCHW / KCRS, the NCHW convolution, the
// outputs transposed back.
Outputs via_nchw(const ConvShape& d, const ConvData& in) {
  const kernels::ConvNchwCopies t = kernels::conv_nchw_copies(d);
  const ConvData nchw{transposed(in.x, t.x), transposed(in.w, t.w), transposed(in.gy, t.y)};
  const Outputs o = nchw_loops(d, nchw);
  return Outputs{transposed(o.y, t.y.back()), transposed(o.gx, t.x.back()), transposed(o.gw, t.w.back())};
}

void expect_same(const Outputs& got, const Outputs& want) {
  const char* names[] = {"forward", "backward data", "backward filter"};
  const std::vector<double>* g[] = {&got.y, &got.gx, &got.gw};
  const std::vector<double>* w[] = {&want.y, &want.gx, &want.gw};
  for (int k = 0; k < 3; ++k) {
    INFO(names[k]);
    REQUIRE(g[k]->size() == w[k]->size());
    size_t bad = 0, first_bad = 0;
    for (size_t i = 0; i < w[k]->size(); ++i)
      if (!((*g[k])[i] == (*w[k])[i]) && bad++ == 0) first_bad = i;  // NaN (unwritten) counts
    INFO("first mismatch at " << first_bad << ": " << (bad ? (*g[k])[first_bad] : 0.0) << " vs "
                              << (bad ? (*w[k])[first_bad] : 0.0));
    CHECK(bad == 0);
  }
}

// Depthwise 5x5 stride 2 (EfficientNet's), 2 groups of 3 inputs and 2 outputs, 3 groups with a
// non-square kernel: H != W and C != K so that no swap goes unnoticed.
const std::vector<ConvShape> kGroupedShapes = {
    {2, 9, 7, 6, 6, 5, 5, 2, 2, 6},
    {2, 6, 5, 6, 4, 3, 3, 1, 1, 2},
    {3, 7, 8, 6, 9, 3, 2, 2, 0, 3},
};

std::string shape_str(const ConvShape& d) {
  std::ostringstream os;
  os << "x[" << d.n << "," << d.h << "," << d.w << "," << d.c << "] w[" << d.k << "," << d.r << "," << d.s << ","
     << d.group_c() << "] stride " << d.stride << " pad " << d.pad << " groups " << d.groups;
  return os.str();
}

}  // namespace

TEST_CASE("conv routes: one ungrouped convolution per group equals the grouped convolution", "[conv_rules]") {
  for (const ConvShape& d : kGroupedShapes) {
    INFO(shape_str(d));
    const ConvData in = data_for(d);
    expect_same(per_group(d, in), grouped_reference(d, in));
  }
}

TEST_CASE("conv routes: the convolution on NCHW copies equals the NHWC one", "[conv_rules]") {
  std::vector<ConvShape> shapes = kGroupedShapes;
  shapes.push_back(ConvShape{2, 5, 7, 3, 5, 3, 3, 1, 1});   // ungrouped, odd channels
  shapes.push_back(ConvShape{1, 8, 6, 4, 8, 1, 1, 1, 0});   // pointwise
  for (const ConvShape& d : shapes) {
    INFO(shape_str(d));
    const ConvData in = data_for(d);
    expect_same(via_nchw(d, in), grouped_reference(d, in));
    // The transposes are permutations, and back() undoes each.
    const kernels::ConvNchwCopies t = kernels::conv_nchw_copies(d);
    CHECK(transposed(transposed(in.x, t.x), t.x.back()) == in.x);
    CHECK(transposed(transposed(in.w, t.w), t.w.back()) == in.w);
  }
}
