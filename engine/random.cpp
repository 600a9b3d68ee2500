// Seeded generator state and random tensor factories.
#include "engine/random.h"

#include <cmath>
#include <vector>

#include "kernels/philox.h"

namespace engine {

namespace {
// Stream id reserved for host-side initialisation draws.
constexpr uint64_t kInitStream = 0x1A17u;
uint64_t g_seed = 0;
uint64_t g_counter = 0;
int64_t g_batch_offset = 0;
}  // namespace

void set_batch_offset(int64_t samples) { g_batch_offset = samples; }
int64_t batch_offset() { return g_batch_offset; }

void manual_seed(uint64_t seed) {
  g_seed = seed;
  g_counter = 0;
}

double uniform01() { return kernels::philox_uniform(g_seed, kInitStream, g_counter++); }

uint64_t next_seed() {
  const uint64_t hi = static_cast<uint64_t>(uniform01() * 4294967296.0);
  const uint64_t lo = static_cast<uint64_t>(uniform01() * 4294967296.0);
  return (hi << 32) | lo;
}

Tensor uniform(const Shape& shape, double lo, double hi, DType dtype) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) x = lo + (hi - lo) * uniform01();
  return Tensor::from_vector(v, shape, dtype);
}

Tensor normal(const Shape& shape, double mean, double stddev, DType dtype) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) {  // Box-Muller; 1 - u keeps log() away from zero
    const double u1 = 1.0 - uniform01(), u2 = uniform01();
    x = mean + stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  return Tensor::from_vector(v, shape, dtype);
}

}  // namespace engine
