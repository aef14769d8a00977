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
// Physical memory of this machine in bytes; 0 when unknown.
double machine_memory_bytes();

}  // namespace dit
