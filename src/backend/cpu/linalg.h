// Small dense linear algebra on the host in double, for statistics (the evaluation metrics): the
// vendor library (Eigen) stays inside the CPU backend's folder.
#pragma once

#include <cstdint>
#include <vector>

namespace dit::linalg {

// The positive semi-definite square root of the symmetric (f, f) row-major matrix m (negative
// eigenvalues of rounding are clamped to 0), from its symmetric eigendecomposition.
std::vector<double> sqrt_psd(const std::vector<double>& m, std::int64_t f);
// c (f, f) = a b, row-major.
std::vector<double> matmul(const std::vector<double>& a, const std::vector<double>& b, std::int64_t f);

}  // namespace dit::linalg
