// The job as a whole, before and around a rank grid: this process's world rank and size, the
// layout a world size allows, the one-line error report, and collective_check, the one way ranks
// agree on a failure while setting up (one message, every rank exits non-zero, no hang).
#pragma once

#include <functional>
#include <string>

#include "parallel/grid.h"

namespace dit {

int world_rank();
int world_size();
// "dit_mp: rank r: error: ..." as one line on stderr; r is this rank unless `rank` names another.
void print_error(const char* what, int rank = -1);

// Runs `check` on every rank; it must not communicate. If it throws on any rank, every rank throws
// AgreedError with the message of the lowest failing rank (main prints it once). Without MPI (a
// plain process, e.g. a unit test) it just runs `check`, whose exception propagates. It agrees
// over the world as agree() (parallel/agree.h) does over any communicator.
void collective_check(const std::function<void()>& check);

// tp x pp x dp with dp = world / (tp * pp), or a message naming the numbers and what would fit.
Layout layout_for_world(int tp, int pp);

}  // namespace dit
