// DIT_ATTENTION and the fallback messages of the auto path (see attention_path.h).
#include "backend/attention_path.h"

#include <cstdlib>
#include <cstring>

namespace dit {

AttentionPath parse_attention_path(const char* value) {
  if (!value || !*value || std::strcmp(value, "auto") == 0) return AttentionPath::Auto;
  if (std::strcmp(value, "kernel") == 0) return AttentionPath::Kernel;
  if (std::strcmp(value, "cudnn") == 0) return AttentionPath::Cudnn;
  if (std::strcmp(value, "composed") == 0) return AttentionPath::Composed;
  DIT_FAIL("DIT_ATTENTION=", value, ": expected auto, kernel, cudnn or composed");
}

AttentionPath attention_path_from_env() {
  return parse_attention_path(std::getenv("DIT_ATTENTION"));
}

const char* fused_failure_name(FusedFailure f) {
  switch (f) {
    case FusedFailure::Library: return "library";
    case FusedFailure::Ineligible: return "ineligible";
    case FusedFailure::Graph: return "graph";
    case FusedFailure::NoEngine: return "no engine";
    case FusedFailure::Plan: return "plan";
    case FusedFailure::Execute: return "execute";
  }
  return "?";
}

std::optional<FusedFailure> parse_fused_failure(const char* name) {
  if (!name || !*name) return std::nullopt;
  for (FusedFailure f : {FusedFailure::Library, FusedFailure::Ineligible, FusedFailure::Graph,
                         FusedFailure::NoEngine, FusedFailure::Plan, FusedFailure::Execute})
    if (std::strcmp(name, fused_failure_name(f)) == 0) return f;
  DIT_FAIL("DIT_CUDNN_FAIL=", name, ": expected library, ineligible, graph, no engine, plan or execute");
}

void FallbackLog::report(const std::string& problem, const FusedError& e) {
  if (count_++ == 0)
    first_ = detail::concat(problem, " (", fused_failure_name(e.kind()), "): ", e.what());
  if (sink_)
    std::fprintf(sink_,
                 "dit: %s runs on the composed attention: %s cannot take it (%s): %s "
                 "(DIT_ATTENTION=cudnn makes this an error)\n",
                 problem.c_str(), library_.c_str(), fused_failure_name(e.kind()), e.what());
}

std::string FallbackLog::note() const {
  if (count_ == 0) return {};
  std::string first = first_.size() > 240 ? first_.substr(0, 237) + "..." : first_;
  return detail::concat(library_, ": ", count_, count_ == 1 ? " problem" : " problems",
                        " on the composed attention; first: ", first);
}

}  // namespace dit
