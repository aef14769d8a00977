// Model weights as an HDF5 file of global tensors under PyTorch names (`/weights/<name>`, float32,
// chunked with Fletcher32 checksums), with the model config as attributes of `/config`. Written by
// rank 0 from gathered tensors; read by every rank, each keeping its slice, every tensor verified. Checkpoints with
// optimizer state are a separate format (sharded, see checkpoint.h).
#pragma once

#include <hdf5.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "diffusion/objective.h"
#include "layers/dit_config.h"
#include "layers/params.h"

namespace dit::h5 {
class File;
}

namespace dit {

// Where a model made from another one came from (`dit_mp prune`): /config attributes
// `kept_layers` (int list, the teacher's index of each block, in order), `teacher_depth` (int) and
// `pruned_by` ("index", "score:cos", "score:loss"). A trained model has none (empty()).
struct WeightsProvenance {
  std::vector<int> kept_layers;
  int teacher_depth = 0;
  std::string pruned_by;
  bool empty() const { return kept_layers.empty(); }
};

// Writes atomically (io/atomic_file.h): complete or not at all. `diffusion_steps` (the training schedule's
// length) and, for a flow model, `objective = "flow"` (a string attr; absent = ddpm) go to /config
// so that sampling uses the schedule and the integrators the model was trained for; a non-empty
// provenance goes there too (its kept_layers must hold cfg.depth teacher blocks).
void save_weights(const std::string& path, const DiTConfig& cfg,
                  const std::map<std::string, std::vector<float>>& tensors, int diffusion_steps = 1000,
                  diffusion::Objective objective = diffusion::Objective::Ddpm,
                  const WeightsProvenance& provenance = {});
// The model config stored in a weights (or golden) file.
DiTConfig read_weights_config(const std::string& path);
// The training schedule's length stored in a weights file (1000 when absent: files from before).
int read_weights_diffusion_steps(const std::string& path);
// The objective stored in a weights or golden file (ddpm when absent: files from before); an
// unknown name is refused naming the file.
diffusion::Objective read_weights_objective(const std::string& path);
// The provenance stored in a weights file (empty when absent: a trained model, files from before),
// checked: one teacher block per student block, ascending, each below teacher_depth.
WeightsProvenance read_weights_provenance(const std::string& path);
// Its kept_layers: the teacher's block index of each block (empty when the file records none).
std::vector<int> read_kept_layers(const std::string& path);
// Loads every parameter of `ps` from `/weights/<name>`: shapes checked, checksums verified (a tensor
// without one is refused), and every value finite; errors name the file and the tensor.
void load_weights(const std::string& path, ParamSet& ps);

// The pieces, for other files of float32 tensors under /weights (the evaluation classifier):
// one tensor `/weights/<name>`, its shape checked and its checksum verified while reading (a
// tensor stored without one is refused); and a sealed file filled by `fill` (in memory), sealed
// and written atomically; errors read "<what> <path>: cannot write (<cause>)".
std::vector<float> read_weight_tensor(const h5::File& f, const std::string& name, const Shape& expected);
void write_sealed_file(const std::string& path, const std::string& what,
                       const std::function<void(hid_t file, const std::string& where)>& fill);

}  // namespace dit
