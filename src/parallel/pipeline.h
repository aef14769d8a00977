// The pipeline executor: carries out a schedule (schedule.h) on one stage, receiving inputs from
// the previous stage and gradients from the next with non-blocking point-to-point messages.
// Sends never block (isend; buffers stay alive until they complete) and each stage blocks only
// on the receive its next action needs. The receive of a microbatch's gradient is posted as soon
// as its forward is done, so a send never waits for its receiver to reach an action: reusing a
// slot (which waits for the slot's sends) cannot block either, and any schedule that respects the
// data dependencies cannot deadlock. Interleaved schedules name a chunk per action: chunk c of
// stage s is model chunk c * pp + s, so messages wrap around from the last stage to stage 0; under
// ZB-V's V placement (pipeline_schedule.h) the turn of the V is a message from the last stage to
// itself. A split backward runs B (BackwardInput: it sends the input gradient on) and later W
// (BackwardWeight), and the microbatch's slot is held until its W. The executor knows nothing of
// DiT: it drives the PipelineStage interface. Whatever reads the weight gradients (the gradient
// norm, overflow checks, the data-parallel reduction, the optimizer step) runs after `run`
// returns, so after the last W of the step.
#pragma once

#include <memory>
#include <vector>

#include "core/arena.h"
#include "parallel/comm.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/watchdog.h"

namespace dit {

// What a stage does for one microbatch of one of its chunks (chunk 0 unless interleaved). Tensors
// it returns must live in `arena` (the microbatch's own arena, kept until its backward is done and
// its messages have left).
class PipelineStage {
 public:
  virtual ~PipelineStage() = default;
  // Buffers to receive this microbatch's forward inputs into (empty on the first stage).
  virtual std::vector<Tensor> forward_inputs(int mb, int chunk, Arena& arena) = 0;
  // Runs forward; returns the tensors for the next stage (empty on the last stage).
  virtual std::vector<Tensor> forward(int mb, int chunk, const std::vector<Tensor>& inputs,
                                      Arena& arena) = 0;
  // Buffers to receive the gradients of this microbatch's outputs into (empty on the last stage).
  virtual std::vector<Tensor> backward_inputs(int mb, int chunk, Arena& arena) = 0;
  // Runs backward; returns the gradients for the previous stage (empty on the first stage).
  virtual std::vector<Tensor> backward(int mb, int chunk, const std::vector<Tensor>& grads,
                                       Arena& arena) = 0;
  // The two halves of backward, for zero-bubble schedules: backward_input returns what backward
  // returns and keeps in `arena` what backward_weight needs to add the weight gradients; the
  // pair adds exactly what backward adds. A stage that cannot split does all of it in the first.
  virtual std::vector<Tensor> backward_input(int mb, int chunk, const std::vector<Tensor>& grads,
                                             Arena& arena) {
    return backward(mb, chunk, grads, arena);
  }
  virtual void backward_weight(int /*mb*/, int /*chunk*/, Arena& /*arena*/) {}
};

struct PipelineTiming {
  double compute_s = 0;  // inside the stage's forward/backward
  double wait_s = 0;     // blocked on receives and on sends still in flight
  // compute_s by op, per (chunk, microbatch) on average: T_F, T_B (the input backward, or the
  // fused backward) and T_W (0 without split backwards), the simulator's op times
  double forward_s = 0, backward_s = 0, weight_s = 0;
  int forwards = 0, backwards = 0, weights = 0;
  double mean_forward_s() const { return forwards ? forward_s / forwards : 0; }
  double mean_backward_s() const { return backwards ? backward_s / backwards : 0; }
  double mean_weight_s() const { return weights ? weight_s / weights : 0; }
};

class PipelineExecutor {
 public:
  // pp: the communicator of this rank's pipeline (rank = stage). `watch` (optional) learns which
  // microbatch and action each wait is for, for the watchdog's message.
  PipelineExecutor(Comm& pp, Allocator& alloc, CommWatch* watch = nullptr);
  // Runs the actions for `microbatches` microbatches, with the schedule's chunk placement; returns
  // when every message has completed.
  PipelineTiming run(const std::vector<Action>& actions, int microbatches, PipelineStage& stage,
                     ChunkPlacement placement = ChunkPlacement::Interleaved);
  // Peak bytes held by the microbatch arenas (activation memory, message buffers included).
  std::size_t peak_activation_bytes() const;
  // Peak bytes of the receive buffers held at once (part of the activation memory).
  std::size_t peak_message_bytes() const { return peak_messages_; }

 private:
  struct Slot {
    std::unique_ptr<Arena> arena;
    std::vector<Request> sends;  // messages sent from this slot's tensors
    std::vector<Tensor> grads;   // the backward inputs, received into since the forward
    std::vector<Request> recvs;  // their receives
    int microbatch = -1, chunk = 0;
    std::size_t message_bytes = 0;  // receive buffers allocated in this slot's arena
    bool input_done = false;        // its B ran; its W is still owed
  };
  Slot& acquire(int mb, int chunk, PipelineTiming& t);
  Slot& slot_of(int mb, int chunk);
  void run_forward(const Action& a, bool keep, PipelineStage& stage, PipelineTiming& t);
  void run_backward(const Action& a, PipelineStage& stage, PipelineTiming& t);
  void run_weight(const Action& a, PipelineStage& stage, PipelineTiming& t);
  // The neighbouring (stage, chunk) of this rank's chunk: the next model chunk, or the previous.
  ChunkAt neighbour(int chunk, int step) const;
  void release(Slot& s);
  void count_messages(Slot& s, const std::vector<Tensor>& buffers);
  void drain(Slot& s, PipelineTiming& t);

  Comm* pp_;
  Allocator* alloc_;
  void note(int mb, const char* action) {
    if (watch_) watch_->microbatch = mb, watch_->action = action;
  }

  CommWatch* watch_;
  int microbatches_ = 0, chunks_ = 1;  // of the run in progress (message tags, peers)
  ChunkPlacement placement_ = ChunkPlacement::Interleaved;
  std::vector<Slot> slots_;
  std::size_t peak_messages_ = 0;
};

}  // namespace dit
