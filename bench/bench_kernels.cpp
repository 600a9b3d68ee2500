// Kernel benchmark: our linear and conv ops in FLOP/s next to a direct library call of the same
// problem, and our memory-bound kernels in GB/s next to a copy of the same bytes; CPU here, the
// GPU section in bench_kernels_cuda.cu. Prints a table and, with --json, writes every row.
//   bench_kernels [--device cpu|cuda|all] [--only GROUP] [--quick] [--iters N] [--json FILE]
#include "bench/bench_kernels.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/ops.h"
#include "models/cli.h"
#include "engine/random.h"
#include "kernels/cpu/batch_norm.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/optim.h"
#include "kernels/cpu/pool.h"

using engine::DType;
using engine::Tensor;
using kernels::bfloat16;
using kernels::half;

namespace {

const char* usage =
    "usage: bench_kernels [--device cpu|cuda|all] [--only gemm|conv|memory] [--quick] [--iters N] [--json FILE]\n"
    "  Times our linear/conv ops against a direct library call of the same problem (cuBLASLt,\n"
    "  cuDNN; on the CPU our own GEMM called directly) and our memory-bound kernels against a\n"
    "  copy of the same number of bytes. Median of --iters timed calls after warm-up, on\n"
    "  non-zero inputs larger than the last-level cache, rotated between calls.\n"
    "  --device  cpu, cuda or all (default: all = the CPU, then the GPU when there is one)\n";

// Median wall time of fn(i) over `iters` calls after one warm-up call.
double time_cpu_ms(const std::function<void(int)>& fn, int iters) {
  fn(0);
  std::vector<double> t;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn(i + 1);
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return bench::median(t);
}

// Non-zero values in [lo, hi) of the given dtype (CPU).
Tensor random_cpu(const engine::Shape& shape, DType dt, double lo = -1, double hi = 1) {
  return engine::cast(engine::uniform(shape, lo, hi, DType::F32), dt);
}

const char* dname(DType d) { return d == DType::F32 ? "fp32" : d == DType::F16 ? "fp16" : "bf16"; }

std::string dims(std::initializer_list<int64_t> v, const char* sep = "x") {
  std::string s;
  for (int64_t d : v) s += (s.empty() ? "" : sep) + std::to_string(d);
  return s;
}

// ---- CPU: GEMM and conv through our ops --------------------------------------------------------

template <class T> void cpu_gemm_direct(int64_t rows, int64_t in, int64_t out, const Tensor& x, const Tensor& w, Tensor& y) {
  kernels::cpu::gemm<T>(kernels::cpu::Trans::N, kernels::cpu::Trans::T, rows, out, in, 1.0, x.data<T>(), in,
                        w.data<T>(), in, 0.0, y.data<T>(), out);
}

void cpu_gemm(const bench::Options& opt, std::vector<bench::Row>& rows) {
  struct Shape { int64_t rows, in, out; const char* what; };
  std::vector<Shape> shapes = {{256, 2048, 256, "simplecnn fc1"}, {1024, 1024, 1024, "square"}};
  if (opt.quick) shapes.resize(1);
  const int iters = opt.iters > 0 ? opt.iters : opt.quick ? 2 : 7;
  for (const Shape& s : shapes)
    for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
      // Two input sets, alternated, so consecutive calls do not find their operands in cache.
      Tensor x[2] = {random_cpu({s.rows, s.in}, dt), random_cpu({s.rows, s.in}, dt)};
      Tensor w[2] = {random_cpu({s.out, s.in}, dt, -0.1, 0.1), random_cpu({s.out, s.in}, dt, -0.1, 0.1)};
      Tensor y = Tensor::empty({s.rows, s.out}, dt);
      bench::Row r = bench::make_row("cpu", "gemm", std::string("linear fwd, no bias (") + s.what + ")", dname(dt),
                                     dims({s.rows, s.in, s.out}), "GFLOP/s", 2.0 * s.rows * s.in * s.out);
      // No bias on either side: our CPU GEMM has no bias epilogue to call directly.
      r.ms = time_cpu_ms([&](int i) { (void)engine::linear(x[i & 1], w[i & 1], Tensor()); }, iters);
      r.ref_name = "our GEMM, direct";
      r.ref_ms = time_cpu_ms(
          [&](int i) {
            if (dt == DType::F32) cpu_gemm_direct<float>(s.rows, s.in, s.out, x[i & 1], w[i & 1], y);
            else if (dt == DType::F16) cpu_gemm_direct<half>(s.rows, s.in, s.out, x[i & 1], w[i & 1], y);
            else cpu_gemm_direct<bfloat16>(s.rows, s.in, s.out, x[i & 1], w[i & 1], y);
          },
          iters);
      rows.push_back(r);
    }
}

void cpu_conv(const bench::Options& opt, std::vector<bench::Row>& rows) {
  struct Shape { int64_t n, hw, c, k; const char* what; };
  std::vector<Shape> shapes = {{256, 16, 16, 32, "simplecnn conv2"}, {32, 16, 64, 64, "resnet 3x3"}};
  if (opt.quick) shapes.resize(1);
  const int iters = opt.iters > 0 ? opt.iters : opt.quick ? 2 : 5;
  for (const Shape& s : shapes)
    for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
      Tensor x[2] = {random_cpu({s.n, s.hw, s.hw, s.c}, dt), random_cpu({s.n, s.hw, s.hw, s.c}, dt)};
      Tensor w = random_cpu({s.k, 3, 3, s.c}, dt, -0.1, 0.1);
      bench::Row r = bench::make_row(
          "cpu", "conv", std::string("conv fwd (") + s.what + ")", dname(dt),
          "n" + std::to_string(s.n) + " " + dims({s.hw, s.hw, s.c}) + " k" + std::to_string(s.k) + " 3x3", "GFLOP/s",
          2.0 * s.n * s.hw * s.hw * s.k * 9 * s.c);
      r.ms = time_cpu_ms([&](int i) { (void)engine::conv2d(x[i & 1], w, Tensor(), 1, 1); }, iters);
      rows.push_back(r);
    }
}

// ---- CPU: memory-bound kernels against a copy of the same bytes --------------------------------

// A parallel copy of `bytes` (half read, half written), split like our kernels' OpenMP loops.
void parallel_copy(char* dst, const char* src, size_t half_bytes) {
  const int64_t chunk = 1 << 20, chunks = static_cast<int64_t>((half_bytes + chunk - 1) / chunk);
#pragma omp parallel for
  for (int64_t i = 0; i < chunks; ++i) {
    const size_t off = static_cast<size_t>(i * chunk);
    std::memcpy(dst + off, src + off, std::min<size_t>(chunk, half_bytes - off));
  }
}

void cpu_memory(const bench::Options& opt, std::vector<bench::Row>& rows) {
  const int64_t n = opt.quick ? (1 << 22) : (1 << 24);  // 16 Mi elements: 64 MiB of FP32
  const int iters = opt.iters > 0 ? opt.iters : opt.quick ? 3 : 9;
  const int64_t hw = 32, c = 64, batch = n / (hw * hw * c);
  std::vector<bench::MemCase> cases;
  // Two sets of every input, alternated between calls.
  auto pair = [&](DType dt, int64_t count) {
    return std::vector<Tensor>{random_cpu({count}, dt), random_cpu({count}, dt)};
  };
  auto add_elementwise = [&](DType dt, auto tag) {
    using T = decltype(tag);
    const std::string d = dname(dt);
    auto x = pair(dt, n), g = pair(dt, n);
    Tensor y = Tensor::empty({n}, dt);
    const double e = sizeof(T);
    cases.push_back({"relu fwd", d, std::to_string(n), 2 * e * n,
                     [=](int i) { kernels::cpu::relu_forward(x[i & 1].data<T>(), y.data<T>(), n); }});
    cases.push_back({"relu bwd", d, std::to_string(n), 3 * e * n, [=](int i) {
                       kernels::cpu::relu_backward(x[i & 1].data<T>(), g[i & 1].data<T>(), y.data<T>(), n);
                     }});
    cases.push_back({"add", d, std::to_string(n), 3 * e * n,
                     [=](int i) { kernels::cpu::add(x[i & 1].data<T>(), g[i & 1].data<T>(), y.data<T>(), n); }});
    // Batch-norm over [N*H*W, C]: statistics pass + normalise pass read x twice.
    const int64_t r = n / c;
    auto gamma = random_cpu({c}, DType::F32, 0.5, 1.5), beta = random_cpu({c}, DType::F32);
    auto mean = Tensor::empty({c}, DType::F32), invstd = Tensor::empty({c}, DType::F32);
    auto rm = Tensor::zeros({c}, DType::F32), rv = Tensor::full({c}, 1.0, DType::F32);
    auto gg = Tensor::empty({c}, DType::F32), gb = Tensor::empty({c}, DType::F32);
    const std::string bn_shape = dims({r, c}, " x ");
    cases.push_back({"batchnorm fwd (train)", d, bn_shape, 3 * e * n, [=](int i) {
                       kernels::cpu::batch_norm_forward_train<T, float>(
                           r, c, x[i & 1].data<T>(), gamma.data<float>(), beta.data<float>(), 1e-5f, 0.1f,
                           rm.data<float>(), rv.data<float>(), mean.data<float>(), invstd.data<float>(), y.data<T>());
                     }});
    cases.push_back({"batchnorm bwd", d, bn_shape, 5 * e * n, [=](int i) {
                       kernels::cpu::batch_norm_backward<T, float>(r, c, x[i & 1].data<T>(), g[i & 1].data<T>(),
                                                                  gamma.data<float>(), mean.data<float>(),
                                                                  invstd.data<float>(), true, y.data<T>(),
                                                                  gg.data<float>(), gb.data<float>());
                     }});
    // 2x2 max-pool: read x, write a quarter of it and its one-byte argmax.
    const kernels::PoolShape ps{batch, hw, hw, c, 2, 2, 0};
    const int64_t out = n / 4;
    auto py = Tensor::empty({out}, dt);
    auto arg = Tensor::empty({out}, DType::U8);
    const std::string pool_shape = dims({batch, hw, hw, c});
    cases.push_back({"maxpool 2x2 fwd", d, pool_shape, e * n + (e + 1) * out, [=](int i) {
                       kernels::cpu::max_pool2d_forward(ps, x[i & 1].data<T>(), py.data<T>(), arg.data<uint8_t>());
                     }});
    // The CPU backward zeroes gx itself (it overwrites, like the GPU's): that pass is in the cost.
    cases.push_back({"maxpool 2x2 bwd", d, pool_shape, (e + 1) * out + e * n, [=](int) {
                       kernels::cpu::max_pool2d_backward(ps, py.data<T>(), arg.data<uint8_t>(), y.data<T>());
                     }});
    cases.push_back({"global avgpool fwd", d, pool_shape, e * n, [=](int i) {
                       kernels::cpu::global_avg_pool_forward(batch, hw * hw, c, x[i & 1].data<T>(), py.data<T>());
                     }});
    // Cross-entropy over [rows, 1000] logits: read logits, write FP32 probabilities.
    static const float kOne = 1.0f;  // the incoming gradient
    const int64_t k = 1000, ce_rows = n / k;
    std::vector<int32_t> lab(static_cast<size_t>(ce_rows));
    for (int64_t j = 0; j < ce_rows; ++j) lab[j] = static_cast<int32_t>((j * 7) % k);
    auto labels = Tensor::from_ints(lab, {ce_rows});
    auto probs = Tensor::empty({ce_rows, k}, DType::F32);
    auto loss = Tensor::empty({1}, DType::F32);
    const std::string ce_shape = dims({ce_rows, k}, " x ");  // as on the GPU
    cases.push_back({"cross-entropy fwd", d, ce_shape, (e + 4) * ce_rows * k + 4.0 * ce_rows, [=](int i) {
                       kernels::cpu::cross_entropy_forward<T, float>(ce_rows, k, x[i & 1].data<T>(),
                                                                     labels.data<int32_t>(), 0.0f, probs.data<float>(),
                                                                     loss.data<float>(), nullptr);
                     }});
    cases.push_back({"cross-entropy bwd", d, ce_shape, (4 + e) * ce_rows * k + 4.0 * ce_rows, [=](int) {
                       kernels::cpu::cross_entropy_backward<T, float>(ce_rows, k, probs.data<float>(),
                                                                      labels.data<int32_t>(), 0.0f, &kOne, nullptr,
                                                                      y.data<T>());
                     }});
  };
  add_elementwise(DType::F32, float{});
  add_elementwise(DType::F16, half{});
  if (!opt.quick) add_elementwise(DType::BF16, bfloat16{});
  {
    auto x32 = pair(DType::F32, n), x16 = pair(DType::F16, n);
    Tensor y16 = Tensor::empty({n}, DType::F16), y32 = Tensor::empty({n}, DType::F32);
    cases.push_back({"cast", "fp32->fp16", std::to_string(n), 6.0 * n,
                     [=](int i) { kernels::cpu::cast(x32[i & 1].data<float>(), y16.data<half>(), n); }});
    cases.push_back({"cast", "fp16->fp32", std::to_string(n), 6.0 * n,
                     [=](int i) { kernels::cpu::cast(x16[i & 1].data<half>(), y32.data<float>(), n); }});
    cases.push_back({"found-inf check", "fp16", std::to_string(n), 2.0 * n,
                     [=](int i) { (void)kernels::cpu::all_finite(x16[i & 1].data<half>(), n); }});
    // The fused optimizer steps, FP16 gradients and compute copies, FP32 master and state:
    // SGD+momentum reads g, w, buf and writes w, buf, copy (2+4+4 + 4+4+2 = 20 B per weight);
    // Adam reads g, w, m, v and writes w, m, v, copy (2+12 + 12+2 = 28 B).
    auto master = random_cpu({n}, DType::F32), s1 = random_cpu({n}, DType::F32, 0, 0.1);
    auto s2 = random_cpu({n}, DType::F32, 1e-6, 1e-3);
    kernels::SgdConfig sgd;
    sgd.lr = 1e-6;
    sgd.momentum = 0.9;
    kernels::AdamConfig adam;
    adam.lr = 1e-6;
    cases.push_back({"SGD momentum step", "fp16 grads", std::to_string(n), 20.0 * n, [=](int i) {
                       kernels::cpu::sgd_step<half, float, half>(n, x16[i & 1].data<half>(), 1.0f / 1024,
                                                                 master.data<float>(), s1.data<float>(),
                                                                 y16.data<half>(), false, sgd);
                     }});
    cases.push_back({"Adam step", "fp16 grads", std::to_string(n), 28.0 * n, [=](int i) {
                       kernels::cpu::adam_step<half, float, half>(n, x16[i & 1].data<half>(), 1.0f / 1024,
                                                                  master.data<float>(), s1.data<float>(),
                                                                  s2.data<float>(), y16.data<half>(), adam);
                     }});
  }
  // The yardstick: a parallel memcpy moving the same bytes (size -> median ms, measured once).
  std::vector<char> src(static_cast<size_t>(n) * 16), dst(src.size());
  for (size_t j = 0; j < src.size(); ++j) src[j] = static_cast<char>(j * 131 + 7);
  for (const bench::MemCase& mc : cases) {
    bench::Row r = bench::make_row("cpu", "memory", mc.name, mc.dtype, mc.shape, "GB/s", mc.bytes);
    r.ms = time_cpu_ms(mc.run, iters);
    const size_t half_bytes = std::min(src.size(), static_cast<size_t>(mc.bytes / 2));
    r.ref_name = "memcpy, same bytes";
    r.ref_ms = time_cpu_ms([&](int) { parallel_copy(dst.data(), src.data(), half_bytes); }, iters);
    rows.push_back(r);
  }
}

// ---- report -------------------------------------------------------------------------------------

void print_rows(const std::vector<bench::Row>& rows) {
  std::string last;
  for (const bench::Row& r : rows) {
    const std::string head = r.device + " " + r.group;
    if (head != last) {
      std::printf("\n%-7s %-6s %-37s %-11s %-24s %9s %10s  %-20s %10s %7s\n", "device", "group", "kernel", "dtype",
                  "shape", "ms", "rate", "yardstick", "its rate", "ratio");
      last = head;
    }
    char rate[32], ref[32], ratio[16];
    std::snprintf(rate, sizeof rate, "%.1f %s", r.rate(), r.unit == "TFLOP/s" ? "T" : r.unit == "GB/s" ? "GB" : "G");
    std::snprintf(ref, sizeof ref, r.ref_ms > 0 ? "%.1f" : "-", r.ref_rate());
    std::snprintf(ratio, sizeof ratio, r.ref_ms > 0 ? "%.0f%%" : "-", 100 * r.ratio());
    std::printf("%-7s %-6s %-37s %-11s %-24s %9.3f %10s  %-20s %10s %7s\n", r.device.c_str(), r.group.c_str(),
                r.name.c_str(), r.dtype.c_str(), r.shape.c_str(), r.ms, rate, r.ref_name.empty() ? "-" : r.ref_name.c_str(),
                ref, ratio);
  }
  std::printf("\nrate: TFLOP/s (T), GFLOP/s (G) or GB/s read + written (GB); ratio = our rate / the yardstick's.\n");
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    if (ch == '"' || ch == '\\') o += '\\';
    o += ch;
  }
  return o;
}

bool write_json(const std::string& path, const std::vector<bench::Row>& rows) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  std::fprintf(f, "{\"benchmark\":\"kernels\",\"rows\":[");
  for (size_t i = 0; i < rows.size(); ++i) {
    const bench::Row& r = rows[i];
    std::fprintf(f,
                 "%s\n{\"device\":\"%s\",\"group\":\"%s\",\"name\":\"%s\",\"dtype\":\"%s\",\"shape\":\"%s\","
                 "\"unit\":\"%s\",\"work\":%.6g,\"ms\":%.6g,\"rate\":%.6g,\"yardstick\":\"%s\",\"yardstick_ms\":%.6g,"
                 "\"yardstick_rate\":%.6g,\"ratio\":%.4f}",
                 i ? "," : "", r.device.c_str(), r.group.c_str(), json_escape(r.name).c_str(), r.dtype.c_str(),
                 r.shape.c_str(), r.unit.c_str(), r.work, r.ms, r.rate(), json_escape(r.ref_name).c_str(), r.ref_ms,
                 r.ref_rate(), r.ratio());
  }
  std::fprintf(f, "\n]}\n");
  return std::fclose(f) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Options opt;
  std::string device = "all", json;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_kernels: %s needs a value\n%s", a.c_str(), usage);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--device") device = next();
    else if (a == "--only") opt.only = next();
    else if (a == "--quick") opt.quick = true;
    else if (a == "--iters") {
      try {
        opt.iters = static_cast<int>(models::parse_int("--iters", next(), 1, 1000000));
      } catch (const models::UsageError& e) {
        return models::report_usage_error("bench_kernels", e);
      }
    }
    else if (a == "--json") json = next();
    else if (a == "-h" || a == "--help") {
      std::fputs(usage, stdout);
      return 0;
    } else {
      std::fprintf(stderr, "bench_kernels: unknown argument '%s'\n%s", a.c_str(), usage);
      return 2;
    }
  }
  if (device != "cpu" && device != "cuda" && device != "all") {
    std::fprintf(stderr, "bench_kernels: --device must be cpu, cuda or all, not '%s'\n", device.c_str());
    return 2;
  }
  // The environment switches as every tool checks them: before anything runs (a bad one would
  // otherwise end the run from inside a kernel).
  if (const int rc = models::report_environment_error()) return rc;
  std::vector<bench::Row> rows;
  try {
    engine::manual_seed(1);
    if (device != "cuda") {
      std::printf("CPU section (%s)...\n", opt.quick ? "quick" : "full");
      std::fflush(stdout);
      if (opt.wants("gemm")) cpu_gemm(opt, rows);
      if (opt.wants("conv")) cpu_conv(opt, rows);
      if (opt.wants("memory")) cpu_memory(opt, rows);
    }
    if (device != "cpu") {
      std::string why;
      if (!bench::run_cuda(opt, rows, &why)) {
        if (device == "cuda") {
          std::fprintf(stderr, "bench_kernels: no CUDA device: %s\n", why.c_str());
          return 1;
        }
        std::printf("GPU section skipped: %s\n", why.c_str());
      }
    }
  } catch (const engine::Error& e) {
    std::fprintf(stderr, "bench_kernels: error: %s\n", e.message().c_str());
    return 1;
  }
  print_rows(rows);
  if (!json.empty()) {
    if (!write_json(json, rows)) {
      std::fprintf(stderr, "bench_kernels: cannot write %s\n", json.c_str());
      return 1;
    }
    std::printf("wrote %s\n", json.c_str());
  }
  return 0;
}

#ifndef ENGINE_WITH_CUDA
// A build without the CUDA backend has no GPU section.
bool bench::run_cuda(const Options&, std::vector<Row>&, std::string* why) {
  *why = "this build has no CUDA backend (ENGINE_CUDA=OFF or no toolkit)";
  return false;
}
#endif
