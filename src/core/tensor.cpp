// Shape printing and row slicing of tensor views.
#include "core/tensor.h"

#include <sstream>

namespace dit {

std::string Shape::str() const {
  std::ostringstream os;
  os << "(";
  for (int i = 0; i < rank; ++i) os << (i ? ", " : "") << dims[i];
  os << ")";
  return os.str();
}

Tensor Tensor::rows(std::int64_t begin, std::int64_t count) const {
  DIT_CHECK(shape.rank >= 1 && begin >= 0 && begin + count <= shape[0], "rows [", begin, ", ",
            begin + count, ") of a tensor of shape ", shape.str());
  Shape s = shape;
  s.dims[0] = count;
  std::int64_t row = shape[0] ? numel() / shape[0] : 0;
  auto* p = static_cast<char*>(data) + begin * row * static_cast<std::int64_t>(dtype_size(dtype));
  return Tensor{p, dtype, s, device};
}

}  // namespace dit
