// Refusing runs that cannot fit before allocating for them: a lower bound on the host memory one
// rank needs (parameters and optimizer state, the step's activations, sampling), compared with the
// machine's memory.
#pragma once

#include <cstdint>
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

}  // namespace dit
