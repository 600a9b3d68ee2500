// CPU GEMM in the BLIS style: op(A) and op(B) are packed (and widened to the accumulator type)
// into contiguous panels, a register-blocked micro-kernel does the FMAs, OpenMP splits C.
#include "kernels/cpu/simd.h"  // first: it brings in immintrin.h with a warning silenced

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>

#include "kernels/cpu/gemm.h"

#include "kernels/cpu/bf16_tiles.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace kernels {
namespace cpu {
namespace {

using simd::VecD;
using simd::VecF;
using simd::kNarrowMR;
using simd::kWideMR;
using simd::kWideNV;

template <class Acc>
using VecFor = typename std::conditional<std::is_same<Acc, double>::value, VecD, VecF>::type;

// ---- Cache blocking -----------------------------------------------------------------------
// KC: depth of one pass; the KC x NR micro-panel of B stays in L1 (48 KiB here) or close,
// while A micro-panels stream from L2. kAPanelBytes: the MC x KC block of A, kept in L2
// (half of a 1 MiB L2). kBPanelBytes: the K x NC block of B shared by all threads, in L3.
// KC 256/384/512 and A blocks of 384/512/768 KiB measured within noise of each other.
constexpr int64_t kKC = 384;
constexpr int64_t kAPanelBytes = 512 * 1024;
constexpr int64_t kBPanelBytes = 4 * 1024 * 1024;
// Below this many multiply-adds (~20 us on one core) a thread team costs more than it saves.
// On a loaded machine (more busy threads than cores) libgomp's default spin-waiting makes a
// barrier wait a whole time slice for a descheduled team member: 5-20x slower calls were
// measured, fixed by OMP_WAIT_POLICY=passive. Hence few sync points (see the driver).
[[maybe_unused]] constexpr int64_t kParallelMinMacs = int64_t(1) << 20;
// Bound on the float C scratch a half/bf16 work item keeps across K passes (per thread).
constexpr int64_t kMaxScratchCols = 1024;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Grow-only 64-byte aligned buffer, one per calling thread: no allocation once warmed up.
// Everything a call needs (packed B, each team thread's A block and float C tiles) is
// carved from it before the parallel region, so a failed allocation throws normally.
class Scratch {
 public:
  ~Scratch() { std::free(p_); }
  void* get(int64_t bytes) {
    const size_t n = static_cast<size_t>(round_up(std::max<int64_t>(bytes, 64), 64));
    if (n > size_) {
      std::free(p_);
      p_ = std::aligned_alloc(64, n);
      if (!p_) {
        size_ = 0;
        throw std::bad_alloc();
      }
      size_ = n;
    }
    return p_;
  }

 private:
  void* p_ = nullptr;
  size_t size_ = 0;
};

Scratch& call_scratch() {
  thread_local Scratch s;  // shared by all element types
  return s;
}

// ---- Micro-kernel ---------------------------------------------------------------------------
// c[MR x NR] (row stride ldc) = alpha * a_panel * b_panel + beta * c; beta == 0 never reads c.
// a: kc steps of MR values; b: kc steps of NR = NV*W values, 64-byte aligned.
template <class V, int MR, int NV>
inline void micro_kernel(int64_t kc, const typename V::T* __restrict a,
                         const typename V::T* __restrict b, typename V::T* __restrict c,
                         int64_t ldc, typename V::T alpha, typename V::T beta) {
  using R = typename V::R;
  constexpr int W = V::W;
  R acc[MR][NV];
#pragma GCC unroll 32
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[i][j] = V::zero();
  for (int64_t k = 0; k < kc; ++k) {
    R bv[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) bv[j] = V::load(b + j * W);
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i) {
      const R av = V::set1(a[i]);
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[i][j] = V::fma(av, bv[j], acc[i][j]);
    }
    a += MR;
    b += NV * W;
  }
  const R va = V::set1(alpha);
  if (beta == 0) {
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) V::storeu(c + i * ldc + j * W, V::mul(va, acc[i][j]));
  } else if (beta == 1) {
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) {
        typename V::T* p = c + i * ldc + j * W;
        V::storeu(p, V::fma(va, acc[i][j], V::loadu(p)));
      }
  } else {
    const R vb = V::set1(beta);
#pragma GCC unroll 32
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) {
        typename V::T* p = c + i * ldc + j * W;
        V::storeu(p, V::fma(va, acc[i][j], V::mul(vb, V::loadu(p))));
      }
  }
}

// ---- Conversions ---------------------------------------------------------------------------
// Contiguous runs T <-> accumulator, used by packing and by the final store of half/bf16.
// With F16C the half ones run in hardware, which was checked bit-identical to numeric.h's
// conversions over all 2^16 halves and all 2^32 floats (round to nearest even, NaNs too).
template <class T, class Acc>
inline void widen(const T* s, Acc* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = static_cast<Acc>(s[i]);
}
template <class T, class Acc>
inline void narrow(const Acc* s, T* d, int64_t n) {
  for (int64_t i = 0; i < n; ++i) d[i] = from_acc<T>(s[i]);
}
#if defined(__F16C__)
template <>
inline void widen<half, float>(const half* s, float* d, int64_t n) {
  const int64_t n8 = n / 8 * 8;
  for (int64_t i = 0; i < n8; i += 8)
    _mm256_storeu_ps(d + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (int64_t i = n8; i < n; ++i) d[i] = _cvtsh_ss(s[i].bits);
}
template <>
inline void narrow<half, float>(const float* s, half* d, int64_t n) {
  constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const int64_t n8 = n / 8 * 8;
  for (int64_t i = 0; i < n8; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), kRne));
  for (int64_t i = n8; i < n; ++i) d[i].bits = _cvtss_sh(s[i], kRne);
}
#endif

// ---- Packing ------------------------------------------------------------------------------
// Both operands end up as panels of P lanes per k step: d[k*P + r], r < P, lanes past the
// valid count zero so the micro-kernel always runs full tiles. Two source shapes occur:
// lanes contiguous in memory (copy_panel) or k contiguous (transpose_panel).

// One k step of a panel: d[r] = s[r] for r < n, zero up to P. A full step has a fixed
// trip count, so it compiles to a few vector moves.
template <int P, class T, class Acc>
inline void copy_step(const T* s, int64_t n, Acc* d) {
  if (n == P) {
    if constexpr (std::is_same<T, Acc>::value) {
      std::memcpy(d, s, P * sizeof(T));
    } else {
      widen(s, d, P);
    }
  } else {
    widen(s, d, n);
    for (int64_t r = n; r < P; ++r) d[r] = 0;
  }
}

// d[k*P + r] = s[k*ld + r] for r < n, k < len.
template <int P, class T, class Acc>
void copy_panel(const T* s, int64_t ld, int64_t n, int64_t len, Acc* d) {
  for (int64_t k = 0; k < len; ++k) copy_step<P>(s + k * ld, n, d + k * P);
}

// d[k*P + r] = s[r*ld + k] for r < n, k < len: a transpose, 16 k at a time so every
// source row is read a cache line at a time.
template <int P, class T, class Acc>
void transpose_panel_scalar(const T* s, int64_t ld, int64_t n, int64_t len, Acc* d) {
  constexpr int64_t kStep = 16;
  for (int64_t k0 = 0; k0 < len; k0 += kStep) {
    const int64_t m = std::min(kStep, len - k0);
    for (int64_t r = 0; r < n; ++r) {
      Acc tmp[kStep];
      widen(s + r * ld + k0, tmp, m);
      for (int64_t k = 0; k < m; ++k) d[(k0 + k) * P + r] = tmp[k];
    }
    for (int64_t r = n; r < P; ++r)
      for (int64_t k = 0; k < m; ++k) d[(k0 + k) * P + r] = 0;
  }
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
// The scalar transpose does one 4-byte store per element and was 60% of the time of
// im2col-shaped products (A is M x K with small K); 16x16 register transposes cut that.

// First m (<= 16) elements of a row as floats, zero past m; exact widening for half/bf16.
inline __m512 load_row16(const float* s, __mmask16 m) { return _mm512_maskz_loadu_ps(m, s); }
inline __m512 load_row16(const half* s, __mmask16 m) {
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, s));
}
inline __m512 load_row16(const bfloat16* s, __mmask16 m) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, s));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

// In-register transpose: v[r] lane c becomes v[c] lane r.
inline void transpose16x16(__m512 v[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 16; i += 2) {  // interleave 32-bit elements of row pairs
    t[i] = _mm512_unpacklo_ps(v[i], v[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(v[i], v[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {  // then 64-bit pairs: u[g+j] lane L = column 4L+j, rows g..g+3
    const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
    const __m512d c = _mm512_castps_pd(t[i + 2]), e = _mm512_castps_pd(t[i + 3]);
    u[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    u[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, e));
    u[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, e));
  }
  for (int j = 0; j < 4; ++j) {  // 4x4 transpose of 128-bit blocks across the row groups
    const __m512 p0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x44);
    const __m512 p1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xEE);
    const __m512 p2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x44);
    const __m512 p3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xEE);
    v[j] = _mm512_shuffle_f32x4(p0, p2, 0x88);
    v[4 + j] = _mm512_shuffle_f32x4(p0, p2, 0xDD);
    v[8 + j] = _mm512_shuffle_f32x4(p1, p3, 0x88);
    v[12 + j] = _mm512_shuffle_f32x4(p1, p3, 0xDD);
  }
}

template <int P, class T>
void transpose_panel_avx512(const T* s, int64_t ld, int64_t n, int64_t len, float* d) {
  for (int64_t k0 = 0; k0 < len; k0 += 16) {
    const int64_t m = std::min<int64_t>(16, len - k0);
    const __mmask16 kmask = static_cast<__mmask16>((1u << m) - 1u);
    for (int r0 = 0; r0 < P; r0 += 16) {
      const int g = std::min(16, P - r0);  // lanes of the panel this group fills
      __m512 v[16];
#pragma GCC unroll 16
      for (int r = 0; r < 16; ++r)
        v[r] = r0 + r < n ? load_row16(s + (r0 + r) * ld + k0, kmask) : _mm512_setzero_ps();
      transpose16x16(v);
      const __mmask16 gmask = static_cast<__mmask16>((1u << g) - 1u);
#pragma GCC unroll 16
      for (int k = 0; k < 16; ++k)
        if (k < m) _mm512_mask_storeu_ps(d + (k0 + k) * P + r0, gmask, v[k]);
    }
  }
}
#endif

template <int P, class T, class Acc>
void transpose_panel(const T* s, int64_t ld, int64_t n, int64_t len, Acc* d) {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
  if constexpr (std::is_same<Acc, float>::value) {
    transpose_panel_avx512<P>(s, ld, n, len, d);
    return;
  }
#endif
  transpose_panel_scalar<P>(s, ld, n, len, d);
}

// A block rows [i0, i0+mb), depth [p0, p0+kc) -> MR-row micro-panels, each kc x MR.
template <int MR, class T, class Acc>
void pack_a(Trans ta, const T* A, int64_t lda, int64_t i0, int64_t mb, int64_t p0, int64_t kc,
            Acc* dst) {
  if (ta == Trans::N) {
    for (int64_t ir = 0; ir < mb; ir += MR) {
      // The transpose reads MR rows in short pieces, which the hardware prefetcher follows
      // poorly; asking for the next panel's rows now hides the memory latency.
      for (int64_t r = ir + MR; r < std::min(mb, ir + 2 * MR); ++r)
        for (int64_t k = 0; k < kc; k += 64 / int64_t(sizeof(T)))
          __builtin_prefetch(A + (i0 + r) * lda + p0 + k);
      transpose_panel<MR>(A + (i0 + ir) * lda + p0, lda, std::min<int64_t>(MR, mb - ir), kc,
                          dst + ir * kc);
    }
  } else {
    for (int64_t ir = 0; ir < mb; ir += MR) {
      // Each panel reads a short piece of kc long rows; fetch the new line the next panel
      // needs in each row while this one is copied.
      const int64_t ahead = std::min(mb, ir + 2 * MR) - 1;
      if (ahead >= ir + MR)
        for (int64_t k = 0; k < kc; ++k) __builtin_prefetch(A + (p0 + k) * lda + i0 + ahead);
      copy_panel<MR>(A + p0 * lda + i0 + ir, lda, std::min<int64_t>(MR, mb - ir), kc,
                     dst + ir * kc);
    }
  }
}

// Columns [j0, j0+nb) of op(B), rows [k0, k0+kn) -> rows k0.. of a K x NR micro-panel
// (dst points at its row 0).
template <int NR, class T, class Acc>
void pack_b(Trans tb, const T* B, int64_t ldb, int64_t k0, int64_t kn, int64_t j0, int64_t nb,
            Acc* dst) {
  if (tb == Trans::N)
    copy_panel<NR>(B + k0 * ldb + j0, ldb, nb, kn, dst + k0 * NR);
  else
    transpose_panel<NR>(B + j0 * ldb + k0, ldb, nb, kn, dst + k0 * NR);
}

// Writes the valid mr x nb part of a computed tile: C(r0+i, c0+j) = alpha * tile(i,j) +
// beta * C(r0+i, c0+j), C unread when beta == 0. With ct, C holds the transpose: element
// (r, c) of the product lives at C[c*ldc + r]; lines of C are then written contiguously.
template <int MR, int NR, class T, class Acc>
void store_tile(const Acc* tile, int64_t mr, int64_t nb, T* C, int64_t ldc, int64_t r0, int64_t c0,
                bool ct, Acc alpha, Acc beta) {
  const int64_t lines = ct ? nb : mr, len = ct ? mr : nb;
  for (int64_t l = 0; l < lines; ++l) {
    T* c = ct ? C + (c0 + l) * ldc + r0 : C + (r0 + l) * ldc + c0;
    const Acc* t = ct ? tile + l : tile + l * NR;
    const int64_t step = ct ? NR : 1;
    if constexpr (std::is_same<T, Acc>::value) {
      if (beta == Acc(0))
        for (int64_t e = 0; e < len; ++e) c[e] = alpha * t[e * step];
      else
        for (int64_t e = 0; e < len; ++e) c[e] = alpha * t[e * step] + beta * c[e];
    } else {
      Acc buf[MR > NR ? MR : NR];
      if (beta != Acc(0)) widen(c, buf, len);
      for (int64_t e = 0; e < len; ++e) {
        const Acc v = alpha * t[e * step];
        buf[e] = beta == Acc(0) ? v : v + beta * buf[e];
      }
      narrow(buf, c, len);  // for half/bf16 the one rounding of the whole sum
    }
  }
}

// ---- Driver --------------------------------------------------------------------------------
// Loop nest: for each NC-wide column block of C, B is packed once for the whole depth K
// (threads share the work); then work items (an MC-row block, optionally a slice of the
// column panels when M is too short to feed every thread) each loop over K in KC passes:
// pack their A block, then run the micro-kernel over every MR x NR tile.
// For T == Acc the micro-kernel accumulates straight into C across passes. For half/bf16
// it accumulates into a per-thread float copy of the item's C tiles, converted to T once
// after the last pass, so the whole K-sum is rounded a single time.
// ct: C is stored transposed (see store_tile); every tile then goes through store_tile.
template <class T, class V, int MR, int NV>
void gemm_blocked(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, typename V::T alpha,
                  const T* A, int64_t lda, const T* B, int64_t ldb, typename V::T beta, T* C,
                  int64_t ldc, bool ct) {
  using Acc = typename V::T;
  constexpr int NR = NV * V::W;
  constexpr bool kDirect = std::is_same<T, Acc>::value;

  int nt = 1;
#if defined(_OPENMP)
  if (!omp_in_parallel() && M * N * K >= kParallelMinMacs) nt = omp_get_max_threads();
#endif

  const int64_t kc_max = std::min(K, kKC);
  const int64_t npass = ceil_div(K, kKC);

  // Row blocks: as many as the A block size needs, rounded up to a multiple of the thread
  // count so the threads get equal shares, and each a whole number of micro-panels.
  const int64_t mc_max =
      std::max<int64_t>(MR, kAPanelBytes / (kc_max * int64_t(sizeof(Acc))) / MR * MR);
  int64_t nbm = ceil_div(M, mc_max);
  nbm = std::min(round_up(nbm, nt), ceil_div(M, MR));
  const int64_t mc = round_up(ceil_div(M, nbm), MR);
  nbm = ceil_div(M, mc);

  // Column block width: the packed K x NC block of B fits its byte budget.
  int64_t nc_max = std::max<int64_t>(NR, kBPanelBytes / (K * int64_t(sizeof(Acc))) / NR * NR);
  if (!kDirect && npass > 1) nc_max = std::min(nc_max, kMaxScratchCols);
  nc_max = std::min(nc_max, round_up(N, NR));
  const int64_t np_max = nc_max / NR;

  // Scratch layout, in Acc elements rounded to 64 bytes: packed B (two buffers when there
  // are several column blocks, see below), then per thread its A block and (half/bf16
  // only) its float C tiles.
  constexpr int64_t kLine = 64 / int64_t(sizeof(Acc));
  const int64_t nbuf_b = N > nc_max ? 2 : 1;
  const int64_t b_elems = round_up(K * nc_max, kLine);
  const int64_t a_elems = round_up(mc * kc_max, kLine);
  const int64_t c_elems = kDirect ? 0 : round_up(mc * np_max * NR, kLine);
  Acc* const Bbuf = static_cast<Acc*>(
      call_scratch().get((nbuf_b * b_elems + nt * (a_elems + c_elems)) * int64_t(sizeof(Acc))));

#if defined(_OPENMP)
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
  {
    int tid = 0;
#if defined(_OPENMP)
    tid = omp_get_thread_num();
#endif
    Acc* const Ap = Bbuf + nbuf_b * b_elems + tid * (a_elems + c_elems);
    Acc* const Cf = Ap + a_elems;

    // Each sync point can cost a scheduler time slice on a busy machine, so there is one
    // barrier per column block (after packing B) plus the final join. Column blocks
    // alternate between two B buffers, so the work loop needs no barrier before the next
    // packing: passing that packing's barrier means every thread is done with the older one.
    for (int64_t jc = 0, blk = 0; jc < N; jc += nc_max, ++blk) {
      const int64_t nc = std::min(nc_max, N - jc);
      const int64_t np = ceil_div(nc, NR);
      Acc* const Bp = Bbuf + (blk % nbuf_b) * b_elems;
      // Pieces of one K pass per panel, so the team shares even a single wide panel.
      const int64_t nkp = ceil_div(K, kKC);
#if defined(_OPENMP)
#pragma omp for schedule(static)
#endif
      for (int64_t u = 0; u < np * nkp; ++u) {
        const int64_t q = u / nkp, k0 = (u % nkp) * kKC;
        pack_b<NR>(tb, B, ldb, k0, std::min(kKC, K - k0), jc + q * NR,
                   std::min<int64_t>(NR, nc - q * NR), Bp + q * K * NR);
      }
      // Too few row blocks for the team: also split the column panels.
      const int64_t ng = nbm >= nt ? 1 : std::min(np, ceil_div(nt, nbm));
      const int64_t pg = ceil_div(np, ng);
#if defined(_OPENMP)
#pragma omp for schedule(static) nowait
#endif
      for (int64_t item = 0; item < nbm * ng; ++item) {
        const int64_t i0 = (item / ng) * mc;
        const int64_t mb = std::min(mc, M - i0);
        const int64_t q0 = (item % ng) * pg;
        const int64_t q1 = std::min(np, q0 + pg);
        for (int64_t pc = 0; pc < K; pc += kKC) {
          const int64_t kc = std::min(kKC, K - pc);
          const bool first = pc == 0;
          const bool last = pc + kc == K;
          pack_a<MR>(ta, A, lda, i0, mb, pc, kc, Ap);
          for (int64_t q = q0; q < q1; ++q) {
            const int64_t j0 = jc + q * NR;
            const int64_t nb = std::min<int64_t>(NR, N - j0);
            const Acc* bp = Bp + q * K * NR + pc * NR;
            for (int64_t ir = 0; ir < mb; ir += MR) {
              const int64_t mr = std::min<int64_t>(MR, mb - ir);
              const Acc* ap = Ap + ir * kc;
              if constexpr (kDirect) {
                const Acc be = first ? beta : Acc(1);
                if (!ct && mr == MR && nb == NR) {
                  micro_kernel<V, MR, NV>(kc, ap, bp, C + (i0 + ir) * ldc + j0, ldc, alpha, be);
                } else {  // edge or transposed tile: compute it aside, store the valid part
                  alignas(64) Acc tile[MR * NR];
                  micro_kernel<V, MR, NV>(kc, ap, bp, tile, NR, Acc(1), Acc(0));
                  store_tile<MR, NR>(tile, mr, nb, C, ldc, i0 + ir, j0, ct, alpha, be);
                }
              } else {
                Acc* tile = Cf + ((q - q0) * mc + ir) * NR;
                micro_kernel<V, MR, NV>(kc, ap, bp, tile, NR, Acc(1), first ? Acc(0) : Acc(1));
                if (last) store_tile<MR, NR>(tile, mr, nb, C, ldc, i0 + ir, j0, ct, alpha, beta);
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace

template <class T>
void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, double alpha, const T* A,
          int64_t lda, const T* B, int64_t ldb, double beta, T* C, int64_t ldc) {
  using Acc = acc_t<T>;
  using V = VecFor<Acc>;
  if (M <= 0 || N <= 0) return;
  if constexpr (std::is_same_v<T, bfloat16>) {
    // BF16 operands go to the CPU's BF16 dot-product unit (AMX or AVX512-BF16) where it has one.
    TileUnit unit;
    if (bf16_tile_unit(&unit))
      return gemm_bf16_tiles<bfloat16>(unit, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
  const Acc a = static_cast<Acc>(alpha);
  const Acc b = static_cast<Acc>(beta);
  if (K <= 0 || a == Acc(0)) {  // no products: C = beta * C, C unread when beta == 0
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        T& c = C[i * ldc + j];
        if (b == Acc(0))
          c = from_acc<T>(Acc(0));
        else if (b != Acc(1))
          c = from_acc<T>(b * static_cast<Acc>(c));
      }
    return;
  }
  // Narrow C (im2col with few output channels, classifier heads) gets one vector per row
  // and a taller tile, so fewer lanes are wasted on padding.
  // Then the orientation: computing C^T = op(B)^T op(A)^T instead can pad far less (small
  // M, as in the weight gradient gy^T * im2col where M = output channels) and can avoid
  // repacking A for every column block when N is wide and K long. A rough cycle count for
  // each: FMAs over padded tiles, ~3 cycles per repacked element from memory, and for the
  // transposed form its scalar tile stores; swap only on a clear gain.
  constexpr int W = V::W;
  const auto cycles = [&](int64_t m, int64_t n, bool transposed) {
    const int64_t mr = n <= W ? kNarrowMR : kWideMR, nr = n <= W ? W : kWideNV * W;
    const double padded = double(round_up(m, mr)) * double(round_up(n, nr)) * double(K);
    const int64_t nc = std::max<int64_t>(nr, kBPanelBytes / (K * int64_t(sizeof(Acc))) / nr * nr);
    double c = padded / (2 * W) + 3.0 * double(ceil_div(n, nc) - 1) * double(m) * double(K);
    if (transposed) c += double(m) * double(n) * double(ceil_div(K, kKC));
    return c;
  };
  const bool swap = K >= 64 && cycles(N, M, true) < 0.9 * cycles(M, N, false);
  if (swap) {
    const Trans ta2 = tb == Trans::N ? Trans::T : Trans::N;
    const Trans tb2 = ta == Trans::N ? Trans::T : Trans::N;
    if (M <= W)
      gemm_blocked<T, V, kNarrowMR, 1>(ta2, tb2, N, M, K, a, B, ldb, A, lda, b, C, ldc, true);
    else
      gemm_blocked<T, V, kWideMR, kWideNV>(ta2, tb2, N, M, K, a, B, ldb, A, lda, b, C, ldc, true);
  } else if (N <= W) {
    gemm_blocked<T, V, kNarrowMR, 1>(ta, tb, M, N, K, a, A, lda, B, ldb, b, C, ldc, false);
  } else {
    gemm_blocked<T, V, kWideMR, kWideNV>(ta, tb, M, N, K, a, A, lda, B, ldb, b, C, ldc, false);
  }
}

template void gemm<float>(Trans, Trans, int64_t, int64_t, int64_t, double, const float*, int64_t,
                          const float*, int64_t, double, float*, int64_t);
template void gemm<double>(Trans, Trans, int64_t, int64_t, int64_t, double, const double*, int64_t,
                           const double*, int64_t, double, double*, int64_t);
template void gemm<half>(Trans, Trans, int64_t, int64_t, int64_t, double, const half*, int64_t,
                         const half*, int64_t, double, half*, int64_t);
template void gemm<bfloat16>(Trans, Trans, int64_t, int64_t, int64_t, double, const bfloat16*,
                             int64_t, const bfloat16*, int64_t, double, bfloat16*, int64_t);

}  // namespace cpu
}  // namespace kernels
