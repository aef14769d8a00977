// Out-of-line pieces of error.h, so the headers need no MPI include.
#include "core/error.h"

#include <mpi.h>

#include <cstring>

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
