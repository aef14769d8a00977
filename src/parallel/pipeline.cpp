// Pipeline execution over point-to-point messages (see pipeline.h).
#include "parallel/pipeline.h"

#include "core/clock.h"
#include "core/trace.h"

#include <algorithm>
#include <optional>
#include <string>

namespace dit {

namespace {
// Message tags: one forward and one backward message stream per (chunk, microbatch), named by the
// receiver's chunk (a message that wraps around from the last stage to stage 0 changes chunk).
int tag(int chunk, int mb, int microbatches, Op op) {
  return 2 * (chunk * microbatches + mb) + (op == Op::Backward ? 1 : 0);
}

// A profiled rank's timeline (core/trace.h): each action a span named by its op and microbatch
// ("F3", "B3", "W3"; ".1" for chunk 1), each wait for messages a "pp" span, and each message's two
// ends, the send inside the span that produced it and the receive just before the span it feeds.
std::string action_args(int mb, int chunk) {
  return "\"mb\": " + std::to_string(mb) + ", \"chunk\": " + std::to_string(chunk);
}

std::optional<trace::Span> action_span(const char* cat, const char* op, int mb, int chunk, int chunks) {
  std::optional<trace::Span> span;
  if (trace::on())
    span.emplace(cat, op + std::to_string(mb) + (chunks > 1 ? "." + std::to_string(chunk) : ""), action_args(mb, chunk));
  return span;
}

std::optional<trace::Span> wait_span(const char* what, int mb, int chunk) {
  std::optional<trace::Span> span;
  if (trace::on()) span.emplace("pp", what, action_args(mb, chunk));
  return span;
}

// direction 0: forward activations, 1: gradients; to_stage, to_chunk: the receiver's.
void message_end(char ph, int direction, int mb, int to_stage, int to_chunk) {
  if (!trace::on()) return;
  trace::add({ph, "pp", direction == 0 ? "activations" : "gradients", trace::clock_s(), 0,
              trace::message_id(direction, mb, to_stage, to_chunk), ""});
}
}  // namespace

PipelineExecutor::PipelineExecutor(Comm& pp, Allocator& alloc, CommWatch* watch)
    : pp_(&pp), alloc_(&alloc), watch_(watch) {}

void PipelineExecutor::drain(Slot& s, PipelineTiming& t) {
  const std::optional<trace::Span> span = s.sends.empty() ? std::nullopt : wait_span("sends in flight", s.microbatch, s.chunk);
  const double t0 = now_s();
  for (Request& r : s.sends) pp_->wait(r);
  s.sends.clear();
  t.wait_s += now_s() - t0;
}

PipelineExecutor::Slot& PipelineExecutor::acquire(int mb, int chunk, PipelineTiming& t) {
  for (Slot& s : slots_)
    if (s.microbatch < 0) {
      drain(s, t);  // its previous microbatch's messages must have left before reuse
      s.arena->reset();
      s.microbatch = mb;
      s.chunk = chunk;
      s.message_bytes = 0;
      s.input_done = false;
      return s;
    }
  slots_.push_back(Slot{std::make_unique<Arena>(*alloc_), {}, {}, {}, mb, chunk});
  return slots_.back();
}

PipelineExecutor::Slot& PipelineExecutor::slot_of(int mb, int chunk) {
  for (Slot& s : slots_)
    if (s.microbatch == mb && s.chunk == chunk) return s;
  DIT_FAIL("pipeline: backward of microbatch ", mb, " (chunk ", chunk, ") before its forward");
}

void PipelineExecutor::release(Slot& s) { s.microbatch = -1; }

ChunkAt PipelineExecutor::neighbour(int chunk, int step) const {
  const int pp = pp_->size(), k = model_chunk(pp, pp_->rank(), chunk, placement_) + step;
  return chunk_at(pp, (k + pp * chunks_) % (pp * chunks_), placement_);  // wraps: never sent on
}

void PipelineExecutor::count_messages(Slot& s, const std::vector<Tensor>& buffers) {
  for (const Tensor& x : buffers) s.message_bytes += x.bytes();
  std::size_t live = 0;
  for (const Slot& o : slots_)
    if (o.microbatch >= 0) live += o.message_bytes;
  peak_messages_ = std::max(peak_messages_, live);
}

// keep: a backward follows, so the slot stays and its gradient's receive is posted now.
void PipelineExecutor::run_forward(const Action& a, bool keep, PipelineStage& stage, PipelineTiming& t) {
  const int me = pp_->rank(), mb = a.microbatch;
  const ChunkAt prev = neighbour(a.chunk, -1), next = neighbour(a.chunk, +1);
  const bool last = model_chunk(pp_->size(), me, a.chunk, placement_) == pp_->size() * chunks_ - 1;
  Slot& s = acquire(mb, a.chunk, t);
  std::vector<Tensor> in = stage.forward_inputs(mb, a.chunk, *s.arena);
  count_messages(s, in);
  const double t0 = now_s();
  note(mb, "forward");
  if (!in.empty()) {
    const auto waiting = wait_span("receive activations", mb, a.chunk);
    std::vector<Request> recvs;
    for (const Tensor& x : in)
      recvs.push_back(pp_->irecv(x, prev.stage, tag(a.chunk, mb, microbatches_, Op::Forward)));
    for (Request& r : recvs) pp_->wait(r);
  }
  if (!in.empty()) message_end('f', 0, mb, me, a.chunk);
  const double t1 = now_s();
  {
    const auto span = action_span("forward", "F", mb, a.chunk, chunks_);
    std::vector<Tensor> out = stage.forward(mb, a.chunk, in, *s.arena);
    t.wait_s += t1 - t0;
    t.compute_s += now_s() - t1;
    t.forward_s += now_s() - t1, ++t.forwards;
    DIT_CHECK(!last || out.empty(), "pipeline: the last stage has nothing to send forward");
    if (!out.empty()) message_end('s', 0, mb, next.stage, next.chunk);  // before it can arrive
    for (const Tensor& x : out)
      s.sends.push_back(pp_->isend(x, next.stage, tag(next.chunk, mb, microbatches_, Op::Forward)));
  }
  if (!keep) {  // forward only: the slot is free once its sends have left
    // At the turn of a V the last stage sends chunk 0's output to itself: its slot is kept until
    // chunk 1 has received it, so that reusing the slot never waits on this rank's own receive.
    if (next.stage == me && !last) return;
    release(s);
    if (prev.stage == me && a.chunk > 0) release(slot_of(mb, prev.chunk));
    return;
  }
  s.grads = stage.backward_inputs(mb, a.chunk, *s.arena);
  count_messages(s, s.grads);
  for (const Tensor& x : s.grads)
    s.recvs.push_back(pp_->irecv(x, next.stage, tag(a.chunk, mb, microbatches_, Op::Backward)));
}

// Backward (fused) or BackwardInput: waits for the gradient, sends the input gradient back. The
// fused backward frees the slot; after B it waits for its W.
void PipelineExecutor::run_backward(const Action& a, PipelineStage& stage, PipelineTiming& t) {
  const int me = pp_->rank(), mb = a.microbatch;
  const bool split = a.op == Op::BackwardInput;
  const ChunkAt prev = neighbour(a.chunk, -1);
  Slot& s = slot_of(mb, a.chunk);
  const double t0 = now_s();
  note(mb, split ? "backward input" : "backward");
  const bool receives = !s.recvs.empty();
  if (receives) {
    const auto waiting = wait_span("receive gradients", mb, a.chunk);
    for (Request& r : s.recvs) pp_->wait(r);
    s.recvs.clear();
    message_end('f', 1, mb, me, a.chunk);
  }
  const double t1 = now_s();
  const auto span = action_span("backward", "B", mb, a.chunk, chunks_);
  std::vector<Tensor> out = split ? stage.backward_input(mb, a.chunk, s.grads, *s.arena)
                                  : stage.backward(mb, a.chunk, s.grads, *s.arena);
  s.grads.clear();
  t.wait_s += t1 - t0;
  t.compute_s += now_s() - t1;
  t.backward_s += now_s() - t1, ++t.backwards;
  DIT_CHECK(model_chunk(pp_->size(), me, a.chunk, placement_) > 0 || out.empty(),
            "pipeline: the first stage has nothing to send backward");
  if (!out.empty()) message_end('s', 1, mb, prev.stage, prev.chunk);
  for (const Tensor& x : out)
    s.sends.push_back(pp_->isend(x, prev.stage, tag(prev.chunk, mb, microbatches_, Op::Backward)));
  if (split) {
    s.input_done = true;
    return;
  }
  release(s);
}

void PipelineExecutor::run_weight(const Action& a, PipelineStage& stage, PipelineTiming& t) {
  Slot& s = slot_of(a.microbatch, a.chunk);
  DIT_CHECK(s.input_done, "pipeline: weight backward of microbatch ", a.microbatch, " (chunk ", a.chunk,
            ") before its input backward");
  note(a.microbatch, "backward weight");
  const auto span = action_span("weight", "W", a.microbatch, a.chunk, chunks_);
  const double t0 = now_s();
  stage.backward_weight(a.microbatch, a.chunk, *s.arena);
  t.compute_s += now_s() - t0;
  t.weight_s += now_s() - t0, ++t.weights;
  release(s);
}

PipelineTiming PipelineExecutor::run(const std::vector<Action>& actions, int microbatches,
                                     PipelineStage& stage, ChunkPlacement placement) {
  PipelineTiming t;
  microbatches_ = microbatches;
  placement_ = placement;
  chunks_ = 1;
  bool any_backward = false;
  for (const Action& a : actions) {
    any_backward |= a.op != Op::Forward;
    chunks_ = std::max(chunks_, a.chunk + 1);
  }
  DIT_CHECK(microbatches * chunks_ <= kMaxMicrobatches, "pipeline: at most ", kMaxMicrobatches,
            " (chunk, microbatch) pairs per step (MPI tag space)");
  for (const Action& a : actions) {
    if (a.op == Op::Forward)
      run_forward(a, any_backward, stage, t);
    else if (a.op == Op::BackwardWeight)
      run_weight(a, stage, t);
    else
      run_backward(a, stage, t);
  }
  // Every message must have left before returning.
  for (Slot& s : slots_) {
    drain(s, t);
    DIT_CHECK(s.microbatch < 0, "pipeline: microbatch ", s.microbatch, " never ran backward");
  }
  note(-1, "");
  return t;
}

std::size_t PipelineExecutor::peak_activation_bytes() const {
  std::size_t n = 0;
  for (const Slot& s : slots_) n += s.arena->peak_bytes();
  return n;
}

}  // namespace dit
