// Refusing runs that cannot fit before allocating for them: a lower bound on the host memory one
// rank needs (parameters and optimizer state, the step's activations, sampling), compared with the
// machine's memory, and a name for whatever was being allocated when std::bad_alloc came anyway.
#pragma once

#include <cstdint>
#include <new>
#include <string>

#include "core/error.h"
#include "io/config.h"
#include "parallel/grid.h"

namespace dit {

// Host bytes one rank needs at least, by what asks for them. Lower bounds: counted from the exact
// parameter count and the sizes of the biggest buffers, not a full plan (see `dit_mp plan`).
struct MemoryNeed {
  double state = 0;        // parameters, grads, the ZeRO shards, the checkpoint's gathered copies
  double activations = 0;  // the microbatches in flight in a training step
  double sampling = 0;     // the sample grid and its guided batch
  double total() const { return state + (activations > sampling ? activations : sampling); }
};

MemoryNeed training_memory_need(const RunConfig& cfg, const Layout& layout);
MemoryNeed sampling_memory_need(const DiTConfig& model, const Layout& layout, std::int64_t images);

// Throws, naming the settings and the numbers, when `ranks_per_node` ranks of `need` exceed the
// memory of this machine.
void check_memory_fits(const MemoryNeed& need, int ranks_per_node, const std::string& settings);

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

}  // namespace dit
