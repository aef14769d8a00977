// Weights files (see weights.h).
#include "io/weights.h"

#include <cmath>

#include "diffusion/noise_schedule.h"
#include "io/atomic_file.h"
#include "io/golden.h"
#include "io/sealed_h5.h"
#include "io/h5.h"
#include "io/model_config_h5.h"
#include "layers/dit_stage.h"

namespace dit {

namespace {
bool has_fletcher32(hid_t dataset) {
  h5::Handle dcpl(H5Dget_create_plist(dataset), H5Pclose);
  const int n = dcpl ? H5Pget_nfilters(dcpl.get()) : 0;
  for (int i = 0; i < n; ++i) {
    unsigned flags = 0, config = 0;
    std::size_t nvals = 0;
    if (H5Pget_filter2(dcpl.get(), static_cast<unsigned>(i), &flags, &nvals, nullptr, 0, nullptr, &config) ==
        H5Z_FILTER_FLETCHER32)
      return true;
  }
  return false;
}

}  // namespace

std::vector<float> read_weight_tensor(const h5::File& f, const std::string& name, const Shape& expected) {
  const std::string ds = "/weights/" + name;
  DIT_CHECK(f.exists(ds), f.path(), ": tensor '", name, "' is missing (a weights file holds /weights/<name>)");
  const Shape s = f.shape(ds);
  DIT_CHECK(s == expected, f.path(), ": tensor '", name, "' has shape ", s.str(), ", expected ", expected.str());
  h5::Handle d(H5Dopen2(f.id(), ds.c_str(), H5P_DEFAULT), H5Dclose);
  DIT_CHECK(bool(d), f.path(), ": cannot open tensor '", name, "' (", h5::error_text(), ")");
  DIT_CHECK(has_fletcher32(d.get()), f.path(), ": tensor '", name,
            "' has no checksum, so it cannot be verified; add Fletcher32 checksums with "
            "h5repack -f FLET IN OUT, then tools/dit_checkpoint.py seal OUT");
  std::vector<float> values(static_cast<std::size_t>(s.numel()));
  if (H5Dread(d.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0)
    DIT_FAIL(f.path(), ": tensor '", name, "' fails its checksum (", h5::error_text(),
             "): the weights file is damaged");
  return values;
}

void write_sealed_file(const std::string& path, const std::string& what,
                       const std::function<void(hid_t file, const std::string& where)>& fill) {
  check_writable_target(path, what);  // a folder or a missing folder is refused before the work
  // Built in memory, sealed, then written by the atomic writer: HDF5 never meets the disk, so a full
  // disk fails in one place, with its errno, and leaves no HDF5 handle open.
  std::string bytes = h5::build_in_memory(path, {h5::Format::V110, h5::kSealBytes},
                                          [&](hid_t file) { fill(file, path); });
  h5::seal_image(bytes, path);
  write_file_atomic(path, bytes, what);
}

namespace {
// The weights file's groups and tensors; throws on the first failure.
void fill_weights_file(hid_t file, const std::string& where, const DiTConfig& cfg,
                       const std::map<std::string, std::vector<float>>& tensors, int diffusion_steps,
                       diffusion::Objective objective, const WeightsProvenance& provenance) {
  {
    const h5::Handle c = h5::write_model_config(file, cfg, where);
    h5::write_attr_ints(c.get(), "diffusion_steps", {diffusion_steps}, h5::AttrShape::Scalar, where);
    // Only flow models carry it: a DDPM weights file stays what it was (absent = ddpm).
    if (objective != diffusion::Objective::Ddpm)
      h5::write_attr_string(c.get(), "objective", name_of(diffusion::kObjectiveNames, objective), where);
    if (!provenance.empty()) {
      DIT_CHECK(int(provenance.kept_layers.size()) == cfg.depth, where, ": provenance of ",
                provenance.kept_layers.size(), " kept layers for a model of depth ", cfg.depth);
      h5::write_attr_ints(c.get(), "kept_layers", {provenance.kept_layers.begin(), provenance.kept_layers.end()},
                          h5::AttrShape::List, where);
      h5::write_attr_ints(c.get(), "teacher_depth", {provenance.teacher_depth}, h5::AttrShape::Scalar, where);
      h5::write_attr_string(c.get(), "pruned_by", provenance.pruned_by, where);
    }
    const h5::Handle w = h5::create_group(file, "/weights", where);
    std::map<std::string, Shape> shapes;
    for (const ParamSpec& s : DiTStage::declare(cfg, StageLayout::whole(cfg))) shapes[s.name] = s.global;
    for (const auto& [name, values] : tensors)  // chunked, with Fletcher32 checksums
      h5::write_tensor(w.get(), name, shapes.at(name), values.data(), where);
  }
}
}  // namespace

void save_weights(const std::string& path, const DiTConfig& cfg,
                  const std::map<std::string, std::vector<float>>& tensors, int diffusion_steps,
                  diffusion::Objective objective, const WeightsProvenance& provenance) {
  write_sealed_file(path, "weights", [&](hid_t file, const std::string& where) {
    fill_weights_file(file, where, cfg, tensors, diffusion_steps, objective, provenance);
  });
}

// Weights files are sealed (sealed_h5.h): checked whole before HDF5 parses them.
void verify_weights_seal(const std::string& path) {
  h5::verify_seal(path, "re-import it with tools/dit_checkpoint.py import, or seal it with "
                        "tools/dit_checkpoint.py seal FILE");
}

DiTConfig read_weights_config(const std::string& path) {
  verify_weights_seal(path);
  return GoldenFile(path).config();
}

int read_weights_diffusion_steps(const std::string& path) {
  verify_weights_seal(path);
  const h5::File f = h5::File::open_read(path);
  if (!f.has_attr("/config", "diffusion_steps")) return 1000;
  const std::int64_t n = f.attr_int("/config", "diffusion_steps");
  DIT_CHECK(n >= 1 && n <= diffusion::kMaxDiffusionSteps, path, ": /config diffusion_steps = ", n,
            ": expected an integer in [1, ", diffusion::kMaxDiffusionSteps, "]");
  return static_cast<int>(n);
}

diffusion::Objective read_weights_objective(const std::string& path) {
  verify_weights_seal(path);
  const h5::File f = h5::File::open_read(path);
  if (!f.has_attr("/config", "objective")) return diffusion::Objective::Ddpm;
  const std::string name = f.attr_string("/config", "objective");
  const auto o = value_of(diffusion::kObjectiveNames, name);
  DIT_CHECK(o.has_value(), path, ": /config objective = \"", name, "\": expected one of ",
            names_of(diffusion::kObjectiveNames));
  return *o;
}

WeightsProvenance read_weights_provenance(const std::string& path) {
  const DiTConfig cfg = read_weights_config(path);  // sealed
  const h5::File f = h5::File::open_read(path);
  WeightsProvenance p;
  if (!f.has_attr("/config", "kept_layers")) return p;
  const std::string c = "/config";
  const std::int64_t teacher = h5::read_attr_int(f, c, "teacher_depth");
  DIT_CHECK(teacher > cfg.depth && teacher < (std::int64_t(1) << 31), path, ": /config teacher_depth = ", teacher,
            ": expected more than the model's depth ", cfg.depth);
  p.teacher_depth = static_cast<int>(teacher);
  for (const std::int64_t k : h5::read_attr_ints(f, c, "kept_layers", static_cast<std::size_t>(cfg.depth))) {
    DIT_CHECK(k >= 0 && k < teacher && (p.kept_layers.empty() || k > p.kept_layers.back()), path,
              ": /config kept_layers holds ", k, ": expected ascending teacher blocks in [0, ", teacher, ")");
    p.kept_layers.push_back(static_cast<int>(k));
  }
  p.pruned_by = f.has_attr(c, "pruned_by") ? f.attr_string(c, "pruned_by") : "";
  return p;
}

std::vector<int> read_kept_layers(const std::string& path) { return read_weights_provenance(path).kept_layers; }

// "[3, 5]": the index of flat element `i` of a tensor of shape `s`.
std::string index_text(const Shape& s, std::int64_t i) {
  std::string out;
  for (int d = s.rank - 1; d >= 0; --d) {
    out = std::to_string(i % s.dims[d]) + (out.empty() ? "" : ", ") + out;
    i /= s.dims[d];
  }
  return "[" + out + "]";
}

void load_weights(const std::string& path, ParamSet& ps) {
  h5::silence_errors();
  static_cast<void>(read_weights_config(path));  // sealed, and a config that can be built
  const h5::File file = h5::File::open_read(path);
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const ParamSpec& s = ps.specs()[i];
    const std::vector<float> values = read_weight_tensor(file, s.name, s.global);
    // A non-finite weight would surface much later as a NaN image or loss; name it here.
    for (std::size_t k = 0; k < values.size(); ++k)
      DIT_CHECK(std::isfinite(values[k]), path, ": tensor '", s.name, "' holds ", std::isnan(values[k]) ? "NaN" : "Inf", " at ",
                index_text(s.global, std::int64_t(k)), ": the weights file is damaged or from a diverged run");
    ps.set_global(static_cast<int>(i), values);
  }
}

}  // namespace dit
