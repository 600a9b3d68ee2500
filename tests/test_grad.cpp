// Every op's backward against central finite differences in FP64, on small random shapes,
// including stride/padding variants of conv and pooling, and a few ops chained together.
#include "catch2/catch.hpp"
#include "engine/ops.h"
#include "kernels/element_math.h"
#include "engine/random.h"
#include "tests/gradcheck.h"

using engine::Tensor;
using testing::gradcheck;
using testing::rand64;

TEST_CASE("conv2d backward matches finite differences", "[grad][conv]") {
  engine::manual_seed(1);
  struct Case { int64_t n, h, w, c, k, r, s, stride, pad; bool bias; };
  const Case cases[] = {
      {2, 5, 5, 3, 4, 3, 3, 1, 1, true},   // the common 3x3 "same" conv
      {1, 6, 7, 2, 3, 3, 3, 2, 1, true},   // stride 2, odd width
      {2, 5, 4, 3, 2, 3, 3, 1, 0, false},  // no padding, no bias
      {1, 7, 7, 2, 2, 5, 5, 3, 2, true},   // big kernel, stride 3
      {2, 4, 4, 5, 3, 1, 1, 1, 0, true},   // pointwise (direct GEMM path)
      {1, 5, 6, 2, 2, 3, 1, 1, 1, true},   // non-square kernel
      {1, 4, 4, 3, 2, 1, 1, 2, 0, false},  // strided 1x1 (a ResNet shortcut)
  };
  for (const Case& c : cases) {
    INFO("case n" << c.n << " h" << c.h << " w" << c.w << " c" << c.c << " k" << c.k << " r" << c.r << " s" << c.s
                  << " stride" << c.stride << " pad" << c.pad);
    std::vector<Tensor> in = {rand64({c.n, c.h, c.w, c.c}), rand64({c.k, c.r, c.s, c.c})};
    if (c.bias) in.push_back(rand64({c.k}));
    gradcheck("conv2d", [&](const std::vector<Tensor>& v) {
      return engine::conv2d(v[0], v[1], v.size() > 2 ? v[2] : Tensor(), c.stride, c.pad);
    }, in);
  }
}

TEST_CASE("grouped and depthwise conv2d backward match finite differences", "[grad][conv]") {
  engine::manual_seed(2);
  struct Case { int64_t n, h, w, c, k, r, stride, pad, groups; bool bias; };
  const Case cases[] = {
      {2, 5, 5, 4, 4, 3, 1, 1, 4, true},   // depthwise 3x3 "same" (EfficientNet's stride-1 blocks)
      {1, 7, 6, 3, 3, 5, 2, 2, 3, false},  // depthwise 5x5, stride 2, odd width
      {2, 4, 4, 6, 4, 3, 1, 1, 2, true},   // 2 groups of 3 -> 2 channels (the per-group GEMM path)
      {1, 5, 5, 4, 8, 1, 1, 0, 4, false},  // grouped pointwise, 1 -> 2 channels a group
  };
  for (const Case& c : cases) {
    INFO("case n" << c.n << " h" << c.h << " w" << c.w << " c" << c.c << " k" << c.k << " r" << c.r << " stride"
                  << c.stride << " pad" << c.pad << " groups " << c.groups);
    std::vector<Tensor> in = {rand64({c.n, c.h, c.w, c.c}), rand64({c.k, c.r, c.r, c.c / c.groups})};
    if (c.bias) in.push_back(rand64({c.k}));
    gradcheck("conv2d", [&](const std::vector<Tensor>& v) {
      return engine::conv2d(v[0], v[1], v.size() > 2 ? v[2] : Tensor(), c.stride, c.pad, c.groups);
    }, in);
  }
}

// A grouped convolution is its groups' dense convolutions side by side: the same numbers as
// running each group alone on its slice of channels (FP32, the dense path as the reference).
TEST_CASE("grouped conv2d equals its groups run one by one", "[conv]") {
  engine::manual_seed(3);
  for (int64_t groups : {2, 6}) {
    INFO(groups << " groups");
    const int64_t c = 6, k = 6;
    const Tensor x = engine::uniform({3, 6, 6, c}, -1, 1, engine::DType::F32);
    const Tensor w = engine::uniform({k, 3, 3, c / groups}, -1, 1, engine::DType::F32);
    const Tensor b = engine::uniform({k}, -1, 1, engine::DType::F32);
    const std::vector<double> y = engine::conv2d(x, w, b, 1, 1, groups).to_vector();
    const std::vector<double> xv = x.to_vector(), wv = w.to_vector(), bv = b.to_vector();
    const int64_t cg = c / groups, kg = k / groups, per_w = 9 * cg;
    for (int64_t g = 0; g < groups; ++g) {
      std::vector<double> xs, ws(wv.begin() + g * kg * per_w, wv.begin() + (g + 1) * kg * per_w),
          bs(bv.begin() + g * kg, bv.begin() + (g + 1) * kg);
      for (int64_t p = 0; p < 3 * 36; ++p) xs.insert(xs.end(), xv.begin() + p * c + g * cg, xv.begin() + p * c + (g + 1) * cg);
      const std::vector<double> yg =
          engine::conv2d(Tensor::from_vector(xs, {3, 6, 6, cg}, engine::DType::F32),
                         Tensor::from_vector(ws, {kg, 3, 3, cg}, engine::DType::F32),
                         Tensor::from_vector(bs, {kg}, engine::DType::F32), 1, 1)
              .to_vector();
      // FP32: both sum the same 9 * cg products, possibly in another order: within 2 * 9 * cg *
      // 2^-24 of the sum of their magnitudes (each below 1 here), so 1e-5 absolute.
      for (int64_t p = 0; p < 3 * 36; ++p)
        for (int64_t o = 0; o < kg; ++o) REQUIRE(std::fabs(y[p * k + g * kg + o] - yg[p * kg + o]) <= 1e-5);
    }
  }
}

TEST_CASE("linear backward matches finite differences", "[grad]") {
  engine::manual_seed(2);
  gradcheck("linear", [](const std::vector<Tensor>& v) { return engine::linear(v[0], v[1], v[2]); },
            {rand64({3, 5}), rand64({4, 5}), rand64({4})});
  gradcheck("linear no bias", [](const std::vector<Tensor>& v) { return engine::linear(v[0], v[1], Tensor()); },
            {rand64({1, 7}), rand64({2, 7})});
}

TEST_CASE("element-wise ops backward match finite differences", "[grad]") {
  engine::manual_seed(3);
  gradcheck("relu", [](const std::vector<Tensor>& v) { return engine::relu(v[0]); }, {rand64({2, 3, 4, 5})});
  gradcheck("gelu", [](const std::vector<Tensor>& v) { return engine::gelu(v[0]); }, {rand64({3, 7}, -3, 3)});
  gradcheck("sigmoid", [](const std::vector<Tensor>& v) { return engine::sigmoid(v[0]); }, {rand64({3, 7}, -6, 6)});
  gradcheck("silu", [](const std::vector<Tensor>& v) { return engine::silu(v[0]); }, {rand64({3, 7}, -6, 6)});
  gradcheck("channel_gate", [](const std::vector<Tensor>& v) { return engine::channel_gate(v[0], v[1]); },
            {rand64({2, 3, 4, 5}, -2, 2), rand64({2, 5}, -1, 1)});
  gradcheck("add", [](const std::vector<Tensor>& v) { return engine::add(v[0], v[1]); },
            {rand64({2, 3, 3, 2}), rand64({2, 3, 3, 2})});
  gradcheck("scale", [](const std::vector<Tensor>& v) { return engine::scale(v[0], -2.5); }, {rand64({4, 3})});
  gradcheck("dropout", [](const std::vector<Tensor>& v) { return engine::dropout(v[0], 0.3, 42, 7); },
            {rand64({5, 8})});
  gradcheck("reshape", [](const std::vector<Tensor>& v) { return engine::reshape(v[0], {6, 4}); },
            {rand64({2, 3, 4})});
  gradcheck("flatten", [](const std::vector<Tensor>& v) { return engine::flatten(v[0]); }, {rand64({2, 2, 3, 2})});
  gradcheck("sum", [](const std::vector<Tensor>& v) { return engine::sum(v[0]); }, {rand64({3, 4})});
  // The same tensor used twice: gradients from both uses must add up.
  gradcheck("x*relu(x) shared input", [](const std::vector<Tensor>& v) {
    return engine::add(engine::relu(v[0]), engine::scale(v[0], 0.5));
  }, {rand64({3, 5})});
}

TEST_CASE("pooling backward matches finite differences", "[grad][pool]") {
  engine::manual_seed(4);
  struct Case { int64_t k, stride, pad; };
  for (Case c : {Case{2, 2, 0}, Case{3, 2, 1}, Case{3, 1, 1}, Case{2, 1, 0}, Case{3, 3, 0}}) {
    INFO("kernel " << c.k << " stride " << c.stride << " pad " << c.pad);
    // Distinct values spaced well beyond 2h so no window has a near-tie.
    std::vector<double> vals(2 * 7 * 6 * 3);
    for (size_t i = 0; i < vals.size(); ++i) vals[i] = static_cast<double>((i * 37) % vals.size()) * 0.01 - 1.0;
    Tensor x = Tensor::from_vector(vals, {2, 7, 6, 3}, engine::DType::F64);
    gradcheck("max_pool2d", [&](const std::vector<Tensor>& v) { return engine::max_pool2d(v[0], c.k, c.stride, c.pad); },
              {x});
  }
  gradcheck("global_avg_pool", [](const std::vector<Tensor>& v) { return engine::global_avg_pool(v[0]); },
            {rand64({2, 3, 5, 4})});
}

TEST_CASE("batch_norm backward matches finite differences in training and eval mode", "[grad][bn]") {
  engine::manual_seed(5);
  for (bool training : {true, false}) {
    for (engine::Shape shape : {engine::Shape{3, 2, 3, 4}, engine::Shape{6, 5}}) {
      INFO("training " << training << " shape " << engine::shape_str(shape));
      const int64_t c = shape.back();
      Tensor rm = rand64({c}, -0.5, 0.5), rv = rand64({c}, 0.5, 2.0);
      gradcheck("batch_norm", [&](const std::vector<Tensor>& v) {
        return engine::batch_norm(v[0], v[1], v[2], rm, rv, training, 0.1, 1e-5);
      }, {rand64(shape, -2, 2), rand64({c}, 0.5, 1.5), rand64({c})});
    }
  }
}

TEST_CASE("cross_entropy backward matches finite differences, with and without label smoothing", "[grad][loss]") {
  engine::manual_seed(6);
  Tensor labels = Tensor::from_ints({0, 3, 2, 3, 1}, {5});
  for (double eps : {0.0, 0.1, 0.5}) {
    INFO("label smoothing " << eps);
    gradcheck("cross_entropy", [&](const std::vector<Tensor>& v) { return engine::cross_entropy(v[0], labels, eps); },
              {rand64({5, 4}, -3, 3)});
  }
}

TEST_CASE("a small network chained end to end matches finite differences", "[grad]") {
  engine::manual_seed(7);
  Tensor labels = Tensor::from_ints({1, 0}, {2});
  Tensor rm = Tensor::zeros({3}, engine::DType::F64), rv = Tensor::full({3}, 1.0, engine::DType::F64);
  gradcheck("conv-bn-relu-pool-linear-ce", [&](const std::vector<Tensor>& v) {
    Tensor h = engine::conv2d(v[0], v[1], v[2], 1, 1);
    h = engine::batch_norm(h, v[3], v[4], rm, rv, true);
    h = engine::relu(h);
    h = engine::max_pool2d(h, 2, 2);
    Tensor skip = h;
    h = engine::add(h, engine::scale(skip, 0.5));  // a residual-style join
    h = engine::flatten(h);
    h = engine::linear(h, v[5], v[6]);
    return engine::cross_entropy(h, labels, 0.1);
  }, {rand64({2, 4, 4, 2}), rand64({3, 3, 3, 2}), rand64({3}), rand64({3}, 0.5, 1.5), rand64({3}),
      rand64({2, 12}), rand64({2})});
}

// Every unary op's backward formula (kernels/element_math.h, ENGINE_UNARY_OPS) against central
// differences of its forward formula, in double: a new element-wise op is checked here without
// a line of test code. Step h = 1e-5: truncation ~ h^2 |f'''| ~ 1e-10, rounding ~ u/h ~ 1e-11.
TEST_CASE("every unary op's backward formula is the derivative of its forward formula", "[grad]") {
  auto check = [](const char* name, auto op) {
    using Op = decltype(op);
    INFO(name);
    const double h = 1e-5;
    for (double x = -4.0; x <= 4.0; x += 0.37) {
      const double fd = (Op::template fwd<double>(x + h) - Op::template fwd<double>(x - h)) / (2 * h);
      CHECK(Op::template bwd<double>(x, 1.0) == Approx(fd).margin(1e-8).epsilon(1e-7));
      CHECK(Op::template bwd<double>(x, -2.5) == Approx(-2.5 * fd).margin(1e-8).epsilon(1e-7));
    }
  };
#define ENGINE_CHECK_UNARY(Op) check(#Op, kernels::Op{});
  ENGINE_UNARY_OPS(ENGINE_CHECK_UNARY)
#undef ENGINE_CHECK_UNARY
}
