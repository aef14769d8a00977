// Which backend a run computes on (train.backend). The dtype comes separately (train.precision);
// together they name a registered backend ("cuda:bf16", backend.h).
#pragma once

#include <cstdint>

#include "core/named.h"

namespace dit {

enum class BackendKind : std::uint8_t { Cpu, Cuda };
inline constexpr Named<BackendKind> kBackendNames[] = {{BackendKind::Cpu, "cpu"}, {BackendKind::Cuda, "cuda"}};

}  // namespace dit
