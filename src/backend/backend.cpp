// Shape rules shared by every backend.
#include "backend/backend.h"

namespace dit {

GemmShape gemm_shape(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb, const Tensor& c) {
  const int r = c.shape.rank;
  DIT_CHECK((r == 2 || r == 3) && a.shape.rank == r && b.shape.rank == r,
            "gemm takes 2-D or 3-D (batched) views of one rank; got A", a.shape.str(), " B",
            b.shape.str(), " C", c.shape.str());
  GemmShape g{r == 3 ? c.dim(0) : 1, c.dim(-2), c.dim(-1), 0, a.dim(-2), a.dim(-1), b.dim(-2), b.dim(-1)};
  DIT_CHECK(r == 2 || (a.dim(0) == g.batch && b.dim(0) == g.batch), "gemm batch mismatch: A",
            a.shape.str(), " B", b.shape.str(), " C", c.shape.str());
  g.k = ta == Transpose::No ? g.ac : g.ar;
  DIT_CHECK((ta == Transpose::No ? g.ar : g.ac) == g.m && (tb == Transpose::No ? g.br : g.bc) == g.k &&
                (tb == Transpose::No ? g.bc : g.br) == g.n,
            "gemm shapes do not agree: A", a.shape.str(), (ta == Transpose::Yes ? "^T" : ""), " B",
            b.shape.str(), (tb == Transpose::Yes ? "^T" : ""), " C", c.shape.str());
  return g;
}

void Backend::gemm_bias(const Tensor& a, Transpose ta, const Tensor& b, Transpose tb,
                        const Tensor& bias, const Tensor& c) {
  DIT_CHECK(c.shape.rank == 2 && bias.numel() == c.dim(1), "gemm_bias: a bias of ", bias.numel(),
            " values for C", c.shape.str(), " (2-D, one value per column)");
  gemm(a, ta, b, tb, c, Accumulate::Overwrite);
  add_rowwise(c, bias);
}

}  // namespace dit
