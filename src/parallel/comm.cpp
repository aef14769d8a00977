// The single-rank communicator (collectives copy or do nothing).
#include "parallel/comm.h"

#include <cstring>

namespace dit {

void SelfComm::all_gather(const Tensor& in, const Tensor& out) {
  DIT_CHECK(in.bytes() == out.bytes(), "all_gather on one rank: sizes differ");
  if (in.data != out.data) std::memmove(out.data, in.data, in.bytes());
}

void SelfComm::reduce_scatter_sum(const Tensor& in, const Tensor& out) {
  DIT_CHECK(in.bytes() == out.bytes(), "reduce_scatter on one rank: sizes differ");
  if (in.data != out.data) std::memmove(out.data, in.data, in.bytes());
}

Request SelfComm::isend(const Tensor&, int peer, int) {
  DIT_FAIL("point-to-point send to rank ", peer, " on a single-rank communicator");
}
Request SelfComm::irecv(const Tensor&, int peer, int) {
  DIT_FAIL("point-to-point receive from rank ", peer, " on a single-rank communicator");
}

}  // namespace dit
