// Pipeline execution over point-to-point messages (see pipeline.h).
#include "parallel/pipeline.h"

#include <algorithm>
#include <chrono>

namespace dit {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// Message tags: one forward and one backward message stream per microbatch.
int tag(int mb, Op op) { return 2 * mb + (op == Op::Backward ? 1 : 0); }
}  // namespace

PipelineExecutor::PipelineExecutor(Comm& pp, Allocator& alloc, CommWatch* watch)
    : pp_(&pp), alloc_(&alloc), watch_(watch) {}

void PipelineExecutor::drain(Slot& s, PipelineTiming& t) {
  const double t0 = now_s();
  for (Request& r : s.sends) pp_->wait(r);
  s.sends.clear();
  t.wait_s += now_s() - t0;
}

PipelineExecutor::Slot& PipelineExecutor::acquire(int mb, PipelineTiming& t) {
  for (Slot& s : slots_)
    if (s.microbatch < 0) {
      drain(s, t);  // its previous microbatch's messages must have left before reuse
      s.arena->reset();
      s.microbatch = mb;
      s.message_bytes = 0;
      return s;
    }
  slots_.push_back(Slot{std::make_unique<Arena>(*alloc_), {}, mb});
  return slots_.back();
}

PipelineExecutor::Slot& PipelineExecutor::slot_of(int mb) {
  for (Slot& s : slots_)
    if (s.microbatch == mb) return s;
  DIT_FAIL("pipeline: backward of microbatch ", mb, " before its forward");
}

void PipelineExecutor::release(Slot& s) { s.microbatch = -1; }

void PipelineExecutor::count_messages(Slot& s, const std::vector<Tensor>& buffers) {
  for (const Tensor& x : buffers) s.message_bytes += x.bytes();
  std::size_t live = 0;
  for (const Slot& o : slots_)
    if (o.microbatch >= 0) live += o.message_bytes;
  peak_messages_ = std::max(peak_messages_, live);
}

PipelineTiming PipelineExecutor::run(const std::vector<Action>& actions, int microbatches,
                                     PipelineStage& stage) {
  PipelineTiming t;
  const int me = pp_->rank(), last = pp_->size() - 1;
  DIT_CHECK(microbatches <= kMaxMicrobatches, "pipeline: at most ", kMaxMicrobatches,
            " microbatches per step (MPI tag space)");
  bool any_backward = false;
  for (const Action& a : actions) any_backward |= a.op == Op::Backward;
  for (const Action& a : actions) {
    const int mb = a.microbatch;
    if (a.op == Op::Forward) {
      Slot& s = acquire(mb, t);
      std::vector<Tensor> in = stage.forward_inputs(mb, *s.arena);
      count_messages(s, in);
      const double t0 = now_s();
      note(mb, "forward");
      std::vector<Request> recvs;
      for (const Tensor& x : in) recvs.push_back(pp_->irecv(x, me - 1, tag(mb, Op::Forward)));
      for (Request& r : recvs) pp_->wait(r);
      const double t1 = now_s();
      std::vector<Tensor> out = stage.forward(mb, in, *s.arena);
      t.wait_s += t1 - t0;
      t.compute_s += now_s() - t1;
      DIT_CHECK(me < last || out.empty(), "pipeline: the last stage has nothing to send forward");
      for (const Tensor& x : out) s.sends.push_back(pp_->isend(x, me + 1, tag(mb, Op::Forward)));
      if (!any_backward) release(s);  // forward only: the slot is free once its sends have left
    } else {
      Slot& s = slot_of(mb);
      std::vector<Tensor> in = stage.backward_inputs(mb, *s.arena);
      count_messages(s, in);
      const double t0 = now_s();
      note(mb, "backward");
      std::vector<Request> recvs;
      for (const Tensor& x : in) recvs.push_back(pp_->irecv(x, me + 1, tag(mb, Op::Backward)));
      for (Request& r : recvs) pp_->wait(r);
      const double t1 = now_s();
      std::vector<Tensor> out = stage.backward(mb, in, *s.arena);
      t.wait_s += t1 - t0;
      t.compute_s += now_s() - t1;
      DIT_CHECK(me > 0 || out.empty(), "pipeline: the first stage has nothing to send backward");
      for (const Tensor& x : out) s.sends.push_back(pp_->isend(x, me - 1, tag(mb, Op::Backward)));
      release(s);
    }
  }
  // Every message must have left before returning.
  note(-1, "");
  for (Slot& s : slots_) {
    drain(s, t);
    DIT_CHECK(s.microbatch < 0, "pipeline: microbatch ", s.microbatch, " never ran backward");
  }
  return t;
}

std::size_t PipelineExecutor::peak_activation_bytes() const {
  std::size_t n = 0;
  for (const Slot& s : slots_) n += s.arena->peak_bytes();
  return n;
}

}  // namespace dit
