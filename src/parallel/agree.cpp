// One failure, reported once by every rank (see agree.h).
#include "parallel/agree.h"

#include <string>
#include <vector>

#include "core/error.h"

namespace dit {

void agree(Comm& comm, const std::function<void()>& fn) {
  std::string msg;
  try {
    fn();
  } catch (const std::exception& e) {
    msg = describe_exception(e);
    if (msg.empty()) msg = "unknown error";
  } catch (...) {
    msg = "unknown error";
  }
  const int n = comm.size(), me = comm.rank();
  const double worst = comm.all_reduce_max(msg.empty() ? 0.0 : double(n - me));
  if (worst == 0) return;
  const int first = n - static_cast<int>(worst);
  std::int32_t len = me == first ? static_cast<std::int32_t>(msg.size()) : 0;
  comm.broadcast(Tensor{&len, DType::I32, {1}, Device::Host}, first);
  std::vector<std::int32_t> chars(static_cast<std::size_t>(len));
  if (me == first)
    for (std::size_t i = 0; i < chars.size(); ++i) chars[i] = static_cast<unsigned char>(msg[i]);
  comm.broadcast(Tensor{chars.data(), DType::I32, {len}, Device::Host}, first);
  std::string text(chars.size(), '\0');
  for (std::size_t i = 0; i < chars.size(); ++i) text[i] = static_cast<char>(chars[i]);
  throw AgreedError(text, first);  // comm is the world in every caller of the whole-job kind
}

}  // namespace dit
