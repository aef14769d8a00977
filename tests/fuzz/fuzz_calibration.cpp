// Fuzz target: the calibration file of `plan --predict --calibration` (nesting guard, toml11 parse,
// the [predict] field table and its ranges), then the prediction it feeds for one fixed plan (the
// demo config at tp 2 pp 2 dp 2): a calibration the reader accepts must give a finite step time.
#include <cmath>

#include "core/error.h"
#include "fuzz_target.h"
#include "io/config.h"
#include "plan/predict.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const dit::RunConfig cfg = dit::RunConfig::demo();
  static const dit::LayoutPlan plan = dit::plan_config(cfg, {2, 2, 2});
  const std::string text(reinterpret_cast<const char*>(data), size);
  dit::PredictParams p;
  try {
    p = dit::predict_params_from_toml(text, "fuzz_calibration.toml");
  } catch (const dit::Error&) {
    return 0;
  }
  const dit::Prediction r = dit::predict_step(plan, p, cfg.train.global_batch, cfg.parallel.schedule);
  if (!std::isfinite(r.step_s) || !(r.step_s > 0) || !std::isfinite(r.images_per_s)) __builtin_trap();
  dit::prediction_json(r, p);
  return 0;
}
