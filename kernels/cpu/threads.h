// The calling thread's rank in its OpenMP team and the team's size (0 and 1 without OpenMP):
// for kernels that split a range by hand, so each thread knows where its part starts.
#pragma once

#include <cstdint>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace kernels::cpu {

inline int64_t team_rank() {
#if defined(_OPENMP)
  return omp_get_thread_num();
#else
  return 0;
#endif
}
inline int64_t team_size() {
#if defined(_OPENMP)
  return omp_get_num_threads();
#else
  return 1;
#endif
}
// The team a parallel region started here would have: 1 inside a parallel region (no nesting),
// else OpenMP's thread count. Work is split by it before the region starts.
inline int64_t max_team_size() {
#if defined(_OPENMP)
  return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
  return 1;
#endif
}

}  // namespace kernels::cpu
