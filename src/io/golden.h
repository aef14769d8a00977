// Reader of golden reference files (float64 numbers computed by the official DiT code; schema in
// tests/data/README.md): the model config and weights by PyTorch name. Works for any config the
// schema can describe; nothing here knows the tiny test model.
#pragma once

#include <string>
#include <vector>

#include "io/h5.h"
#include "layers/dit_config.h"
#include "layers/params.h"

namespace dit {

class GoldenFile {
 public:
  explicit GoldenFile(const std::string& path);
  const std::string& path() const { return file_.path(); }
  const h5::File& h5() const { return file_; }
  const DiTConfig& config() const { return cfg_; }
  bool has_group(const std::string& group) const { return file_.exists("/" + group); }

  // A dataset checked against an expected shape, as float64.
  std::vector<double> read(const std::string& dataset, const Shape& expected) const;
  std::vector<float> read_f32(const std::string& dataset, const Shape& expected) const;
  // Labels as int32 checked against [0, num_classes] (num_classes is the null label).
  std::vector<std::int32_t> read_labels(const std::string& dataset, std::int64_t n) const;
  // Loads every parameter of a ParamSet from `group/<name>` (global tensors, sliced to tp).
  void load_params(ParamSet& ps, const std::string& group) const;

 private:
  h5::File file_;
  DiTConfig cfg_;
};

}  // namespace dit
