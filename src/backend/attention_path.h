// Which attention implementation a backend runs, and the auto path's rule for a fused library
// (cuDNN) that cannot serve a problem: the problem falls back to the composed attention
// (composed_attention.h), said once on stderr with the library's message and version, unless the
// library was forced. Host-only, so the rule is tested without a GPU (the cuDNN code uses it as is).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "core/error.h"

namespace dit {

// From DIT_ATTENTION:
//   auto (or unset): the fused library where it serves, else the composed attention;
//   kernel: the GPU's plain (scalar) kernels; cudnn: the fused library, a failure is an error;
//   composed: always the composed attention (on the CPU too; the CPU default is its own kernel).
enum class AttentionPath : std::uint8_t { Auto, Kernel, Cudnn, Composed };

// "auto" | "kernel" | "cudnn" | "composed" (nullptr or "" is auto); throws naming the values.
AttentionPath parse_attention_path(const char* value);
AttentionPath attention_path_from_env();  // DIT_ATTENTION

// Where a fused library failed for a problem.
enum class FusedFailure : std::uint8_t {
  Library,     // the library could not be used at all (handle, version below the build's need)
  Ineligible,  // the problem is outside what the library takes (dtype, head dim, alignment)
  Graph,       // building or finalizing the operation graph
  NoEngine,    // the heuristics offered no engine config that could be planned
  Plan,        // finalizing an execution plan failed with an error (not "not supported")
  Execute,     // running the plan failed
};
const char* fused_failure_name(FusedFailure f);  // "library", "ineligible", "graph", ...
// The name's class ("no engine" included); nullopt for nullptr or ""; throws naming the values.
// DIT_CUDNN_FAIL takes these names to inject a failure (ineligible is decided, not injected).
std::optional<FusedFailure> parse_fused_failure(const char* name);
// A refusal is the library declining a problem before running it (every class but Execute): a
// fact about its coverage on this GPU and version, not a fault. Execute is a failure.
constexpr bool is_refusal(FusedFailure f) { return f != FusedFailure::Execute; }

// A fused library's failure at one stage: the code that builds and runs plans throws it.
class FusedError : public Error {
 public:
  FusedError(FusedFailure kind, const std::string& what) : Error(what), kind_(kind) {}
  FusedFailure kind() const { return kind_; }

 private:
  FusedFailure kind_;
};

// Under DIT_ATTENTION=cudnn, a refusal is this error: the caller (a test, the GPU check) reports
// the case as not served, with the library's message, rather than as a failure. Its text starts
// with kNotServed.
inline constexpr const char* kNotServed = "not served by";
class FusedRefusal : public FusedError {
 public:
  using FusedError::FusedError;
};

// The one line said when a problem falls back, and the short note a run records.
class FallbackLog {
 public:
  // `library` names it with its loaded version ("cuDNN 9.19.0"); lines go to `sink`.
  explicit FallbackLog(std::string library, std::FILE* sink = stderr)
      : library_(std::move(library)), sink_(sink) {}
  // Says (once per call) that `problem` runs on the composed attention because of `e`.
  void report(const std::string& problem, const FusedError& e);
  // "" while nothing fell back; else how many problems did and the first reason (one line).
  std::string note() const;
  int count() const { return count_; }
  const std::string& library() const { return library_; }

 private:
  std::string library_;
  std::FILE* sink_;
  std::string first_;
  int count_ = 0;
};

// Plans of a fused library, one per problem key, built on first use. A problem whose build (or
// later a run) fails takes the composed attention from then on; under AttentionPath::Cudnn the
// failure is an error instead, naming the problem and the library's message.
template <typename Key, typename Plan>
class FusedPlanCache {
 public:
  FusedPlanCache(AttentionPath path, FallbackLog& log) : path_(path), log_(&log) {}
  void set_path(AttentionPath p) { path_ = p; }
  AttentionPath path() const { return path_; }
  void clear() { entries_.clear(); }

  // The plan for key; `build()` returns a std::unique_ptr<Plan> or throws a FusedError (any
  // other dit::Error counts as a Graph failure). nullptr: this call takes the composed attention.
  template <typename Build>
  const Plan* get(const Key& key, const std::string& problem, Build&& build) {
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      Entry e;
      try {
        e.plan = build();
      } catch (const FusedError& err) {
        e.error = std::make_unique<FusedError>(err);
      } catch (const Error& err) {
        e.error = std::make_unique<FusedError>(FusedFailure::Graph, err.what());
      }
      it = entries_.emplace(key, std::move(e)).first;
    }
    Entry& e = it->second;
    if (e.plan) return e.plan.get();
    fall_back(e, problem);
    return nullptr;
  }

  // Running key's plan failed with `err`: the plan is dropped and the call (and every later one)
  // takes the composed attention; an error under AttentionPath::Cudnn.
  void run_failed(const Key& key, const std::string& problem, const FusedError& err) {
    Entry& e = entries_[key];
    e.plan.reset();
    e.error = std::make_unique<FusedError>(err);
    e.reported = false;
    fall_back(e, problem);
  }

 private:
  struct Entry {
    std::unique_ptr<Plan> plan;
    std::unique_ptr<FusedError> error;  // why there is no plan
    bool reported = false;
  };
  void fall_back(Entry& e, const std::string& problem) {
    if (path_ == AttentionPath::Cudnn) {
      const FusedFailure kind = e.error->kind();
      if (is_refusal(kind))
        throw FusedRefusal(kind, detail::concat(kNotServed, " ", log_->library(), " (", fused_failure_name(kind),
                                                "): DIT_ATTENTION=cudnn: ", problem, ": ", e.error->what()));
      DIT_FAIL("DIT_ATTENTION=cudnn: ", problem, " failed on ", log_->library(), " (",
               fused_failure_name(kind), "): ", e.error->what());
    }
    if (!e.reported) log_->report(problem, *e.error);
    e.reported = true;
  }

  AttentionPath path_;
  FallbackLog* log_;
  std::map<Key, Entry> entries_;
};

}  // namespace dit
