// Error handling for dit_mp: one exception type and one family of checking macros.
// Library code throws dit::Error carrying the failed statement, file and line; main() prints it
// once as "rank r: ..." and takes every rank down. Checks stay on in release builds.
#pragma once

#include <new>
#include <sstream>
#include <stdexcept>
#include <string>

namespace dit {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown with the same message on EVERY rank of the job at the same point (an agreed collective
// failure): no rank is left inside a collective, so main() prints it once (on rank 0, naming the
// rank that found it) and every rank leaves normally, without MPI_Abort.
class AgreedError : public Error {
 public:
  AgreedError(const std::string& what, int origin_rank) : Error(what), origin_rank_(origin_rank) {}
  int origin_rank() const { return origin_rank_; }  // the world rank that found the problem

 private:
  int origin_rank_;
};

// Runs `f`; a std::bad_alloc inside becomes a dit::Error "out of memory while <what>", where
// `what` names what was being allocated and the setting that sized it.
template <class F>
auto allocating(const std::string& what, F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    throw Error("out of memory while " + what);
  }
}

// The one-line message for an exception; a bad_alloc that no `allocating` named says so.
std::string describe_exception(const std::exception& e);

namespace detail {
[[noreturn]] void throw_error(const char* file, int line, const std::string& what);

// Builds a message from any streamable arguments: DIT_CHECK(ok, "shape ", a, " vs ", b).
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace dit

// Throws dit::Error with a message when `cond` is false. The message names what was expected.
#define DIT_CHECK(cond, ...)                                                                \
  do {                                                                                      \
    if (!(cond)) ::dit::detail::throw_error(__FILE__, __LINE__, ::dit::detail::concat(__VA_ARGS__)); \
  } while (0)

// Throws unconditionally (for unreachable branches and input errors found by parsing).
#define DIT_FAIL(...) ::dit::detail::throw_error(__FILE__, __LINE__, ::dit::detail::concat(__VA_ARGS__))

// MPI calls: a non-success code becomes an exception naming the call and MPI's own message.
#define DIT_MPI_CHECK(stmt)                                                                 \
  do {                                                                                      \
    int dit_mpi_rc_ = (stmt);                                                               \
    if (dit_mpi_rc_ != 0) ::dit::detail::throw_mpi_error(__FILE__, __LINE__, #stmt, dit_mpi_rc_); \
  } while (0)

// HDF5 calls return a negative value on failure.
#define DIT_H5_CHECK(stmt, ...)                                                              \
  ([&]() {                                                                                   \
    auto dit_h5_rc_ = (stmt);                                                                \
    if (dit_h5_rc_ < 0)                                                                      \
      ::dit::detail::throw_error(__FILE__, __LINE__,                                         \
                                 ::dit::detail::concat("HDF5 call failed: " #stmt ": ", __VA_ARGS__)); \
    return dit_h5_rc_;                                                                       \
  }())

namespace dit::detail {
[[noreturn]] void throw_mpi_error(const char* file, int line, const char* stmt, int code);
}
