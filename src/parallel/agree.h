// Agreeing on a failure: a step that every rank runs, where any rank may fail, ends on every rank
// with the same error, so no rank is left waiting in a later collective and the job reports once.
#pragma once

#include <functional>

#include "parallel/comm.h"

namespace dit {

// Runs `fn` on every rank of `comm`; if it throws anywhere, every rank throws dit::AgreedError
// with the message of the lowest failing rank and that rank's world rank. `fn` must not
// communicate over `comm`. With `comm` the world, the failure is reported as the whole job's.
void agree(Comm& comm, const std::function<void()>& fn);

}  // namespace dit
