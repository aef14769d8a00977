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
// Memory this process holds now in bytes: its resident anonymous and shared-memory pages (RssAnon +
// RssShmem; the libraries' file pages are the page cache's); 0 when unknown.
std::uint64_t rss_bytes();
// Starts peak_rss_bytes() again from the resident memory now; false where the kernel cannot.
bool reset_peak_rss();
// Physical memory of this machine in bytes; 0 when unknown.
double machine_memory_bytes();

// The host memory this process may use and how much of it is free now: the cgroup's limit and
// usage (cgroup v2 memory.max / memory.current, or v1 memory.limit_in_bytes / usage_in_bytes) when
// the cgroup sets a limit below the machine's memory, else the machine's MemTotal / MemAvailable.
// A cgroup's free memory counts its inactive file cache as free (the kernel reclaims it before
// killing): after a run wrote its checkpoints, their pages stay in the cgroup's usage.
struct HostMemory {
  double limit = 0, free = 0;  // bytes; 0 when unknown
  const char* source = "";     // "cgroup" or "machine"
};
HostMemory host_memory();

// What this process may still allocate when `ranks_here` ranks share the tightest limit above: its
// share less what it holds now; `where` says so in a message ("61.0 MiB of this memory cgroup's
// 100.0 MiB (a share of 1 rank less the 39.0 MiB this process holds)"). What a VAE's encode or
// decode is sized against on the CPU (the plan counts whole arena chunks, so it errs high).
struct HostBudget {
  double bytes = 0;
  std::string where;
};
HostBudget host_budget(int ranks_here);

}  // namespace dit
