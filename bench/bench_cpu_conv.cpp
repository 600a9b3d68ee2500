// CPU conv2d benchmark: GFLOP/s of the kernels under the engine's conv2d - forward,
// backward-data and backward-filter - at the layer shapes of the CIFAR-10 models, the im2col +
// GEMM path and the implicit GEMM side by side in one run.
//   bench_cpu_conv [--quick] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "engine/random.h"
#include "engine/tensor.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/cpu_isa.h"

using engine::DType;
using engine::Tensor;

namespace {

struct Layer { const char* name; int64_t n, h, w, c, k, r, stride, pad; };

template <class F> double median_seconds(F f, int reps) {
  f();  // warm-up: first-touch of buffers, thread pool start
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--quick] [--json FILE]\n", argv[0]);
      return 2;
    }
  }
  const int64_t batch = quick ? 16 : 64;
  const Layer layers[] = {
      {"simplecnn conv1 3->16", batch, 32, 32, 3, 16, 3, 1, 1},
      {"simplecnn conv2 16->32", batch, 16, 16, 16, 32, 3, 1, 1},
      {"resnet 64->64 3x3", batch, 32, 32, 64, 64, 3, 1, 1},
      {"resnet 128->128 3x3", batch, 16, 16, 128, 128, 3, 1, 1},
      {"resnet 64->128 1x1 s2", batch, 32, 32, 64, 128, 1, 2, 0},
      {"resnet 256->256 3x3", batch, 8, 8, 256, 256, 3, 1, 1},
      {"resnet 512->512 3x3", batch, 4, 4, 512, 512, 3, 1, 1},
  };
  const int reps = quick ? 3 : 7;
  engine::manual_seed(1);
  std::printf("CPU conv2d, f32, batch %lld, median of %d runs (GFLOP/s): im2col + GEMM vs implicit GEMM\n",
              static_cast<long long>(batch), reps);
  std::printf("%s\n", kernels::cpu::cpu_isa_report().c_str());
  std::printf("%-26s %-11s %10s %10s %8s\n", "layer", "pass", "im2col", "implicit", "ratio");
  std::string rows;
  for (const Layer& L : layers) {
    Tensor x = engine::uniform({L.n, L.h, L.w, L.c}, -1, 1, DType::F32);
    Tensor w = engine::uniform({L.k, L.r, L.r, L.c}, -1, 1, DType::F32);
    Tensor b = engine::uniform({L.k}, -1, 1, DType::F32);
    const int64_t oh = (L.h + 2 * L.pad - L.r) / L.stride + 1, ow = (L.w + 2 * L.pad - L.r) / L.stride + 1;
    const double flops = 2.0 * L.n * oh * ow * L.k * L.r * L.r * L.c;
    Tensor gy = engine::uniform({L.n, oh, ow, L.k}, -1, 1, DType::F32);
    Tensor y = Tensor::empty(gy.shape(), DType::F32), gx = Tensor::empty(x.shape(), DType::F32);
    Tensor gw = Tensor::empty(w.shape(), DType::F32), gb = Tensor::empty(b.shape(), DType::F32);
    const float *xp = x.data<float>(), *wp = w.data<float>(), *bp = b.data<float>(), *gyp = gy.data<float>();
    float *yp = y.data<float>(), *gxp = gx.data<float>(), *gwp = gw.data<float>(), *gbp = gb.data<float>();
    // Both algorithms' kernels called directly, each pass timed on its own; conv2d takes the
    // implicit one wherever it fits.
    namespace cpu = kernels::cpu;
    const kernels::ConvShape sh{L.n, L.h, L.w, L.c, L.k, L.r, L.r, L.stride, L.pad};
    struct Pass {
      const char* name;
      bool fits;
      std::function<void()> im2col, implicit;
    };
    const Pass passes[] = {
        {"forward", cpu::implicit_forward_fits(sh), [&] { cpu::conv2d_forward_dense(sh, xp, wp, bp, yp); },
         [&] { cpu::conv2d_forward_implicit(sh, xp, wp, bp, yp); }},
        {"bwd data", cpu::implicit_backward_data_fits(sh), [&] { cpu::conv2d_backward_data_dense(sh, gyp, wp, gxp); },
         [&] { cpu::conv2d_backward_data_implicit(sh, gyp, wp, gxp); }},
        {"bwd filter", cpu::implicit_backward_filter_fits(sh),
         [&] { cpu::conv2d_backward_filter_dense(sh, xp, gyp, gwp, gbp); },
         [&] { cpu::conv2d_backward_filter_implicit(sh, xp, gyp, gwp, gbp); }},
    };
    for (const Pass& pass : passes) {
      const double old_gflops = flops / median_seconds(pass.im2col, reps) * 1e-9;
      const double new_gflops = pass.fits ? flops / median_seconds(pass.implicit, reps) * 1e-9 : 0.0;
      if (pass.fits)
        std::printf("%-26s %-11s %10.1f %10.1f %7.2fx\n", L.name, pass.name, old_gflops, new_gflops, new_gflops / old_gflops);
      else
        std::printf("%-26s %-11s %10.1f %10s %8s\n", L.name, pass.name, old_gflops, "-", "-");
      char buf[256];
      std::snprintf(buf, sizeof buf, "%s{\"layer\":\"%s\",\"pass\":\"%s\",\"im2col_gflops\":%.2f,\"implicit_gflops\":%s}",
                    rows.empty() ? "" : ",", L.name, pass.name, old_gflops,
                    pass.fits ? std::to_string(new_gflops).c_str() : "null");
      rows += buf;
    }
  }
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "error: cannot write %s\n", json.c_str());
      return 1;
    }
    std::fprintf(f, "{\"benchmark\":\"cpu_conv2d\",\"dtype\":\"f32\",\"batch\":%lld,\"results\":[%s]}\n",
                 static_cast<long long>(batch), rows.c_str());
    std::fclose(f);
  }
  return 0;
}
