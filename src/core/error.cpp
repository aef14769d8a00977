// Out-of-line pieces of error.h, so the headers need no MPI include.
#include "core/error.h"

#include <mpi.h>

#include <cstring>

namespace dit {

std::string describe_exception(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) == nullptr) return e.what();
  return "out of memory (std::bad_alloc); the model.* sizes, train.micro_batch and sample.per_class decide "
         "the memory a rank needs";
}

}  // namespace dit

namespace dit::detail {

void throw_error(const char* file, int line, const std::string& what) {
  const char* base = std::strrchr(file, '/');
  std::ostringstream os;
  os << what << " [" << (base ? base + 1 : file) << ":" << line << "]";
  throw Error(os.str());
}

void throw_mpi_error(const char* file, int line, const char* stmt, int code) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(code, text, &len);
  throw_error(file, line, concat("MPI call failed: ", stmt, ": ", text));
}

}  // namespace dit::detail
