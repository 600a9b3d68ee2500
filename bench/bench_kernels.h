// Shared pieces of bench_kernels (bench_kernels.cpp: CPU section, report; bench_kernels_cuda.cu:
// GPU section): the options, one result row, and the median.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace bench {

struct Options {
  bool quick = false;   // fewer shapes and repetitions (a smoke run)
  int iters = 0;        // timed repetitions per measurement (0: the section's default)
  std::string only;     // run only groups whose name contains this ("" = all)
  bool wants(const std::string& group) const { return only.empty() || group.find(only) != std::string::npos; }
};

// One measurement: our kernel or op, and the yardstick it is compared with (a direct
// cuBLASLt/cuDNN call of the same problem, or a copy of the same number of bytes).
struct Row {
  std::string device;  // "cpu", "cuda"
  std::string group;   // "gemm", "conv", "memory"
  std::string name;    // "linear fwd", "relu fwd", ...
  std::string dtype;   // "fp32", "tf32", "fp16", "bf16", or "fp16->fp32" for casts
  std::string shape;
  std::string unit;    // "TFLOP/s", "GFLOP/s", "GB/s" (bytes read + written)
  double work = 0;     // FLOPs or bytes per call
  double ms = 0;       // median time per call
  std::string ref_name;
  double ref_ms = 0;   // median time of the yardstick (0: none)
  double rate() const { return ms > 0 ? work / (ms * 1e-3) / unit_scale() : 0; }
  double ref_rate() const { return ref_ms > 0 ? work / (ref_ms * 1e-3) / unit_scale() : 0; }
  double ratio() const { return ref_ms > 0 && ms > 0 ? ref_ms / ms : 0; }  // ours / yardstick, by rate
  double unit_scale() const { return unit == "TFLOP/s" ? 1e12 : 1e9; }
};

inline Row make_row(const std::string& device, const std::string& group, const std::string& name,
                    const std::string& dtype, const std::string& shape, const std::string& unit, double work) {
  Row r;
  r.device = device;
  r.group = group;
  r.name = name;
  r.dtype = dtype;
  r.shape = shape;
  r.unit = unit;
  r.work = work;
  return r;
}

// A memory-bound case: what one call moves (read + written) and the call itself (its
// argument picks the input set, so consecutive calls rotate through them).
struct MemCase {
  std::string name, dtype, shape;
  double bytes;
  std::function<void(int)> run;
};

inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// The GPU section (bench_kernels_cuda.cu); appends its rows. Returns false with the reason
// in *why when there is no device to run on.
bool run_cuda(const Options& opt, std::vector<Row>& rows, std::string* why);

}  // namespace bench
