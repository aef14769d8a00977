// Parameters of a model slice: each tensor declares its PyTorch name, global shape, how tensor
// parallelism shards it and how it is initialized. Values live in one flat buffer and gradients in
// another (views are slices), so optimizers and data-parallel reductions see flat ranges.
// Initialization draws the GLOBAL tensor from the keyed RNG and keeps this rank's slice, so the
// model is the same at every layout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace dit {

// A range [begin, end) of elements of a ParamSet's flat buffers.
struct FlatRange {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};

// How a tensor is split over the tp ranks (Megatron's column/row parallel linear layers).
enum class Split : std::uint8_t {
  Replicated,  // every rank holds the whole tensor
  Column,      // dim 0 (output features) split; `groups` independent row groups are each split
  Row,         // dim 1 (input features) split
};

// One: norm weights. KaimingUniform: nn.Linear's default (kaiming_uniform_, a = sqrt(5)), i.e.
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)): LoRA's A.
enum class Init : std::uint8_t { Zero, XavierUniform, Normal002, One, KaimingUniform };

struct ParamSpec {
  std::string name;  // PyTorch state_dict name, e.g. "blocks.3.attn.qkv.weight"
  Shape global;      // PyTorch shape
  Split split = Split::Replicated;
  int groups = 1;    // Column split only: qkv has 3 ([q | k | v] rows), others 1
  Init init = Init::Zero;

  Shape local(int tp) const;
  // Copies this rank's slice out of a global tensor (host, row-major), or back into it.
  void slice(const float* global_data, float* local_data, int tp, int tp_rank) const;
  void unslice(const float* local_data, float* global_data, int tp, int tp_rank) const;
  // Draws the global tensor from the keyed RNG (host).
  void initialize(std::uint64_t seed, std::vector<float>& global_data) const;
};

// A set of parameters: values in a flat buffer of the backend's compute dtype, gradients in a flat
// fp32 buffer whatever that dtype (Megatron's main_grad): weight-gradient GEMMs of 16-bit inputs
// accumulate into fp32 across microbatches, and the data-parallel reduction sums fp32, so a 16-bit
// run never rounds a running gradient sum to 16 bits and every communication path adds alike.
// Whether a ParamSet holds gradients: a model that only runs forward (distillation's teacher) has none.
enum class Gradients : std::uint8_t { Kept, None };

class ParamSet {
 public:
  static constexpr DType kGradDType = DType::F32;
  // The flat buffers hold numel() elements padded with zeros up to a multiple of pad_multiple.
  ParamSet(Backend& backend, std::vector<ParamSpec> specs, int tp, int tp_rank,
           std::int64_t pad_multiple = 1, Gradients gradients = Gradients::Kept);

  const std::vector<ParamSpec>& specs() const { return specs_; }
  std::size_t size() const { return specs_.size(); }
  int index(const std::string& name) const;  // -1 if absent
  Tensor value(int i) const;
  Tensor grad(int i) const;
  Tensor value(const std::string& name) const { return value(checked_index(name)); }
  Tensor grad(const std::string& name) const { return grad(checked_index(name)); }
  std::int64_t offset(int i) const { return offsets_[i]; }  // element offset in the flat buffers
  std::int64_t numel() const { return total_; }  // the end of the last tensor (gaps included)
  std::int64_t padded_numel() const { return padded_; }
  Tensor flat_values() const;  // (padded_numel)
  Tensor flat_grads() const;
  int tp() const { return tp_; }
  int tp_rank() const { return tp_rank_; }

  // Draws every tensor's initial values; only the elements in [keep_begin, keep_end) of the flat
  // buffer are written (ZeRO-3: a rank's shard; keep_end < 0: all).
  void initialize(std::uint64_t seed, std::int64_t keep_begin = 0, std::int64_t keep_end = -1);
  void zero_grads();
  // Sets parameter i from its global (PyTorch-shaped) host tensor; this rank keeps its slice.
  void set_global(int i, const std::vector<float>& global_data);
  // This rank's slice of a global tensor, or its grads, on the host in fp32.
  std::vector<float> local_host(int i, const std::vector<float>& global_data) const;
  std::vector<float> grad_host(int i) const;

 private:
  int checked_index(const std::string& name) const;
  Backend* backend_;
  std::vector<ParamSpec> specs_;
  std::vector<std::int64_t> offsets_;
  std::int64_t total_ = 0, padded_ = 0;
  int tp_, tp_rank_;
  Buffer values_, grads_;
};

// Zeros a flat buffer without touching the pages the allocator can hand back zeroed.
void zero_untouched(Backend& be, const Tensor& flat);

// Stable 64-bit hash of a name (FNV-1a): the RNG index of a tensor's initialization.
std::uint64_t name_hash(const std::string& s);

}  // namespace dit
