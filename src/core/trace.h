// The timeline a profiled run records (--profile A:B, run/profile.h writes it as a Chrome trace):
// spans of this process's work (pipeline actions, collectives, the update, data waits, checkpoint
// I/O) and the two ends of each pipeline message, on this process's trace clock. Off by default:
// each probe is then one test of a flag. One recorder per process (a process is one rank), used by
// the training thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dit::trace {

struct Event {
  char ph = 'X';            // 'X' a span (ts, dur); 's' / 'f' the send / receive end of a message
  const char* cat = "";     // "forward", "backward", "weight", "pp", "tp", "dp", "world", "optimizer", ...
  std::string name;
  double ts = 0, dur = 0;   // seconds on the trace clock
  std::uint64_t id = 0;     // 's' / 'f': the message within its step and pipeline (message_id)
  std::string args;         // a JSON object's members ("\"mb\": 3, \"chunk\": 0"), or ""
  std::int64_t step = 0;    // the training step it belongs to (set_step), counting from 1
};

// The id both ends of a pipeline message give it: its direction (0 forward, 1 backward), the
// microbatch, and the receiver's stage and chunk. Unique within one step of one pipeline.
inline std::uint64_t message_id(int direction, int mb, int to_stage, int to_chunk) {
  return ((std::uint64_t(direction) * 65536 + std::uint64_t(mb)) * 256 + std::uint64_t(to_chunk)) * 65536 +
         std::uint64_t(to_stage);
}

// Whether this process records now.
bool on();
void set_on(bool recording);
// The trace clock: seconds since this process began (each process has its own origin; the
// profile aligns them to rank 0's at its start).
double clock_s();
// The step the events recorded from now on belong to.
void set_step(std::int64_t step);
void add(Event e);  // stamped with the current step
// The events recorded so far, handed over and cleared.
std::vector<Event> take();

// A span from construction to destruction, recorded when the recorder is on at construction.
class Span {
 public:
  Span(const char* cat, std::string name, std::string args = "");
  ~Span();
  Span(Span&& o) noexcept;  // the moved-from span records nothing
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  Span& operator=(Span&&) = delete;

 private:
  bool on_;
  double t0_ = 0;
  const char* cat_;
  std::string name_, args_;
};

// A span when the recorder is on, else nothing: `name()` (a string) is built only when recording.
template <class Name>
std::optional<Span> span_if_on(const char* cat, Name&& name) {
  std::optional<Span> s;
  if (on()) s.emplace(cat, name());
  return s;
}

}  // namespace dit::trace
