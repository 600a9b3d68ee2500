// cuDNN convolutions: descriptors per call (host-only, microseconds), algorithm per
// (direction, shape, dtype, TF32) chosen once and cached, workspace from the allocator.
// Shapes no algorithm runs in NHWC take a fallback route (kernels/conv_rules.h's conv_paths):
// padded channels, NCHW copies, one convolution per group; the route is cached too.
#include "kernels/cuda/conv.h"

#include <cuda_runtime.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cuda/allocator.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/conv_rules.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/numeric.h"

#include <cudnn.h>

namespace kernels::cuda {

namespace {
std::atomic<int> g_search{static_cast<int>(ConvAlgoSearch::Heuristic)};
std::atomic<size_t> g_ws_limit{size_t(1) << 30};
}  // namespace

void set_conv_algo_search(ConvAlgoSearch mode) { g_search.store(static_cast<int>(mode)); }
ConvAlgoSearch conv_algo_search() { return static_cast<ConvAlgoSearch>(g_search.load()); }
void set_conv_workspace_limit(size_t bytes) { g_ws_limit.store(bytes); }
size_t conv_workspace_limit() { return g_ws_limit.load(); }

namespace {

enum class Dir : int { Fwd = 0, BwdData = 1, BwdFilter = 2 };
const char* dir_name(Dir d) {
  return d == Dir::Fwd ? "fwd" : d == Dir::BwdData ? "bwd-data" : "bwd-filter";
}
const char* dtype_name(cudnnDataType_t t) {
  return t == CUDNN_DATA_FLOAT ? "f32" : t == CUDNN_DATA_HALF ? "f16" : t == CUDNN_DATA_BFLOAT16 ? "bf16" : "?";
}
const char* math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH: return "default";
    case CUDNN_TENSOR_OP_MATH: return "tensor-op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor-op-conv";
    case CUDNN_FMA_MATH: return "fma";
  }
  return "?";
}

template <class T> cudnnDataType_t cudnn_type();
template <> cudnnDataType_t cudnn_type<float>() { return CUDNN_DATA_FLOAT; }
template <> cudnnDataType_t cudnn_type<half>() { return CUDNN_DATA_HALF; }
template <> cudnnDataType_t cudnn_type<bfloat16>() { return CUDNN_DATA_BFLOAT16; }

// Our tensors are NHWC; the NCHW route runs cuDNN on transposed copies.
enum class Layout : int { Nhwc = 0, Nchw = 1 };
const char* layout_name(Layout l) { return l == Layout::Nhwc ? "nhwc" : "nchw"; }

std::string dims_str(const ConvShape& d) {
  std::ostringstream os;
  os << "x[" << d.n << "," << d.h << "," << d.w << "," << d.c << "] w[" << d.k << "," << d.r << "," << d.s << ","
     << d.group_c() << "] stride " << d.stride << " pad " << d.pad;
  if (d.groups > 1) os << " groups " << d.groups;
  return os.str();
}

// ---- RAII descriptors ----------------------------------------------------------------------

// One owner for each kind of cuDNN descriptor: made by its Create, freed by its Destroy, never
// copied. Kind names the call in an error (CHECK_CUDNN could only quote "Create(&d)").
template <class Handle, cudnnStatus_t (*Create)(Handle*), cudnnStatus_t (*Destroy)(Handle), const char* Kind>
struct CudnnDescriptor {
  Handle d = nullptr;
  CudnnDescriptor() {
    const cudnnStatus_t status = Create(&d);
    if (status != CUDNN_STATUS_SUCCESS)
      throw_error(std::string("cudnnCreate") + Kind + "Descriptor failed: " + cudnnGetErrorString(status) +
                      " (status " + std::to_string(static_cast<int>(status)) + ")",
                  __FILE__, __LINE__);
  }
  ~CudnnDescriptor() { Destroy(d); }
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
};
constexpr char kTensorKind[] = "Tensor", kFilterKind[] = "Filter", kConvKind[] = "Convolution";
using TensorDesc =
    CudnnDescriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor, kTensorKind>;
using FilterDesc =
    CudnnDescriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor, kFilterKind>;
using ConvDesc = CudnnDescriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                                 cudnnDestroyConvolutionDescriptor, kConvKind>;

struct Descs {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  Layout layout;
  Descs(const ConvShape& d, cudnnDataType_t dt, Layout l) : layout(l) {
    const int64_t oh = d.out_h(), ow = d.out_w();
    for (int64_t v : {d.n, d.h, d.w, d.c, d.k, d.r, d.s, d.stride, d.pad, oh, ow, d.groups})
      ENGINE_CHECK(v <= INT_MAX, "conv2d: dimension " << v << " exceeds cuDNN's int range (" << dims_str(d) << ")");
    const auto i = [](int64_t v) { return static_cast<int>(v); };
    // Dimensions are given as (N, C, H, W) in either format; the format sets the strides.
    const cudnnTensorFormat_t f = l == Layout::Nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    CHECK_CUDNN(cudnnSetTensor4dDescriptor(x.d, f, dt, i(d.n), i(d.c), i(d.h), i(d.w)));
    CHECK_CUDNN(cudnnSetTensor4dDescriptor(y.d, f, dt, i(d.n), i(d.k), i(oh), i(ow)));
    // NHWC filter format = [K, R, S, C] in memory: our KRSC layout; NCHW = [K, C, R, S].
    // Grouped: the filter holds C / groups input channels; cuDNN splits C and K itself.
    CHECK_CUDNN(cudnnSetFilter4dDescriptor(w.d, dt, f, i(d.k), i(d.group_c()), i(d.r), i(d.s)));
    CHECK_CUDNN(cudnnSetConvolution2dDescriptor(conv.d, i(d.pad), i(d.pad), i(d.stride), i(d.stride), 1, 1,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    if (d.groups > 1) CHECK_CUDNN(cudnnSetConvolutionGroupCount(conv.d, i(d.groups)));
    int on = 0, oc = 0, ohh = 0, oww = 0;
    CHECK_CUDNN(cudnnGetConvolution2dForwardOutputDim(conv.d, x.d, w.d, &on, &oc, &ohh, &oww));
    ENGINE_CHECK(on == d.n && oc == d.k && ohh == oh && oww == ow,
                 "conv2d: cuDNN's output shape [" << on << "," << ohh << "," << oww << "," << oc
                                                  << "] differs from ours [" << d.n << "," << oh << "," << ow << ","
                                                  << d.k << "] for " << dims_str(d));
  }
};

// ---- algorithm candidates -------------------------------------------------------------------

struct Cand {
  int algo;
  cudnnStatus_t status;
  size_t memory;
  cudnnMathType_t math;
  cudnnDeterminism_t determinism;
  float time;
};

template <class Perf> void append(std::vector<Cand>& out, const Perf* p, int count) {
  for (int i = 0; i < count; ++i)
    out.push_back(
        Cand{static_cast<int>(p[i].algo), p[i].status, p[i].memory, p[i].mathType, p[i].determinism, p[i].time});
}

// How many algorithms cuDNN has for a direction (the size of a query's result array).
cudnnStatus_t algo_count(Dir dir, cudnnHandle_t h, int* max) {
  return dir == Dir::Fwd       ? cudnnGetConvolutionForwardAlgorithmMaxCount(h, max)
         : dir == Dir::BwdData ? cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, max)
                               : cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, max);
}

// Both queries report a refusal in *st (no throw): a shape cuDNN will not even rank still has
// the fallbacks ahead of it.
#define CONV_QUERY(call)                 \
  do {                                   \
    *st = (call);                        \
    if (*st != CUDNN_STATUS_SUCCESS) return out; \
  } while (0)

std::vector<Cand> heuristic_candidates(Dir dir, cudnnHandle_t h, const Descs& d, cudnnStatus_t* st) {
  std::vector<Cand> out;
  int max = 0, got = 0;
  CONV_QUERY(algo_count(dir, h, &max));
  switch (dir) {
    case Dir::Fwd: {
      std::vector<cudnnConvolutionFwdAlgoPerf_t> p(static_cast<size_t>(max));
      CONV_QUERY(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.d, d.w.d, d.conv.d, d.y.d, max, &got, p.data()));
      append(out, p.data(), got);
      break;
    }
    case Dir::BwdData: {
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> p(static_cast<size_t>(max));
      CONV_QUERY(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w.d, d.y.d, d.conv.d, d.x.d, max, &got, p.data()));
      append(out, p.data(), got);
      break;
    }
    case Dir::BwdFilter: {
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> p(static_cast<size_t>(max));
      CONV_QUERY(
          cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x.d, d.y.d, d.conv.d, d.w.d, max, &got, p.data()));
      append(out, p.data(), got);
      break;
    }
  }
  return out;
}

// in0/in1/out: fwd (x, w, y); bwd-data (gy, w, gx); bwd-filter (x, gy, gw).
std::vector<Cand> benchmark_candidates(Dir dir, cudnnHandle_t h, const Descs& d, const void* in0, const void* in1,
                                       void* out_buf, void* ws, size_t ws_bytes, cudnnStatus_t* st) {
  std::vector<Cand> out;
  int max = 0, got = 0;
  CONV_QUERY(algo_count(dir, h, &max));
  switch (dir) {
    case Dir::Fwd: {
      std::vector<cudnnConvolutionFwdAlgoPerf_t> p(static_cast<size_t>(max));
      CONV_QUERY(cudnnFindConvolutionForwardAlgorithmEx(h, d.x.d, in0, d.w.d, in1, d.conv.d, d.y.d, out_buf, max,
                                                        &got, p.data(), ws, ws_bytes));
      append(out, p.data(), got);
      break;
    }
    case Dir::BwdData: {
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> p(static_cast<size_t>(max));
      CONV_QUERY(cudnnFindConvolutionBackwardDataAlgorithmEx(h, d.w.d, in1, d.y.d, in0, d.conv.d, d.x.d, out_buf, max,
                                                             &got, p.data(), ws, ws_bytes));
      append(out, p.data(), got);
      break;
    }
    case Dir::BwdFilter: {
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> p(static_cast<size_t>(max));
      CONV_QUERY(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d.x.d, in0, d.y.d, in1, d.conv.d, d.w.d, out_buf,
                                                               max, &got, p.data(), ws, ws_bytes));
      append(out, p.data(), got);
      break;
    }
  }
  return out;
}
#undef CONV_QUERY


cudnnStatus_t workspace_size(Dir dir, cudnnHandle_t h, const Descs& d, int algo, size_t* bytes) {
  switch (dir) {
    case Dir::Fwd:
      return cudnnGetConvolutionForwardWorkspaceSize(h, d.x.d, d.w.d, d.conv.d, d.y.d,
                                                     static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
    case Dir::BwdData:
      return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w.d, d.y.d, d.conv.d, d.x.d,
                                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
    case Dir::BwdFilter:
      return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x.d, d.y.d, d.conv.d, d.w.d,
                                                            static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
  }
  return CUDNN_STATUS_BAD_PARAM;
}

cudnnStatus_t run(Dir dir, cudnnHandle_t h, const Descs& d, int algo, void* ws, size_t ws_bytes, const void* in0,
                  const void* in1, void* out) {
  const float one = 1.f, zero = 0.f;  // FLOAT scaling for FLOAT/HALF/BFLOAT16 data
  switch (dir) {
    case Dir::Fwd:
      return cudnnConvolutionForward(h, &one, d.x.d, in0, d.w.d, in1, d.conv.d,
                                     static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, ws_bytes, &zero, d.y.d, out);
    case Dir::BwdData:
      return cudnnConvolutionBackwardData(h, &one, d.w.d, in1, d.y.d, in0, d.conv.d,
                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws, ws_bytes, &zero,
                                          d.x.d, out);
    case Dir::BwdFilter:
      return cudnnConvolutionBackwardFilter(h, &one, d.x.d, in0, d.y.d, in1, d.conv.d,
                                            static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws, ws_bytes, &zero,
                                            d.w.d, out);
  }
  return CUDNN_STATUS_BAD_PARAM;
}

// ---- the algorithm cache --------------------------------------------------------------------

// align: the smallest alignment of the three buffers: an algorithm chosen for aligned
// buffers may refuse a view at an odd offset. layout: the descriptors' (NCHW choices are
// those of the NCHW route's copies; the route itself is cached under the NHWC key).
struct Key {
  int dir, dt, tf32, search, det, align, layout;
  int64_t n, h, w, c, k, r, s, stride, pad, groups;
  bool operator<(const Key& o) const {
    return std::tie(dir, dt, tf32, search, det, align, layout, n, h, w, c, k, r, s, stride, pad, groups) <
           std::tie(o.dir, o.dt, o.tf32, o.search, o.det, o.align, o.layout, o.n, o.h, o.w, o.c, o.k, o.r, o.s,
                    o.stride, o.pad, o.groups);
  }
};

// How a shape ended up running: its own algorithm (route Search, Measured or Relaxed), or a
// composite route (Padded, Nchw, PerGroup) whose inner convolution ran `algo` in `layout`.
struct Choice {
  ConvRoute route = ConvRoute::Search;
  int algo = -1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t ws = 0;
  Layout layout = Layout::Nhwc;
};

bool composite(ConvRoute r) { return r == ConvRoute::Padded || r == ConvRoute::Nchw || r == ConvRoute::PerGroup; }

std::mutex g_mu;  // the cache and the shared cuDNN handle: one caller at a time
std::map<Key, Choice> g_cache;
std::vector<std::string> g_report;
std::atomic<int> g_first_route{static_cast<int>(ConvRoute::Search)};

bool log_enabled() {
  static const bool on = [] {
    // The rule of kernels/cpu/cpu_isa.h for every switch: unset or empty is off, else 0 or 1.
    const char* v = kernels::cpu::env_switch("ENGINE_CUDNN_LOG");
    if (v && std::string(v) != "0" && std::string(v) != "1")
      kernels::cpu::exit_bad_env_switch(std::string("ENGINE_CUDNN_LOG must be 0 or 1; got '") + v + "'");
    return v && std::string(v) == "1";
  }();
  return on;
}

const char* route_name(ConvRoute r) {
  switch (r) {
    case ConvRoute::Search: return "search";
    case ConvRoute::Measured: return "measured search";
    case ConvRoute::Padded: return "channels padded to x8";
    case ConvRoute::Relaxed: return "relaxed rules";
    case ConvRoute::Nchw: return "NCHW copies";
    case ConvRoute::PerGroup: return "one convolution per group";
  }
  return "?";
}

bool uses_tensor_cores(cudnnMathType_t m) {
  return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

const char* rules_name(const ConvRules& r) {
  return r.strict_fp32 ? (r.deterministic ? "strict FP32, deterministic" : "strict FP32")
                       : (r.deterministic ? "deterministic" : "any algorithm");
}

// The math type a candidate runs with: FMA only under strict FP32 (CUDNN_DEFAULT_MATH would
// permit TF32 on Ampere and later), else the candidate's own.
cudnnMathType_t run_math(const Cand& c, const ConvRules& rules) { return rules.strict_fp32 ? CUDNN_FMA_MATH : c.math; }

// The descriptor's math type steers the search: FMA only for strict FP32, DEFAULT (permits
// TF32) for FP32 otherwise, Tensor Cores for FP16/BF16.
cudnnMathType_t query_math(cudnnDataType_t dt, const ConvRules& rules) {
  return dt == CUDNN_DATA_FLOAT ? (rules.strict_fp32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH) : CUDNN_TENSOR_OP_MATH;
}

// Tries candidates in order; on the first that runs within `rules`, caches it under `key`,
// sets *chosen and returns true. `tried` gets how many candidates each filter removed, then
// why the others failed.
bool try_candidates(Dir dir, cudnnHandle_t h, const Descs& d, const ConvShape& dims, cudnnDataType_t dt,
                    const ConvRules& rules, const ConvRules& asked, const std::vector<Cand>& cands, ConvRoute route,
                    const char* list, const Key& key, const void* in0, const void* in1, void* out,
                    std::ostringstream& tried, Choice* chosen) {
  const size_t limit = conv_workspace_limit();
  ConvFilterCounts counts;
  std::ostringstream why;
  for (const Cand& c : cands) {
    const ConvCandidate cc{c.algo, c.status == CUDNN_STATUS_SUCCESS, uses_tensor_cores(c.math),
                           c.determinism == CUDNN_DETERMINISTIC};
    const ConvVerdict verdict = judge_conv_candidate(cc, rules);
    counts.add(verdict);
    if (verdict != ConvVerdict::Usable) continue;
    const cudnnMathType_t math = run_math(c, rules);
    cudnnStatus_t st = cudnnSetConvolutionMathType(d.conv.d, math);
    size_t ws_bytes = 0;
    if (st == CUDNN_STATUS_SUCCESS) st = workspace_size(dir, h, d, c.algo, &ws_bytes);
    if (st == CUDNN_STATUS_SUCCESS && ws_bytes > limit) {
      ++counts.over_workspace;
      why << " algo " << c.algo << ": workspace " << ws_bytes << " B over the limit;";
      continue;
    }
    if (st == CUDNN_STATUS_SUCCESS) {
      Workspace ws(ws_bytes);
      st = run(dir, h, d, c.algo, ws.get(), ws.size(), in0, in1, out);
    }
    if (st != CUDNN_STATUS_SUCCESS) {
      ++counts.refused;
      why << " algo " << c.algo << " (" << math_name(math) << "): " << cudnnGetErrorString(st) << ";";
      continue;
    }
    *chosen = g_cache[key] = Choice{route, c.algo, math, ws_bytes, d.layout};
    // What it gives up, judged by the math it runs with: FP32 under anything but FMA may use TF32.
    ConvCandidate ran = cc;
    ran.tensor_cores = dt == CUDNN_DATA_FLOAT ? math != CUDNN_FMA_MATH : uses_tensor_cores(math);
    const std::string gave_up = conv_relaxation_note(ran, asked);
    std::ostringstream line;
    line << "conv " << dir_name(dir) << " " << dtype_name(dt) << (rules.strict_fp32 || dt != CUDNN_DATA_FLOAT ? "" : " tf32")
         << " " << dims_str(dims) << " -> algo " << c.algo << " (" << math_name(math) << "), workspace " << ws_bytes
         << " B, " << layout_name(d.layout) << ", " << route_name(route) << (rules.deterministic ? ", deterministic" : "");
    if (route == ConvRoute::Relaxed)
      line << ": nothing runs it under " << rules_name(asked) << "; this algorithm is "
           << (gave_up.empty() ? "within them after all" : gave_up);
    g_report.push_back(line.str());
    // A fallback is said once per shape (it is cached); the usual choice only on request.
    if (log_enabled() || route == ConvRoute::Measured || route == ConvRoute::Relaxed)
      std::fprintf(stderr, "engine: %s%s\n", line.str().c_str(),
                   route == ConvRoute::Measured ? " (no heuristic candidate ran)" : "");
    return true;
  }
  tried << " [" << list << ", " << rules_name(rules) << ": " << counts.str() << "]" << why.str();
  return false;
}

// cuDNN's candidate lists within one conv_op call, by (C, K, groups, layout, query math, list)
// (the other dimensions are the call's, in every route): rule sets differ only in how they
// filter a list, so each query (cudnnFind times every algorithm) runs once however many rule
// sets are tried.
struct CandidateLists {
  std::map<std::tuple<int64_t, int64_t, int64_t, int, int, int>, std::pair<std::vector<Cand>, cudnnStatus_t>> lists;
  template <class Query>
  const std::pair<std::vector<Cand>, cudnnStatus_t>& get(const ConvShape& dims, Layout layout, cudnnMathType_t math,
                                                         int list, Query query) {
    const auto key =
        std::make_tuple(dims.c, dims.k, dims.groups, static_cast<int>(layout), static_cast<int>(math), list);
    auto it = lists.find(key);
    if (it == lists.end()) {
      cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
      std::vector<Cand> cands = query(&st);
      it = lists.emplace(key, std::make_pair(std::move(cands), st)).first;
    }
    return it->second;
  }
};

// The rules the run asks for: strict FP32 unless TF32 is allowed, deterministic when set.
ConvRules asked_rules(cudnnDataType_t dt) {
  return ConvRules{dt == CUDNN_DATA_FLOAT && !allow_tf32(), deterministic()};
}

// The key holds the asked-for rules, so a choice made under relaxed ones is found again
// without a search.
Key make_key(Dir dir, const ConvShape& dims, cudnnDataType_t dt, Layout layout, const void* in0, const void* in1,
             const void* out) {
  const ConvRules asked = asked_rules(dt);
  return Key{static_cast<int>(dir), static_cast<int>(dt), dt == CUDNN_DATA_FLOAT && !asked.strict_fp32,
             static_cast<int>(conv_algo_search()), asked.deterministic,
             static_cast<int>(std::min({detail::pointer_alignment(in0), detail::pointer_alignment(in1),
                                        detail::pointer_alignment(out)})),
             static_cast<int>(layout), dims.n, dims.h, dims.w, dims.c, dims.k, dims.r, dims.s, dims.stride, dims.pad, dims.groups};
}

// Runs the convolution with its own descriptors in `layout` (the buffers' layout): the cached
// algorithm, else the configured search and then (after heuristics) the measured one, among
// the candidates `rules` allow (route Relaxed when they are looser than asked). `first`
// Measured (a test hook) skips the heuristics. False when no algorithm runs; else *ran says
// which did.
bool conv_unpadded(Dir dir, const ConvShape& dims, cudnnDataType_t dt, const ConvRules& rules, Layout layout,
                   const void* in0, const void* in1, void* out, ConvRoute first, CandidateLists& memo,
                   std::ostringstream& tried, Choice* ran) {
  cudnnHandle_t h = context().cudnn();
  const ConvRules asked = asked_rules(dt);
  const ConvRoute found = rules == asked ? ConvRoute::Search : ConvRoute::Relaxed;
  const ConvAlgoSearch search = conv_algo_search();
  Descs d(dims, dt, layout);
  const Key key = make_key(dir, dims, dt, layout, in0, in1, out);
  auto it = g_cache.find(key);
  if (it != g_cache.end() && !composite(it->second.route)) {
    CHECK_CUDNN(cudnnSetConvolutionMathType(d.conv.d, it->second.math));
    Workspace ws(it->second.ws);
    if (run(dir, h, d, it->second.algo, ws.get(), ws.size(), in0, in1, out) == CUDNN_STATUS_SUCCESS) {
      *ran = it->second;
      return true;
    }
    g_cache.erase(it);  // refused this time (nothing ran): choose again below
  }
  const cudnnMathType_t qmath = query_math(dt, rules);
  if (first != ConvRoute::Measured && search == ConvAlgoSearch::Heuristic) {
    CHECK_CUDNN(cudnnSetConvolutionMathType(d.conv.d, qmath));
    const auto& [cands, st] =
        memo.get(dims, layout, qmath, 0, [&](cudnnStatus_t* s) { return heuristic_candidates(dir, h, d, s); });
    if (try_candidates(dir, h, d, dims, dt, rules, asked, cands, found, "heuristics", key, in0, in1, out, tried, ran))
      return true;
    if (st != CUDNN_STATUS_SUCCESS) tried << " (heuristics query: " << cudnnGetErrorString(st) << ")";
  }
  // The measured search: cudnnFind runs every algorithm on these buffers (it writes `out`,
  // which the convolution overwrites anyway) with the largest workspace, under the limit, that
  // any algorithm asks for this shape (asked of each algorithm, not only the heuristics' picks).
  CHECK_CUDNN(cudnnSetConvolutionMathType(d.conv.d, qmath));
  const auto& [measured, st] = memo.get(dims, layout, qmath, 1, [&](cudnnStatus_t* s) {
    size_t ws_bytes = 0;
    int algos = 0;
    if (algo_count(dir, h, &algos) != CUDNN_STATUS_SUCCESS) algos = 0;
    for (int algo = 0; algo < algos; ++algo) {
      size_t need = 0;
      if (workspace_size(dir, h, d, algo, &need) == CUDNN_STATUS_SUCCESS && need <= conv_workspace_limit())
        ws_bytes = std::max(ws_bytes, need);
    }
    Workspace ws(ws_bytes);
    return benchmark_candidates(dir, h, d, in0, in1, out, ws.get(), ws.size(), s);
  });
  const ConvRoute route = found == ConvRoute::Relaxed           ? ConvRoute::Relaxed
                          : search == ConvAlgoSearch::Benchmark ? ConvRoute::Search
                                                                : ConvRoute::Measured;
  if (try_candidates(dir, h, d, dims, dt, rules, asked, measured, route, "measured", key, in0, in1, out, tried, ran))
    return true;
  if (st != CUDNN_STATUS_SUCCESS) tried << " (measured query: " << cudnnGetErrorString(st) << ")";
  return false;
}

int64_t round_up8(int64_t v) { return (v + 7) / 8 * 8; }

// [rows, from] -> [rows, to] rows of `elem` bytes per channel: zero-filled when to > from
// (padding), the first `to` channels when to < from (slicing back). Two stream-ordered calls.
void copy_channels(void* dst, int64_t to, const void* src, int64_t from, int64_t rows, size_t elem,
                   cudaStream_t stream) {
  if (to > from) CHECK_CUDA(cudaMemsetAsync(dst, 0, static_cast<size_t>(rows * to) * elem, stream));
  const size_t row_bytes = static_cast<size_t>(std::min(to, from)) * elem;
  CHECK_CUDA(cudaMemcpy2DAsync(dst, static_cast<size_t>(to) * elem, src, static_cast<size_t>(from) * elem, row_bytes,
                               static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, stream));
}

// For shapes no algorithm takes in NHWC as they are (3-channel FP16/BF16 inputs, odd channel
// counts): input and output channels zero-padded to multiples of 8, the padded problem solved,
// the result sliced back. Zero channels add nothing to any sum, so the result is the same.
bool conv_padded(Dir dir, const ConvShape& dims, cudnnDataType_t dt, const ConvRules& rules, size_t elem,
                 const void* in0, const void* in1, void* out, cudaStream_t stream, CandidateLists& memo,
                 std::ostringstream& tried, Choice* ran) {
  if (dims.groups > 1) return false;  // padding would move channels across groups
  ConvShape p = dims;
  p.c = round_up8(dims.c);
  p.k = round_up8(dims.k);
  if (p.c == dims.c && p.k == dims.k) return false;  // nothing to pad
  const int64_t x_rows = dims.n * dims.h * dims.w, y_rows = dims.n * dims.out_h() * dims.out_w();
  const int64_t w_rows_c = dims.k * dims.r * dims.s;  // filter rows over C
  const size_t e = elem;
  const bool pad_c = p.c != dims.c, pad_k = p.k != dims.k;  // only the padded sides are copied
  Workspace xp(pad_c ? static_cast<size_t>(x_rows * p.c) * e : 0), yp(pad_k ? static_cast<size_t>(y_rows * p.k) * e : 0),
      wp(static_cast<size_t>(p.k * dims.r * dims.s * p.c) * e);
  // Activations in: the caller's buffer when its channels need no padding, else a padded copy.
  auto x_in = [&](const void* x) -> const void* {
    if (!pad_c) return x;
    copy_channels(xp.get(), p.c, x, dims.c, x_rows, e, stream);
    return xp.get();
  };
  auto y_in = [&](const void* y) -> const void* {
    if (!pad_k) return y;
    copy_channels(yp.get(), p.k, y, dims.k, y_rows, e, stream);
    return yp.get();
  };
  // Filters [K,R,S,C] -> [Kp,R,S,Cp]: pad C per row; the extra K rows stay zero.
  auto pad_filters = [&](const void* w) {
    CHECK_CUDA(cudaMemsetAsync(wp.get(), 0, wp.size(), stream));
    CHECK_CUDA(cudaMemcpy2DAsync(wp.get(), static_cast<size_t>(p.c) * e, w, static_cast<size_t>(dims.c) * e,
                                 static_cast<size_t>(dims.c) * e, static_cast<size_t>(w_rows_c),
                                 cudaMemcpyDeviceToDevice, stream));
  };
  std::ostringstream inner;
  bool ok = false;
  switch (dir) {
    case Dir::Fwd: {  // in0 = x, in1 = w, out = y
      const void* x = x_in(in0);
      pad_filters(in1);
      void* y = pad_k ? yp.get() : out;
      ok = conv_unpadded(dir, p, dt, rules, Layout::Nhwc, x, wp.get(), y, ConvRoute::Search, memo, inner, ran);
      if (ok && pad_k) copy_channels(out, dims.k, yp.get(), p.k, y_rows, e, stream);
      break;
    }
    case Dir::BwdData: {  // in0 = gy, in1 = w, out = gx
      const void* gy = y_in(in0);
      pad_filters(in1);
      void* gx = pad_c ? xp.get() : out;
      ok = conv_unpadded(dir, p, dt, rules, Layout::Nhwc, gy, wp.get(), gx, ConvRoute::Search, memo, inner, ran);
      if (ok && pad_c) copy_channels(out, dims.c, xp.get(), p.c, x_rows, e, stream);
      break;
    }
    case Dir::BwdFilter: {  // in0 = x, in1 = gy, out = gw
      const void* x = x_in(in0);
      const void* gy = y_in(in1);
      ok = conv_unpadded(dir, p, dt, rules, Layout::Nhwc, x, gy, wp.get(), ConvRoute::Search, memo, inner, ran);
      // [Kp,R,S,Cp] -> [K,R,S,C]: the first K filters' rows, each sliced to C channels.
      if (ok) copy_channels(out, dims.c, wp.get(), p.c, w_rows_c, e, stream);
      break;
    }
  }
  if (!ok) tried << " padded to C " << p.c << ", K " << p.k << ":" << inner.str();
  return ok;
}

// ---- NCHW copies ------------------------------------------------------------------------------

// dst = t applied to src (kernels/conv_rules.h), as raw bits: one kernel serves every dtype.
// Writes are coalesced, reads strided: a fallback's copy, not a hot path.
template <class U>
__global__ void __launch_bounds__(detail::kBlock) transpose_kernel(int64_t n, ConvTranspose t, const U* src, U* dst) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = src[t.source(i)];
}

void transpose(void* dst, const void* src, const ConvTranspose& t, size_t elem, cudaStream_t stream) {
  ENGINE_CHECK(elem == 2 || elem == 4, "conv2d: NCHW copies of " << elem << "-byte elements");
  const int64_t n = t.size();
  if (elem == 2)
    transpose_kernel<uint16_t><<<detail::grid_for(n), detail::kBlock, 0, stream>>>(
        n, t, static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst));
  else
    transpose_kernel<uint32_t><<<detail::grid_for(n), detail::kBlock, 0, stream>>>(
        n, t, static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst));
  CHECK_LAUNCH();
}

// For shapes no algorithm takes in NHWC (strict FP32 where NHWC offers only TF32 engines; some
// grouped ones): the same convolution with NCHW descriptors on transposed copies of the
// inputs (kernels/conv_rules.h's conv_nchw_copies), the output transposed back.
bool conv_nchw(Dir dir, const ConvShape& dims, cudnnDataType_t dt, const ConvRules& rules, size_t elem,
               const void* in0, const void* in1, void* out, cudaStream_t stream, CandidateLists& memo,
               std::ostringstream& tried, Choice* ran) {
  const ConvNchwCopies t = conv_nchw_copies(dims);
  Workspace xt(static_cast<size_t>(t.x.size()) * elem), wt(static_cast<size_t>(t.w.size()) * elem),
      yt(static_cast<size_t>(t.y.size()) * elem);
  std::ostringstream inner;
  bool ok = false;
  switch (dir) {
    case Dir::Fwd:  // in0 = x, in1 = w, out = y
      transpose(xt.get(), in0, t.x, elem, stream);
      transpose(wt.get(), in1, t.w, elem, stream);
      ok = conv_unpadded(dir, dims, dt, rules, Layout::Nchw, xt.get(), wt.get(), yt.get(), ConvRoute::Search, memo,
                         inner, ran);
      if (ok) transpose(out, yt.get(), t.y.back(), elem, stream);
      break;
    case Dir::BwdData:  // in0 = gy, in1 = w, out = gx
      transpose(yt.get(), in0, t.y, elem, stream);
      transpose(wt.get(), in1, t.w, elem, stream);
      ok = conv_unpadded(dir, dims, dt, rules, Layout::Nchw, yt.get(), wt.get(), xt.get(), ConvRoute::Search, memo,
                         inner, ran);
      if (ok) transpose(out, xt.get(), t.x.back(), elem, stream);
      break;
    case Dir::BwdFilter:  // in0 = x, in1 = gy, out = gw
      transpose(xt.get(), in0, t.x, elem, stream);
      transpose(yt.get(), in1, t.y, elem, stream);
      ok = conv_unpadded(dir, dims, dt, rules, Layout::Nchw, xt.get(), yt.get(), wt.get(), ConvRoute::Search, memo,
                         inner, ran);
      if (ok) transpose(out, wt.get(), t.w.back(), elem, stream);
      break;
  }
  if (!ok) tried << " in NCHW:" << inner.str();
  return ok;
}

// ---- one convolution per group ----------------------------------------------------------------

bool conv_at(Dir dir, const ConvShape& dims, cudnnDataType_t dt, const ConvRules& rules, size_t elem,
             const void* in0, const void* in1, void* out, cudaStream_t stream, ConvRoute first, bool last_resort,
             CandidateLists& memo, std::ostringstream& tried, Choice* ran);

// Packed copy of one group's slice of `full` (kernels/conv_rules.h's conv_group_slices), and back.
void gather(void* packed, const void* full, const ConvSlice& s, size_t elem, cudaStream_t stream) {
  CHECK_CUDA(cudaMemcpy2DAsync(packed, static_cast<size_t>(s.width) * elem,
                               static_cast<const char*>(full) + static_cast<size_t>(s.offset) * elem,
                               static_cast<size_t>(s.pitch) * elem, static_cast<size_t>(s.width) * elem,
                               static_cast<size_t>(s.rows), cudaMemcpyDeviceToDevice, stream));
}
void scatter(void* full, const void* packed, const ConvSlice& s, size_t elem, cudaStream_t stream) {
  CHECK_CUDA(cudaMemcpy2DAsync(static_cast<char*>(full) + static_cast<size_t>(s.offset) * elem,
                               static_cast<size_t>(s.pitch) * elem, packed, static_cast<size_t>(s.width) * elem,
                               static_cast<size_t>(s.width) * elem, static_cast<size_t>(s.rows),
                               cudaMemcpyDeviceToDevice, stream));
}

// The last resort for a grouped shape nothing else runs: each group's channels copied into
// packed buffers, one ungrouped convolution (through the same routes, under the same rules),
// the result copied into the group's part of the output. Slow: one convolution per group
// (depthwise: C of them) and copies around each; the groups reuse one set of buffers in
// stream order, and the sub-shape's choice, made for group 0, is cached for the rest.
bool conv_per_group(Dir dir, const ConvShape& dims, cudnnDataType_t dt, const ConvRules& rules, size_t elem,
                    const void* in0, const void* in1, void* out, cudaStream_t stream, CandidateLists& memo,
                    std::ostringstream& tried, Choice* ran) {
  if (dims.groups == 1) return false;
  const ConvGroupSlices g0 = conv_group_slices(dims, 0);  // every group's slices have its sizes
  Workspace xs(static_cast<size_t>(g0.x.size()) * elem), ws(static_cast<size_t>(g0.w.size()) * elem),
      ys(static_cast<size_t>(g0.y.size()) * elem);
  std::ostringstream inner;
  for (int64_t g = 0; g < dims.groups; ++g) {
    const ConvGroupSlices s = conv_group_slices(dims, g);
    ENGINE_CHECK(s.x.fits(dims.n * dims.h * dims.w * dims.c) && s.w.fits(dims.k * dims.patch()) &&
                     s.y.fits(dims.n * dims.out_h() * dims.out_w() * dims.k),
                 "conv2d: group " << g << "'s slices fall outside its tensors (" << dims_str(dims) << ")");
    bool ok = false;
    switch (dir) {
      case Dir::Fwd:  // in0 = x, in1 = w, out = y
        gather(xs.get(), in0, s.x, elem, stream);
        gather(ws.get(), in1, s.w, elem, stream);
        ok = conv_at(dir, s.sub, dt, rules, elem, xs.get(), ws.get(), ys.get(), stream, ConvRoute::Search, false, memo,
                     inner, ran);
        if (ok) scatter(out, ys.get(), s.y, elem, stream);
        break;
      case Dir::BwdData:  // in0 = gy, in1 = w, out = gx
        gather(ys.get(), in0, s.y, elem, stream);
        gather(ws.get(), in1, s.w, elem, stream);
        ok = conv_at(dir, s.sub, dt, rules, elem, ys.get(), ws.get(), xs.get(), stream, ConvRoute::Search, false, memo,
                     inner, ran);
        if (ok) scatter(out, xs.get(), s.x, elem, stream);
        break;
      case Dir::BwdFilter:  // in0 = x, in1 = gy, out = gw
        gather(xs.get(), in0, s.x, elem, stream);
        gather(ys.get(), in1, s.y, elem, stream);
        ok = conv_at(dir, s.sub, dt, rules, elem, xs.get(), ys.get(), ws.get(), stream, ConvRoute::Search, false, memo,
                     inner, ran);
        if (ok) scatter(out, ws.get(), s.w, elem, stream);
        break;
    }
    if (!ok) {
      tried << " one group at a time (group " << g << " of " << dims.groups << ", " << dims_str(s.sub)
            << "):" << inner.str();
      return false;
    }
  }
  return true;
}

// ---- the routes -------------------------------------------------------------------------------

ConvRoute route_of(ConvPath p) {
  switch (p) {
    case ConvPath::Nhwc: return ConvRoute::Search;
    case ConvPath::NhwcPadded: return ConvRoute::Padded;
    case ConvPath::Nchw: return ConvRoute::Nchw;
    case ConvPath::PerGroup: return ConvRoute::PerGroup;
  }
  return ConvRoute::Search;
}

const char* route_reason(ConvRoute r) {
  switch (r) {
    case ConvRoute::Padded: return "no algorithm runs this shape; running it with channels zero-padded to multiples of 8";
    case ConvRoute::Nchw: return "no algorithm runs this shape in NHWC; running it on NCHW copies of its tensors";
    case ConvRoute::PerGroup:
      return "no algorithm runs this grouped shape; running it as one ungrouped convolution per group (slow)";
    default: return "";
  }
}

// One rule set: the routes of conv_paths(dims, last_resort) in order, from `first` when this
// shape has it (a test hook: Padded, Nchw or PerGroup start there, Measured skips the
// heuristics), or only the composite route cached for the shape; if that one fails this time
// it is forgotten and every route tried. A composite route that runs is cached under the
// shape's NHWC key and said once on stderr. *ran: the convolution that ran at the bottom.
bool conv_at(Dir dir, const ConvShape& dims, cudnnDataType_t dt, const ConvRules& rules, size_t elem,
             const void* in0, const void* in1, void* out, cudaStream_t stream, ConvRoute first, bool last_resort,
             CandidateLists& memo, std::ostringstream& tried, Choice* ran) {
  const Key key = make_key(dir, dims, dt, Layout::Nhwc, in0, in1, out);
  const auto it = g_cache.find(key);
  const bool known = it != g_cache.end() && composite(it->second.route);
  const ConvRoute known_route = known ? it->second.route : ConvRoute::Search;
  const std::vector<ConvPath> paths = conv_paths(dims, last_resort);
  bool known_failed = false;
  size_t start = 0;
  for (size_t i = 0; i < paths.size(); ++i)
    if (composite(first) && route_of(paths[i]) == first) start = i;
  for (size_t i = start; i < paths.size(); ++i) {
    const ConvRoute route = route_of(paths[i]);
    if (known && route != known_route) continue;
    bool ok = false;
    switch (paths[i]) {
      case ConvPath::Nhwc:
        ok = conv_unpadded(dir, dims, dt, rules, Layout::Nhwc, in0, in1, out,
                           first == ConvRoute::Measured ? ConvRoute::Measured : ConvRoute::Search, memo, tried, ran);
        break;
      case ConvPath::NhwcPadded:
        ok = conv_padded(dir, dims, dt, rules, elem, in0, in1, out, stream, memo, tried, ran);
        break;
      case ConvPath::Nchw: ok = conv_nchw(dir, dims, dt, rules, elem, in0, in1, out, stream, memo, tried, ran); break;
      case ConvPath::PerGroup:
        ok = conv_per_group(dir, dims, dt, rules, elem, in0, in1, out, stream, memo, tried, ran);
        break;
    }
    if (!ok) {
      known_failed = known_failed || known;
      continue;
    }
    if (composite(route) && !known) {
      g_cache[key] = Choice{route, ran->algo, ran->math, 0, ran->layout};
      const ConvRules asked = asked_rules(dt);
      std::ostringstream line;
      line << "conv " << dir_name(dir) << " " << dtype_name(dt)
           << (rules.strict_fp32 || dt != CUDNN_DATA_FLOAT ? "" : " tf32") << " " << dims_str(dims) << " -> algo "
           << ran->algo << " (" << math_name(ran->math) << "), " << layout_name(ran->layout) << ", "
           << route_name(route) << (rules.deterministic ? ", deterministic" : "") << ": " << route_reason(route);
      if (!(rules == asked)) line << " (under " << rules_name(rules) << ", relaxed from " << rules_name(asked) << ")";
      g_report.push_back(line.str());
      std::fprintf(stderr, "engine: %s\n", line.str().c_str());  // said once per shape
    }
    return true;
  }
  if (known_failed) {  // the cached route refused this time (nothing ran): choose again
    g_cache.erase(key);
    return conv_at(dir, dims, dt, rules, elem, in0, in1, out, stream, first, last_resort, memo, tried, ran);
  }
  return false;
}

// The rule sets of conv_relaxations in order (those asked for first), each through conv_at's
// routes; one convolution per group only under the last (loosest) rules, the last resort.
// Only when all fail does the call throw, with what each candidate list held.
void conv_op(Dir dir, const ConvShape& dims, cudnnDataType_t dt, size_t elem, const void* in0, const void* in1,
             void* out, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(g_mu);
  CHECK_CUDNN(cudnnSetStream(context().cudnn(), stream));
  const ConvRoute first = static_cast<ConvRoute>(g_first_route.load());
  const std::vector<ConvRules> levels = conv_relaxations(asked_rules(dt));
  CandidateLists memo;
  std::ostringstream tried;
  for (size_t level = 0; level < levels.size(); ++level) {
    // Test hook: as if nothing ran within the rules (where there are rules to relax).
    if (level == 0 && first == ConvRoute::Relaxed && levels.size() > 1) continue;
    const ConvRoute start = level == 0 && first != ConvRoute::Relaxed ? first : ConvRoute::Search;
    Choice ran;
    const bool last_resort = level + 1 == levels.size() || first == ConvRoute::PerGroup;  // (or the test hook's)
    if (conv_at(dir, dims, dt, levels[level], elem, in0, in1, out, stream, start, last_resort, memo, tried, &ran))
      return;
  }
  ENGINE_FAIL("conv2d " << dir_name(dir) << " (" << dtype_name(dt) << ", " << dims_str(dims)
                        << "): cuDNN offered no algorithm that runs;" << tried.str());
}

bool empty_input(const ConvShape& d) { return d.n == 0; }

void check_dims(const ConvShape& d, const char* op) {
  ENGINE_CHECK(d.n >= 0 && d.h > 0 && d.w > 0 && d.c > 0 && d.k > 0 && d.r > 0 && d.s > 0 && d.stride > 0 &&
                   d.pad >= 0 && d.out_h() > 0 && d.out_w() > 0 && d.groups >= 1 && d.c % d.groups == 0 &&
                   d.k % d.groups == 0,
               op << ": bad shape " << dims_str(d));
}

}  // namespace

template <class T>
void conv2d_forward(const ConvShape& d, const T* x, const T* w, const T* bias, T* y, cudaStream_t stream) {
  check_dims(d, "conv2d_forward");
  if (empty_input(d)) return;
  conv_op(Dir::Fwd, d, cudnn_type<T>(), sizeof(T), x, w, y, stream);
  if (bias) add_row_bias<T>(d.n * d.out_h() * d.out_w(), d.k, bias, y, stream);
}

template <class T> void conv2d_backward_data(const ConvShape& d, const T* gy, const T* w, T* gx, cudaStream_t stream) {
  check_dims(d, "conv2d_backward_data");
  if (empty_input(d)) return;
  conv_op(Dir::BwdData, d, cudnn_type<T>(), sizeof(T), gy, w, gx, stream);
}

template <class T>
void conv2d_backward_filter(const ConvShape& d, const T* x, const T* gy, T* gw, T* gbias, cudaStream_t stream) {
  check_dims(d, "conv2d_backward_filter");
  if (empty_input(d)) {  // an empty batch contributes nothing: zero gradients, as on the CPU
    fill<T>(gw, 0.0, d.k * d.r * d.s * d.group_c(), stream);
    if (gbias) fill<T>(gbias, 0.0, d.k, stream);
    return;
  }
  conv_op(Dir::BwdFilter, d, cudnn_type<T>(), sizeof(T), x, gy, gw, stream);
  if (gbias) column_sum<T>(d.n * d.out_h() * d.out_w(), d.k, gy, gbias, stream);
}

void set_conv_first_route_for_test(ConvRoute route) { g_first_route.store(static_cast<int>(route)); }

size_t conv_algo_cache_size() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_cache.size();
}
void clear_conv_algo_cache() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_cache.clear();
  g_report.clear();
}
std::string conv_algo_report() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::string s;
  for (const auto& line : g_report) s += line + "\n";
  return s;
}
std::vector<std::string> conv_report_lines(const ConvShape& d) {
  const std::string shape = " " + dims_str(d) + " -> ";  // the dims end where the choice starts
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<std::string> out;
  for (const auto& line : g_report)
    if (line.find(shape) != std::string::npos) out.push_back(line);
  return out;
}


#define ENGINE_CUDA_CONV(T)                                                                        \
  template void conv2d_forward<T>(const ConvShape&, const T*, const T*, const T*, T*, cudaStream_t); \
  template void conv2d_backward_data<T>(const ConvShape&, const T*, const T*, T*, cudaStream_t);     \
  template void conv2d_backward_filter<T>(const ConvShape&, const T*, const T*, T*, T*, cudaStream_t);
ENGINE_CUDA_CONV(float)
ENGINE_CUDA_CONV(kernels::half)
ENGINE_CUDA_CONV(kernels::bfloat16)
#undef ENGINE_CUDA_CONV

}  // namespace kernels::cuda
