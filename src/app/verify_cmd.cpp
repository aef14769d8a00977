// `dit_mp verify`: its flags, checked on every rank, then the golden groups (verify/verify.h).
#include "app/verify_cmd.h"

#include <memory>
#include <sstream>
#include <string>

#include "io/command_files.h"
#include "parallel/world.h"
#include "verify/verify.h"

namespace dit {

std::function<int()> add_verify_command(CLI::App& app) {
  struct Flags {
    VerifyOptions opt;
    std::string groups, schedule = "1f1b", recompute = "none";
    int tp = 1, pp = 1;
  };
  auto f = std::make_shared<Flags>();
  VerifyOptions& v = f->opt;
  CLI::App* cmd = app.add_subcommand(
      "verify", "Check the model against a golden file of float64 numbers from the official DiT, at any layout");
  cmd->add_option("--golden", v.golden, "Golden HDF5 file")->required();
  cmd->add_option("--groups", f->groups,
                  "Comma-separated: forward,schedule,loss,timesteps,adamw,ema,sample,prune,distill,sample_loop (default: all the "
                  "file holds)");
  cmd->add_option("--backend", v.backend, "Compute backend: cpu or cuda")->capture_default_str();
  cmd->add_option("--precision", v.precision, "fp32 (tolerance 1e-4) or bf16/fp16 storage (tolerance 2e-2)")
      ->capture_default_str();
  cmd->add_option("--tp", f->tp, "Tensor-parallel size")->capture_default_str();
  cmd->add_option("--pp", f->pp, "Pipeline stages")->capture_default_str();
  cmd->add_option("--microbatches", v.microbatches, "Microbatches per data-parallel rank")->capture_default_str();
  cmd->add_option("--schedule", f->schedule, "Pipeline schedule: 1f1b, gpipe, zb-h1 or zb-v")->capture_default_str();
  cmd->add_option("--virtual-stages", v.virtual_stages, "Model chunks per pipeline rank (> 1: interleaved 1F1B)")
      ->capture_default_str();
  cmd->add_option("--recompute", f->recompute, "Activation recomputation: none, selective or full")
      ->capture_default_str();
  cmd->add_option("--recompute-blocks", v.stage.recompute_blocks,
                  "Full recomputation for the first K blocks of each stage (0: all)")
      ->capture_default_str();
  cmd->add_flag("--sequence-parallel", v.stage.sequence_parallel,
                "Megatron sequence parallelism (tp > 1 dividing the tokens)");
  return [cmd, f] {
    if (!*cmd) return -1;
    VerifyOptions& opt = f->opt;
    std::stringstream ss(f->groups);
    for (std::string g; std::getline(ss, g, ',');)
      if (!g.empty()) opt.groups.push_back(g);
    Layout layout;
    collective_check([&] {
      opt.schedule = parse_schedule(f->schedule);
      opt.stage.placement = placement_of(opt.schedule);
      opt.stage.recompute = parse_recompute(f->recompute);
      check_single_input("verify", opt.golden);  // a golden file, not weights or a dataset
      layout = layout_for_world(f->tp, f->pp);
      check_verify_inputs(opt, layout);
    });
    return run_verify(opt, layout);
  };
}

}  // namespace dit
