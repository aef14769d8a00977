// Golden file reading: config from /config attributes, tensors with shape checks.
#include "io/golden.h"

#include "io/model_config_h5.h"

namespace dit {

GoldenFile::GoldenFile(const std::string& path)
    : file_(h5::File::open_read(path)),
      cfg_(h5::read_model_config(file_, h5::LaterFields::Defaulted, "not a golden file?")) {}

std::vector<double> GoldenFile::read(const std::string& dataset, const Shape& expected) const {
  return file_.read(dataset, expected).values;
}

std::vector<float> GoldenFile::read_f32(const std::string& dataset, const Shape& expected) const {
  auto d = read(dataset, expected);
  return std::vector<float>(d.begin(), d.end());
}

std::vector<std::int32_t> GoldenFile::read_labels(const std::string& dataset, std::int64_t n) const {
  const Shape s = file_.shape(dataset);
  DIT_CHECK(s == Shape({n}), path(), ": dataset '", dataset, "' has shape ", s.str(),
            ", expected (", n, ")");
  std::vector<std::int32_t> out;
  for (std::int64_t v : file_.read_ints(dataset)) {
    DIT_CHECK(v >= 0 && v <= cfg_.num_classes, path(), ": label ", v, " in '", dataset,
              "' is outside [0, ", cfg_.num_classes, "] (", cfg_.num_classes, " = null label)");
    out.push_back(static_cast<std::int32_t>(v));
  }
  return out;
}

void GoldenFile::load_params(ParamSet& ps, const std::string& group) const {
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const ParamSpec& s = ps.specs()[i];
    ps.set_global(static_cast<int>(i), read_f32(group + "/" + s.name, s.global));
  }
}

}  // namespace dit
