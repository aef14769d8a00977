// How a test that forces a fused library (DIT_ATTENTION=cudnn) tells "the library declined this
// case" from a fault: a FusedRefusal (library, ineligible, graph, no engine, plan) is a result,
// reported as a skip whose message starts with kNotServed, which the GPU check counts as "not
// served"; any other error (an execution failure, wrong numbers) fails the test.
#pragma once

#include <string>

#include "backend/attention_path.h"

namespace dit {

// Runs fn. False, with the refusal's message in *why, when the fused library declined the case;
// anything else fn throws propagates.
template <typename Fn>
bool served(Fn&& fn, std::string* why) {
  try {
    fn();
    return true;
  } catch (const FusedRefusal& e) {
    *why = e.what();
    return false;
  }
}

}  // namespace dit
