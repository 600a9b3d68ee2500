// Small dense linear algebra in FP64 on the host: the symmetric eigen-decomposition the
// whitening layer needs (a 12x12 patch covariance), by cyclic Jacobi rotations.
#pragma once

#include <vector>

namespace engine {

struct SymmetricEigen {
  std::vector<double> values;   // n eigenvalues, ascending (as torch.linalg.eigh)
  std::vector<double> vectors;  // n x n row-major; column j is the unit eigenvector of values[j],
                                // its largest-magnitude component positive (a fixed sign)
};

// a: n x n row-major, symmetric (checked to 1e-12 of its largest entry). Rotations until the
// off-diagonal part is below 1e-15 of the matrix's norm (at most 100 sweeps; Jacobi converges
// quadratically, a 12x12 in under 10); an error names a matrix with a NaN or inf.
SymmetricEigen symmetric_eigen(const std::vector<double>& a, int n);

}  // namespace engine
