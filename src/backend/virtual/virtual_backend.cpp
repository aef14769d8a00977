// Address space without memory (see virtual_backend.h).
#include "backend/virtual/virtual_backend.h"

namespace dit {

void* VirtualBackend::allocate(std::size_t bytes) {
  // 256-byte aligned like a device allocator; the addresses only need to be distinct.
  void* p = reinterpret_cast<void*>(next_);
  next_ += (bytes + 255) / 256 * 256 + 256;
  return p;
}

}  // namespace dit
