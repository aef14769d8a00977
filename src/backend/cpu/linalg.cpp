// Host linear algebra with Eigen (see linalg.h).
#include "backend/cpu/linalg.h"

#include <Eigen/Dense>

namespace dit::linalg {

namespace {
using RowMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
Eigen::Map<const RowMat> view(const std::vector<double>& v, std::int64_t f) { return {v.data(), f, f}; }
std::vector<double> flat(const RowMat& m) { return {m.data(), m.data() + m.size()}; }
}  // namespace

std::vector<double> sqrt_psd(const std::vector<double>& m, std::int64_t f) {
  const RowMat a = view(m, f);
  Eigen::SelfAdjointEigenSolver<RowMat> es(0.5 * (a + a.transpose()));
  const Eigen::VectorXd root = es.eigenvalues().cwiseMax(0.0).cwiseSqrt();
  return flat(es.eigenvectors() * root.asDiagonal() * es.eigenvectors().transpose());
}

std::vector<double> matmul(const std::vector<double>& a, const std::vector<double>& b, std::int64_t f) {
  return flat(view(a, f) * view(b, f));
}

}  // namespace dit::linalg
