// Bytes and seconds written for people, and the memory this process used and this machine has:
// what log lines, plans and memory refusals print.
#pragma once

#include <cstdint>
#include <string>

namespace dit {

std::string format_bytes(double bytes);      // "1.5 GiB"
std::string format_duration(double seconds);  // "1h02m", "3m05s", "12s"; "?" when unknown
// Peak resident memory of this process (VmHWM), in bytes; 0 when unknown.
std::uint64_t peak_rss_bytes();
// Resident memory of this process now (VmRSS), in bytes; 0 when unknown.
std::uint64_t rss_bytes();
// Starts peak_rss_bytes() again from the resident memory now; false where the kernel cannot.
bool reset_peak_rss();
// Physical memory of this machine in bytes; 0 when unknown.
double machine_memory_bytes();

// The host memory this process may use and how much of it is free now: the cgroup's limit and
// usage (cgroup v2 memory.max / memory.current, or v1 memory.limit_in_bytes / usage_in_bytes) when
// the cgroup sets a limit below the machine's memory, else the machine's MemTotal / MemAvailable.
struct HostMemory {
  double limit = 0, free = 0;  // bytes; 0 when unknown
  const char* source = "";     // "cgroup" or "machine"
};
HostMemory host_memory();

}  // namespace dit
