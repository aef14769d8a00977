// The per-process trace recorder (see trace.h).
#include "core/trace.h"

#include "core/clock.h"

namespace dit::trace {

namespace {
bool g_on = false;
const double g_origin = now_s();  // this process's start, as near as static initialisation gets
std::vector<Event> g_events;
std::int64_t g_step = 0;
}  // namespace

bool on() { return g_on; }
void set_on(bool recording) { g_on = recording; }
double clock_s() { return now_s() - g_origin; }
void set_step(std::int64_t step) { g_step = step; }
void add(Event e) {
  e.step = g_step;
  g_events.push_back(std::move(e));
}

std::vector<Event> take() {
  std::vector<Event> out;
  out.swap(g_events);
  return out;
}

Span::Span(const char* cat, std::string name, std::string args) : on_(g_on), cat_(cat) {
  if (!on_) return;
  name_ = std::move(name);
  args_ = std::move(args);
  t0_ = clock_s();
}

Span::Span(Span&& o) noexcept
    : on_(o.on_), t0_(o.t0_), cat_(o.cat_), name_(std::move(o.name_)), args_(std::move(o.args_)) {
  o.on_ = false;
}

Span::~Span() {
  if (!on_) return;
  const double t1 = clock_s();
  g_events.push_back({'X', cat_, std::move(name_), t0_, t1 - t0_, 0, std::move(args_), g_step});
}

}  // namespace dit::trace
