// The auto path's rule for a fused attention library (backend/attention_path.h), without a GPU:
// each failure class the cuDNN code can raise (library, ineligible problem, graph, no engine,
// plan, execute) is injected into the plan cache the cuDNN code uses, and the call falls back
// with one line on stderr naming the library's version and message; DIT_ATTENTION=cudnn turns the
// same failure into an error: a refusal (not served) for every build stage, a failure for execute.
// Also the parsing of DIT_ATTENTION and DIT_CUDNN_FAIL.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <cstring>
#include <memory>
#include <string>

#include "backend/attention_path.h"
#include "not_served.h"

namespace dit {
namespace {

struct FakePlan {
  int id;
};

// A FallbackLog writing into a temporary file, and what it wrote.
class Captured {
 public:
  Captured() : file_(std::tmpfile()), log_("cuDNN 9.19.0", file_) {}
  ~Captured() { std::fclose(file_); }
  FallbackLog& log() { return log_; }
  std::string text() {
    std::fflush(file_);
    std::rewind(file_);
    std::string s;
    char buf[512];
    while (std::fgets(buf, sizeof buf, file_)) s += buf;
    return s;
  }
  int lines() {
    int n = 0;
    for (char c : text()) n += c == '\n';
    return n;
  }

 private:
  std::FILE* file_;
  FallbackLog log_;
};

const FusedFailure kBuildFailures[] = {FusedFailure::Library, FusedFailure::Ineligible,
                                       FusedFailure::Graph, FusedFailure::NoEngine,
                                       FusedFailure::Plan};

std::string injected(FusedFailure f) {
  return std::string("cuDNN call failed: injected ") + fused_failure_name(f) + " failure (3000)";
}

// Every class of build failure: under auto, no plan (the composed attention runs), one line for
// two calls of the problem, naming version, class and message; the note says so for accounting.
TEST(AttentionFallback, EveryBuildFailureFallsBackWithOneMessage) {
  for (FusedFailure f : kBuildFailures) {
    Captured cap;
    FusedPlanCache<int, FakePlan> cache(AttentionPath::Auto, cap.log());
    int builds = 0;
    auto build = [&]() -> std::unique_ptr<FakePlan> {
      ++builds;
      throw FusedError(f, injected(f));
    };
    EXPECT_EQ(cache.get(7, "bf16 attention backward N=2 T=37 H=3 E=64", build), nullptr);
    EXPECT_EQ(cache.get(7, "bf16 attention backward N=2 T=37 H=3 E=64", build), nullptr);
    EXPECT_EQ(builds, 1) << "the failed build was retried";
    EXPECT_EQ(cap.lines(), 1) << cap.text();
    const std::string line = cap.text();
    EXPECT_NE(line.find("cuDNN 9.19.0"), std::string::npos) << line;
    EXPECT_NE(line.find(injected(f)), std::string::npos) << line;
    EXPECT_NE(line.find(std::string("(") + fused_failure_name(f) + ")"), std::string::npos) << line;
    EXPECT_NE(line.find("composed attention"), std::string::npos) << line;
    EXPECT_NE(cap.log().note().find(fused_failure_name(f)), std::string::npos) << cap.log().note();
  }
}

// Under DIT_ATTENTION=cudnn the same failures are errors naming the problem and the message,
// every time, and nothing is said on the fallback channel.
TEST(AttentionFallback, ForcedCudnnMakesEveryFailureAnError) {
  for (FusedFailure f : kBuildFailures) {
    Captured cap;
    FusedPlanCache<int, FakePlan> cache(AttentionPath::Cudnn, cap.log());
    auto build = [&]() -> std::unique_ptr<FakePlan> { throw FusedError(f, injected(f)); };
    for (int call = 0; call < 2; ++call) {
      try {
        cache.get(1, "bf16 attention forward N=1 T=5 H=2 E=64", build);
        ADD_FAILURE() << "DIT_ATTENTION=cudnn accepted a " << fused_failure_name(f) << " failure";
      } catch (const Error& e) {
        EXPECT_NE(std::strstr(e.what(), "DIT_ATTENTION=cudnn"), nullptr) << e.what();
        EXPECT_NE(std::strstr(e.what(), injected(f).c_str()), nullptr) << e.what();
        EXPECT_NE(std::strstr(e.what(), "T=5"), nullptr) << e.what();
      }
    }
    EXPECT_EQ(cap.lines(), 0);
    EXPECT_EQ(cap.log().note(), "");
  }
}

// A plan that fails when run (execute): the call and later ones fall back, said once; forced, an
// error. A plain dit::Error from a build counts as a graph failure.
TEST(AttentionFallback, ExecuteFailureAndOtherErrorsFallBack) {
  Captured cap;
  FusedPlanCache<int, FakePlan> cache(AttentionPath::Auto, cap.log());
  int builds = 0;
  auto good = [&]() -> std::unique_ptr<FakePlan> {
    ++builds;
    return std::make_unique<FakePlan>(FakePlan{42});
  };
  const FakePlan* plan = cache.get(3, "fwd", good);
  ASSERT_NE(plan, nullptr);
  EXPECT_EQ(plan->id, 42);
  EXPECT_EQ(cache.get(3, "fwd", good), plan);
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(cap.lines(), 0);
  cache.run_failed(3, "fwd", FusedError(FusedFailure::Execute, injected(FusedFailure::Execute)));
  EXPECT_EQ(cache.get(3, "fwd", good), nullptr);
  EXPECT_EQ(builds, 1) << "a problem whose plan failed to run was built again";
  EXPECT_EQ(cap.lines(), 1) << cap.text();
  EXPECT_NE(cap.text().find("(execute)"), std::string::npos) << cap.text();

  EXPECT_EQ(cache.get(4, "bwd", []() -> std::unique_ptr<FakePlan> { DIT_FAIL("descriptor refused"); }),
            nullptr);
  EXPECT_EQ(cap.lines(), 2);
  EXPECT_NE(cap.text().find("(graph): descriptor refused"), std::string::npos) << cap.text();
  EXPECT_NE(cap.log().note().find("2 problems"), std::string::npos) << cap.log().note();

  FusedPlanCache<int, FakePlan> forced(AttentionPath::Cudnn, cap.log());
  ASSERT_NE(forced.get(3, "fwd", good), nullptr);
  EXPECT_THROW(forced.run_failed(3, "fwd", FusedError(FusedFailure::Execute, "boom")), Error);
}

TEST(AttentionFallback, ParsesDitAttention) {
  EXPECT_EQ(parse_attention_path(nullptr), AttentionPath::Auto);
  EXPECT_EQ(parse_attention_path(""), AttentionPath::Auto);
  EXPECT_EQ(parse_attention_path("auto"), AttentionPath::Auto);
  EXPECT_EQ(parse_attention_path("kernel"), AttentionPath::Kernel);
  EXPECT_EQ(parse_attention_path("cudnn"), AttentionPath::Cudnn);
  EXPECT_EQ(parse_attention_path("composed"), AttentionPath::Composed);
  try {
    parse_attention_path("flash");
    ADD_FAILURE() << "DIT_ATTENTION=flash accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::strstr(e.what(), "auto, kernel, cudnn or composed"), nullptr) << e.what();
  }
}

// Forced, every build stage's failure is a FusedRefusal of its class whose message starts with
// kNotServed and names the library, the class and its message; an execution failure is not.
TEST(AttentionFallback, ForcedBuildFailuresAreRefusalsExecuteIsNot) {
  for (FusedFailure f : kBuildFailures) {
    Captured cap;
    FusedPlanCache<int, FakePlan> cache(AttentionPath::Cudnn, cap.log());
    std::string why;
    const bool ok = served([&] {
      cache.get(1, "bf16 attention backward N=2 T=37 H=3 E=64",
                [&]() -> std::unique_ptr<FakePlan> { throw FusedError(f, injected(f)); });
    }, &why);
    EXPECT_FALSE(ok) << fused_failure_name(f);
    EXPECT_EQ(why.rfind(kNotServed, 0), 0u) << why;
    EXPECT_NE(why.find("cuDNN 9.19.0"), std::string::npos) << why;
    EXPECT_NE(why.find(std::string("(") + fused_failure_name(f) + ")"), std::string::npos) << why;
    EXPECT_NE(why.find(injected(f)), std::string::npos) << why;
    EXPECT_TRUE(is_refusal(f));
  }
  EXPECT_FALSE(is_refusal(FusedFailure::Execute));
  Captured cap;
  FusedPlanCache<int, FakePlan> forced(AttentionPath::Cudnn, cap.log());
  ASSERT_NE(forced.get(3, "fwd", [] { return std::make_unique<FakePlan>(FakePlan{1}); }), nullptr);
  std::string why;
  EXPECT_THROW(served([&] { forced.run_failed(3, "fwd", FusedError(FusedFailure::Execute, "boom")); }, &why),
               Error);
  EXPECT_EQ(why, "");
}

// The GPU check's own test of its rows (tests/cli/gpu_check.sh): with DIT_CUDNN_FAIL naming a
// class, that class is forced through the plan cache and reported as a CUDA test reports it: a
// refusal is skipped as not served, an execution failure fails. Unset, nothing is injected.
TEST(AttentionFallback, InjectedClassIsReportedAsTheGpuTestsReportIt) {
  const std::optional<FusedFailure> f = parse_fused_failure(std::getenv("DIT_CUDNN_FAIL"));
  if (!f) GTEST_SKIP() << "DIT_CUDNN_FAIL is unset: nothing to inject (tests/cli/gpu_check.sh sets it)";
  Captured cap;
  FusedPlanCache<int, FakePlan> cache(AttentionPath::Cudnn, cap.log());
  ASSERT_NE(cache.get(1, "probe", [] { return std::make_unique<FakePlan>(FakePlan{1}); }), nullptr);
  std::string why;
  const bool ok = served([&] {
    const std::string problem = "bf16 attention forward N=2 T=37 H=3 E=64";
    if (*f == FusedFailure::Execute)
      cache.run_failed(1, problem, FusedError(*f, injected(*f)));
    else
      cache.get(2, problem, [&]() -> std::unique_ptr<FakePlan> { throw FusedError(*f, injected(*f)); });
  }, &why);
  if (!ok) GTEST_SKIP() << why;
  ADD_FAILURE() << "the forced " << fused_failure_name(*f) << " failure was neither refused nor an error";
}

TEST(AttentionFallback, ParsesDitCudnnFail) {
  EXPECT_EQ(parse_fused_failure(nullptr), std::nullopt);
  EXPECT_EQ(parse_fused_failure(""), std::nullopt);
  EXPECT_EQ(parse_fused_failure("no engine"), FusedFailure::NoEngine);
  EXPECT_EQ(parse_fused_failure("execute"), FusedFailure::Execute);
  EXPECT_EQ(parse_fused_failure("ineligible"), FusedFailure::Ineligible);
  EXPECT_THROW(parse_fused_failure("noengine"), Error);
}

}  // namespace
}  // namespace dit
