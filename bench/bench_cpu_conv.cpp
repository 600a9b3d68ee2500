// CPU conv2d benchmark: GFLOP/s of the kernels under the engine's conv2d - forward,
// backward-data and backward-filter - at the layer shapes of the CIFAR-10 models, the im2col +
// GEMM path and the implicit GEMM side by side in one run, our BF16 path (the one conv2d takes
// for BF16 data), and, where oneDNN was found at build time, oneDNN's FP32 and BF16 as the
// yardstick (the kernel it picked is printed under each layer).
//   bench_cpu_conv [--quick] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "engine/ops.h"
#include "engine/random.h"
#include "engine/tensor.h"
#include "kernels/cpu/bf16_tiles.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/conv_implicit.h"
#if defined(ENGINE_HAVE_ONEDNN)
#include "bench/onednn_conv.h"
#endif

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
  bool quick = false, bf16_only = false;
  // --route: the BF16 column through one route of the tile kernels (auto: what conv2d takes).
  kernels::cpu::TileRoute bf16_route = kernels::cpu::TileRoute::Auto;
  std::string json, only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick")) quick = true;
    else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
    else if (!std::strcmp(argv[i], "--layer") && i + 1 < argc) only = argv[++i];
    else if (!std::strcmp(argv[i], "--bf16-only")) bf16_only = true;
    else if (!std::strcmp(argv[i], "--route") && i + 1 < argc) {
      const std::string r = argv[++i];
      if (r == "flat") bf16_route = kernels::cpu::TileRoute::Flat;
      else if (r == "columns") bf16_route = kernels::cpu::TileRoute::Columns;
      else if (r != "auto") {
        std::fprintf(stderr, "bench_cpu_conv: --route takes auto, flat or columns, not '%s'\n", r.c_str());
        return 2;
      }
    }
    else {
      std::fprintf(stderr, "usage: %s [--quick] [--json FILE] [--layer SUBSTRING] [--bf16-only] [--route auto|flat|columns]\n",
                   argv[0]);
      return 2;
    }
  }
  const int64_t batch = quick ? 16 : 64;
  const Layer layers[] = {
      {"simplecnn conv1 3->16", batch, 32, 32, 3, 16, 3, 1, 1},
      {"simplecnn conv2 16->32", batch, 16, 16, 16, 32, 3, 1, 1},
      {"resnet stem 3->64", batch, 32, 32, 3, 64, 3, 1, 1},
      {"resnet 64->64 3x3", batch, 32, 32, 64, 64, 3, 1, 1},
      {"resnet 128->128 3x3", batch, 16, 16, 128, 128, 3, 1, 1},
      {"resnet 64->128 1x1 s2", batch, 32, 32, 64, 128, 1, 2, 0},
      {"resnet 256->256 3x3", batch, 8, 8, 256, 256, 3, 1, 1},
      {"resnet 512->512 3x3", batch, 4, 4, 512, 512, 3, 1, 1},
      // resnet18's downsampling convolutions and resnet9's widening ones
      {"resnet18 64->128 3x3 s2", batch, 32, 32, 64, 128, 3, 2, 1},
      {"resnet18 128->256 3x3 s2", batch, 16, 16, 128, 256, 3, 2, 1},
      {"resnet18 256->512 3x3 s2", batch, 8, 8, 256, 512, 3, 2, 1},
      {"resnet18 256->512 1x1 s2", batch, 8, 8, 256, 512, 1, 2, 0},
      {"resnet9 64->128 3x3", batch, 32, 32, 64, 128, 3, 1, 1},
      {"resnet9 128->256 3x3", batch, 16, 16, 128, 256, 3, 1, 1},
      {"resnet9 256->512 3x3", batch, 8, 8, 256, 512, 3, 1, 1},
      // airbench94's convolutions after its 2x2 whitening layer (31 x 31, then max-pool 2 each group)
      {"airbench 24->64 31x31", batch, 31, 31, 24, 64, 3, 1, 1},
      {"airbench 64->64 15x15", batch, 15, 15, 64, 64, 3, 1, 1},
      {"airbench 64->256 15x15", batch, 15, 15, 64, 256, 3, 1, 1},
      {"airbench 256->256 7x7", batch, 7, 7, 256, 256, 3, 1, 1},
      {"airbench 256->256 3x3", batch, 3, 3, 256, 256, 3, 1, 1},
  };
  kernels::cpu::TileUnit unit = kernels::cpu::TileUnit::Emulated;
  if (bf16_route != kernels::cpu::TileRoute::Auto && !kernels::cpu::bf16_tile_unit(&unit)) {
    std::fprintf(stderr, "bench_cpu_conv: --route needs a BF16 tile unit (AMX or AVX512-BF16); this CPU has none\n");
    return 2;
  }
  const int reps = quick ? 3 : 7;
  engine::manual_seed(1);
  std::printf("CPU conv2d, batch %lld, median of %d runs (GFLOP/s): f32 im2col + GEMM vs implicit GEMM; bf16\n",
              static_cast<long long>(batch), reps);
  std::printf("%s\n", kernels::cpu::cpu_isa_report().c_str());
#if defined(ENGINE_HAVE_ONEDNN)
  const bool onednn = true;
#else
  const bool onednn = false;
  std::printf("(oneDNN not found at build time: no yardstick columns; apt-get install libdnnl-dev and rebuild)\n");
#endif
  std::printf("%-26s %-11s %10s %10s %8s %10s %10s %10s %9s\n", "layer", "pass", "im2col", "implicit", "ratio",
              "ours bf16", "dnnl f32", "dnnl bf16", "bf16/dnnl");
  std::string rows;
  for (const Layer& L : layers) {
    if (!only.empty() && std::string(L.name).find(only) == std::string::npos) continue;
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
    using kernels::bfloat16;
    Tensor xh = engine::cast(x, DType::BF16), wh = engine::cast(w, DType::BF16), bh = engine::cast(b, DType::BF16),
           gyh = engine::cast(gy, DType::BF16);
    Tensor yh = Tensor::empty(gy.shape(), DType::BF16), gxh = Tensor::empty(x.shape(), DType::BF16);
    Tensor gwh = Tensor::empty(w.shape(), DType::BF16), gbh = Tensor::empty(b.shape(), DType::BF16);
    const bfloat16 *xq = xh.data<bfloat16>(), *wq = wh.data<bfloat16>(), *bq = bh.data<bfloat16>(),
                   *gyq = gyh.data<bfloat16>();
    bfloat16 *yq = yh.data<bfloat16>(), *gxq = gxh.data<bfloat16>(), *gwq = gwh.data<bfloat16>(),
             *gbq = gbh.data<bfloat16>();
    // Both algorithms' kernels called directly, each pass timed on its own; conv2d takes the
    // implicit one wherever it fits.
    namespace cpu = kernels::cpu;
    const kernels::ConvShape sh{L.n, L.h, L.w, L.c, L.k, L.r, L.r, L.stride, L.pad};
    struct Pass {
      const char* name;
      bool fits;
      std::function<void()> im2col, implicit, bf16;
    };
    const Pass passes[] = {
        {"forward", cpu::implicit_forward_fits(sh), [&] { cpu::conv2d_forward_dense(sh, xp, wp, bp, yp); },
         [&] { cpu::conv2d_forward_implicit(sh, xp, wp, bp, yp); },
         [&] { bf16_route == cpu::TileRoute::Auto ? cpu::conv2d_forward(sh, xq, wq, bq, yq)
                                                  : cpu::conv2d_forward_bf16_tiles(unit, sh, xq, wq, bq, yq, bf16_route); }},
        {"bwd data", cpu::implicit_backward_data_fits(sh), [&] { cpu::conv2d_backward_data_dense(sh, gyp, wp, gxp); },
         [&] { cpu::conv2d_backward_data_implicit(sh, gyp, wp, gxp); },
         [&] { bf16_route == cpu::TileRoute::Auto ? cpu::conv2d_backward_data(sh, gyq, wq, gxq)
                                                  : cpu::conv2d_backward_data_bf16_tiles(unit, sh, gyq, wq, gxq, bf16_route); }},
        {"bwd filter", cpu::implicit_backward_filter_fits(sh),
         [&] { cpu::conv2d_backward_filter_dense(sh, xp, gyp, gwp, gbp); },
         [&] { cpu::conv2d_backward_filter_implicit(sh, xp, gyp, gwp, gbp); },
         [&] { bf16_route == cpu::TileRoute::Auto
                   ? cpu::conv2d_backward_filter(sh, xq, gyq, gwq, gbq)
                   : cpu::conv2d_backward_filter_bf16_tiles(unit, sh, xq, gyq, gwq, gbq, bf16_route); }},
    };
    std::string kernels_used;
    for (size_t pi = 0; pi < 3; ++pi) {
      const Pass& pass = passes[pi];
      const double old_gflops = bf16_only ? 0.0 : flops / median_seconds(pass.im2col, reps) * 1e-9;
      const double new_gflops = pass.fits && !bf16_only ? flops / median_seconds(pass.implicit, reps) * 1e-9 : 0.0;
      double bf16_gflops = 0;  // 0: "-", the forced route does not take this pass (flat: stride 1 data only)
      try {
        bf16_gflops = flops / median_seconds(pass.bf16, reps) * 1e-9;
      } catch (const std::exception&) {
        if (bf16_route == cpu::TileRoute::Auto) throw;
      }
      double dnnl_f32 = 0, dnnl_bf16 = 0;
#if defined(ENGINE_HAVE_ONEDNN)
      const bench::ConvPass dp = static_cast<bench::ConvPass>(pi);
      if (!bf16_only) try {
        const bench::OnednnTiming f = bench::onednn_conv(sh, dp, false, reps), h = bench::onednn_conv(sh, dp, true, reps);
        dnnl_f32 = flops / f.seconds * 1e-9;
        dnnl_bf16 = flops / h.seconds * 1e-9;
        kernels_used += std::string(kernels_used.empty() ? "" : "; ") + pass.name + ": " + f.impl + " / " + h.impl;
      } catch (const std::exception& e) {
        kernels_used += std::string(kernels_used.empty() ? "" : "; ") + pass.name + ": oneDNN refused (" + e.what() + ")";
      }
#endif
      auto col = [](double v) {
        char b[32];
        if (v > 0) std::snprintf(b, sizeof b, "%10.1f", v);
        else std::snprintf(b, sizeof b, "%10s", "-");
        return std::string(b);
      };
      char ratio[32] = "       -", vs[32] = "        -";
      if (pass.fits && !bf16_only) std::snprintf(ratio, sizeof ratio, "%7.2fx", new_gflops / old_gflops);
      if (dnnl_bf16 > 0 && bf16_gflops > 0) std::snprintf(vs, sizeof vs, "%8.2fx", bf16_gflops / dnnl_bf16);
      std::printf("%-26s %-11s %s %s %s %s %s %s %s\n", L.name, pass.name, col(old_gflops).c_str(),
                  col(new_gflops).c_str(), ratio, col(bf16_gflops).c_str(), col(dnnl_f32).c_str(),
                  col(dnnl_bf16).c_str(), vs);
      char buf[512];
      std::snprintf(buf, sizeof buf,
                    "%s{\"layer\":\"%s\",\"pass\":\"%s\",\"im2col_gflops\":%.2f,\"implicit_gflops\":%s,"
                    "\"bf16_gflops\":%.2f,\"onednn_f32_gflops\":%s,\"onednn_bf16_gflops\":%s}",
                    rows.empty() ? "" : ",", L.name, pass.name, old_gflops,
                    pass.fits ? std::to_string(new_gflops).c_str() : "null", bf16_gflops,
                    dnnl_f32 > 0 ? std::to_string(dnnl_f32).c_str() : "null",
                    dnnl_bf16 > 0 ? std::to_string(dnnl_bf16).c_str() : "null");
      rows += buf;
    }
    if (onednn) std::printf("  oneDNN f32 / bf16 kernels: %s\n", kernels_used.c_str());
  }
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "error: cannot write %s\n", json.c_str());
      return 1;
    }
    std::fprintf(f, "{\"benchmark\":\"cpu_conv2d\",\"dtype\":\"f32\",\"batch\":%lld,\"onednn\":%s,\"results\":[%s]}\n",
                 static_cast<long long>(batch), onednn ? "true" : "false", rows.c_str());
    std::fclose(f);
  }
  return 0;
}
