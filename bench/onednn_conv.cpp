// oneDNN convolutions for bench_cpu_conv's yardstick columns (onednn_conv.h).
#include "bench/onednn_conv.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <unordered_map>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

namespace bench {

namespace {

using dnnl::memory;

// Every element of m set to 0.01 in its type: small normal numbers, so no denormal slows a pass.
void fill(memory& m) {
  const memory::desc d = m.get_desc();
  const size_t bytes = d.get_size();
  void* p = m.get_data_handle();
  if (d.data_type() == memory::data_type::bf16) {
    const uint16_t v = 0x3c24;  // 0.01 in BF16
    for (size_t i = 0; i < bytes / 2; ++i) std::memcpy(static_cast<uint8_t*>(p) + 2 * i, &v, 2);
  } else {
    const float v = 0.01f;
    for (size_t i = 0; i < bytes / 4; ++i) std::memcpy(static_cast<uint8_t*>(p) + 4 * i, &v, 4);
  }
}

template <class Prim>
double median_seconds(const Prim& prim, dnnl::stream& s, const std::unordered_map<int, memory>& args, int reps) {
  prim.execute(s, args);  // warm-up
  s.wait();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    prim.execute(s, args);
    s.wait();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

OnednnTiming onednn_conv(const kernels::ConvShape& sh, ConvPass pass, bool bf16, int reps) {
  using namespace dnnl;
  static engine eng(engine::kind::cpu, 0);
  stream s(eng);
  const memory::data_type dt = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  const memory::dims src_dims = {sh.n, sh.c, sh.h, sh.w}, wei_dims = {sh.k, sh.c, sh.r, sh.s},
                     dst_dims = {sh.n, sh.k, sh.out_h(), sh.out_w()}, bias_dims = {sh.k};
  const memory::dims strides = {sh.stride, sh.stride}, pad = {sh.pad, sh.pad};
  const memory::desc src_md(src_dims, dt, memory::format_tag::nhwc), dst_md(dst_dims, dt, memory::format_tag::nhwc);
  const memory::desc wei_any(wei_dims, dt, memory::format_tag::any);
  const memory::desc bias_md(bias_dims, memory::data_type::f32, memory::format_tag::x);

  const convolution_forward::desc fwd_d(prop_kind::forward_training, algorithm::convolution_direct, src_md, wei_any,
                                        bias_md, dst_md, strides, pad, pad);
  const convolution_forward::primitive_desc fwd_pd(fwd_d, eng);
  OnednnTiming r;
  auto mem = [&](const memory::desc& d) {
    memory m(d, eng);
    fill(m);
    return m;
  };
  switch (pass) {
    case ConvPass::Forward: {
      r.impl = fwd_pd.impl_info_str();
      const std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, mem(fwd_pd.src_desc())},
                                                     {DNNL_ARG_WEIGHTS, mem(fwd_pd.weights_desc())},
                                                     {DNNL_ARG_BIAS, mem(fwd_pd.bias_desc())},
                                                     {DNNL_ARG_DST, mem(fwd_pd.dst_desc())}};
      r.seconds = median_seconds(convolution_forward(fwd_pd), s, args, reps);
      break;
    }
    case ConvPass::BackwardData: {
      const convolution_backward_data::desc bd(algorithm::convolution_direct, src_md, wei_any, dst_md, strides, pad, pad);
      const convolution_backward_data::primitive_desc pd(bd, eng, fwd_pd);
      r.impl = pd.impl_info_str();
      const std::unordered_map<int, memory> args = {{DNNL_ARG_DIFF_DST, mem(pd.diff_dst_desc())},
                                                     {DNNL_ARG_WEIGHTS, mem(pd.weights_desc())},
                                                     {DNNL_ARG_DIFF_SRC, mem(pd.diff_src_desc())}};
      r.seconds = median_seconds(convolution_backward_data(pd), s, args, reps);
      break;
    }
    case ConvPass::BackwardFilter: {
      const convolution_backward_weights::desc bw(algorithm::convolution_direct, src_md, wei_any, bias_md, dst_md,
                                                  strides, pad, pad);
      const convolution_backward_weights::primitive_desc pd(bw, eng, fwd_pd);
      r.impl = pd.impl_info_str();
      const std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, mem(pd.src_desc())},
                                                     {DNNL_ARG_DIFF_DST, mem(pd.diff_dst_desc())},
                                                     {DNNL_ARG_DIFF_WEIGHTS, mem(pd.diff_weights_desc())},
                                                     {DNNL_ARG_DIFF_BIAS, mem(pd.diff_bias_desc())}};
      r.seconds = median_seconds(convolution_backward_weights(pd), s, args, reps);
      break;
    }
  }
  return r;
}

}  // namespace bench
