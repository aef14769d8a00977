// The layout search for a training job, its choice and its refusals (see auto_layout.h).
#include "plan/auto_layout.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "core/quote.h"
#include "core/resources.h"
#include "engine/train_setup.h"

namespace dit {

namespace {

constexpr double kGiB = double(1u << 30);

std::string gib_text(double bytes) {
  char b[48];
  std::snprintf(b, sizeof b, "%.4g GiB", bytes / kGiB);
  return b;
}

// "tp 2, pp 1, dp 2, micro-batch 4, recompute none, 1f1b": one row as words.
std::string describe(const LayoutPlan& p) {
  std::ostringstream os;
  os << "tp " << p.layout.tp << ", pp " << p.layout.pp << ", dp " << p.layout.dp << ", micro-batch "
     << p.micro_batch << ", recompute " << recompute_name(p.recompute)
     << (p.sequence_parallel ? ", sequence parallel" : "") << ", " << schedule_name(p.schedule)
     << (p.virtual_stages > 1 ? " over " + std::to_string(p.virtual_stages) + " virtual stages" : "")
     << (p.layout.dp > 1 ? ", ZeRO-" + std::to_string(p.zero) : "") << (p.offload ? ", optimizer offloaded" : "");
  return os.str();
}

// The constraints as the flags that set them, for messages ("" when none).
std::string constraint_text(const FitConstraints& f) {
  std::string out;
  auto add = [&](const std::string& s) { out += (out.empty() ? "" : " ") + s; };
  if (f.tp) add("--tp " + std::to_string(*f.tp));
  if (f.pp) add("--pp " + std::to_string(*f.pp));
  if (f.micro_batch) add("--micro-batch " + std::to_string(*f.micro_batch));
  if (f.recompute) add("--recompute " + recompute_name(*f.recompute));
  if (f.sequence_parallel) add(*f.sequence_parallel ? "--sequence-parallel" : "parallel.sequence_parallel=false");
  if (f.schedule) add("--schedule " + schedule_name(*f.schedule));
  if (f.virtual_stages) add("--virtual-stages " + std::to_string(*f.virtual_stages));
  if (f.zero) add("--zero " + std::to_string(*f.zero));
  if (f.offload) add(std::string("optim.offload=") + (*f.offload ? "\"cpu\"" : "\"none\""));
  return out;
}

// Refuses a world size no layout divides, naming the world sizes (up to 64) some layout does.
void check_some_layout_divides(const FitRequest& req) {
  FitRequest probe = req;
  std::vector<std::string> worlds;
  for (int w = 1; w <= 64 && worlds.size() < 8; ++w) {
    probe.gpus = w;
    if (!fit_grids(probe).empty()) worlds.push_back(std::to_string(w));
  }
  const DiTConfig& m = req.cfg.model.dit;
  const std::string fixed = constraint_text(req.fixed);
  std::string list;
  for (std::size_t i = 0; i < worlds.size(); ++i)
    list += (i == 0 ? "" : i + 1 == worlds.size() ? " or " : ", ") + worlds[i];
  DIT_FAIL("parallel.layout = \"auto\": no layout divides the job's ", req.gpus, " ranks (tp must divide ",
           "model.num_heads = ", m.num_heads, " within a node of ", req.hw.gpus_per_node, ", pp at most model.depth = ",
           m.depth, ", dp must divide train.global_batch = ", req.cfg.train.global_batch,
           fixed.empty() ? "" : ", and " + fixed + " as given", "); ",
           worlds.empty() ? std::string("no world size up to 64 has one") : "run with " + list + " ranks");
}

}  // namespace

FitRequest auto_fit_request(const AutoLayoutRequest& r, std::string* source) {
  const ParallelSection& p = r.cfg.parallel;
  const bool cuda = r.cfg.train.backend == BackendKind::Cuda;
  FitRequest req;
  req.cfg = r.cfg;
  req.gpus = r.world;
  try {
    req.hw = find_hardware(!p.hardware.empty() ? p.hardware : cuda ? "h100" : "cpu");
  } catch (const Error&) {
    std::string names;
    for (const Hardware& h : hardware_table()) names += (names.empty() ? "" : ", ") + h.name;
    DIT_FAIL("parallel.hardware = ", quote_string(p.hardware), " (--hardware): expected one of ", names,
             " (or leave it out: the memory from --memory-gib or the device)");
  }
  req.margin = p.memory_margin;
  req.precisions = {r.cfg.train.precision};
  req.fixed = r.fixed;
  std::string from;
  if (p.memory_gib > 0) {
    req.hw.memory_gib = p.memory_gib;
    from = "parallel.memory_gib = " + gib_text(p.memory_gib * kGiB);
  } else if (!p.hardware.empty()) {
    from = "parallel.hardware = " + quote_string(p.hardware);
  } else if (cuda) {
    DIT_CHECK(r.device_free_bytes > 0, "parallel.layout = \"auto\" on train.backend = cuda: the device's free memory "
                                       "is not known; give --memory-gib N or --hardware NAME");
    req.hw.memory_gib = r.device_free_bytes / kGiB;
    from = "the least free memory of the ranks' devices at start";
  } else {
    const HostMemory host = host_memory();
    DIT_CHECK(host.limit > 0, "parallel.layout = \"auto\": this machine's memory is not known; give --memory-gib N "
                              "or --hardware NAME");
    req.hw.memory_gib = host.limit / kGiB / std::max(1, r.ranks_per_node);
    from = std::string("the ") + host.source + "'s memory limit shared by " + std::to_string(r.ranks_per_node) +
           " rank(s)";
  }
  search_sharding(req, cuda);
  if (source) *source = from;
  return req;
}

AutoLayoutChoice choose_layout(const AutoLayoutRequest& r) {
  AutoLayoutChoice c;
  c.req = auto_fit_request(r, &c.source);
  if (fit_grids(c.req).empty()) check_some_layout_divides(c.req);
  c.search = fit_search(c.req);
  if (c.search.candidates == 0) check_some_layout_divides(c.req);
  if (!c.search.rows.empty()) return c;
  const std::string fixed = constraint_text(r.fixed);
  const FitRow& s = *c.search.smallest;
  const double need = double(s.plan.peak_bytes()) / (1 - c.req.margin);
  DIT_FAIL("parallel.layout = \"auto\": no layout of ", r.world, " ranks", fixed.empty() ? "" : " with " + fixed,
           " fits ", gib_text(c.req.hw.memory_gib * kGiB), " per rank (", c.source, ", keeping ",
           int(100 * c.req.margin + 0.5), "% free: ", format_bytes(c.req.budget_bytes()),
           "): the smallest peak found is ", format_bytes(double(s.plan.peak_bytes())), " (", describe(s.plan),
           "; ", c.search.candidates, " layouts planned); give at least ", gib_text(need),
           " per rank (--memory-gib), more ranks, or a smaller model or global batch");
}

void apply_layout(RunConfig& cfg, const LayoutPlan& p) {
  cfg.parallel.tp = p.layout.tp;
  cfg.parallel.pp = p.layout.pp;
  cfg.parallel.sequence_parallel = p.sequence_parallel;
  cfg.parallel.schedule = p.schedule;
  cfg.parallel.virtual_stages = p.virtual_stages;
  cfg.parallel.pp_layers.clear();
  cfg.train.micro_batch = p.micro_batch;
  cfg.train.recompute = p.recompute;
  cfg.train.recompute_blocks = 0;
  cfg.optim.zero = p.zero;
  cfg.optim.offload = p.offload ? "cpu" : "none";
  cfg.validate_layout();
}

bool recorded_layout_fits(const RunConfig& recorded, const AutoLayoutRequest& r, std::string* why) {
  const ParallelSection& p = recorded.parallel;
  const FitConstraints& f = r.fixed;
  auto no = [&](const std::string& text) {
    if (why) *why = text;
    return false;
  };
  if ((f.tp && *f.tp != p.tp) || (f.pp && *f.pp != p.pp) || (f.micro_batch && *f.micro_batch != recorded.train.micro_batch) ||
      (f.recompute && *f.recompute != recorded.train.recompute) ||
      (f.sequence_parallel && *f.sequence_parallel != p.sequence_parallel) || (f.schedule && *f.schedule != p.schedule) ||
      (f.virtual_stages && *f.virtual_stages != p.virtual_stages) ||
      (f.zero && *f.zero != recorded.optim.zero) || (f.offload && *f.offload != (recorded.optim.offload == "cpu")))
    return no("the flags given (" + constraint_text(f) + ") exclude it");
  if (r.world % (p.tp * p.pp) != 0)
    return no("tp x pp = " + std::to_string(p.tp * p.pp) + " does not divide the job's " + std::to_string(r.world) +
              " ranks");
  RunConfig cfg = r.cfg;
  cfg.parallel.tp = p.tp;
  cfg.parallel.pp = p.pp;
  cfg.parallel.sequence_parallel = p.sequence_parallel;
  cfg.parallel.schedule = p.schedule;
  cfg.parallel.virtual_stages = p.virtual_stages;
  cfg.parallel.pp_layers = p.pp_layers;
  cfg.train.micro_batch = recorded.train.micro_batch;
  cfg.train.recompute = recorded.train.recompute;
  cfg.train.recompute_blocks = recorded.train.recompute_blocks;
  cfg.optim.zero = recorded.optim.zero;
  cfg.optim.offload = recorded.optim.offload;
  const Layout l{p.tp, p.pp, r.world / (p.tp * p.pp)};
  try {
    cfg.validate_layout();
    const FitRequest req = auto_fit_request(r, nullptr);
    const LayoutPlan plan = plan_layout(TrainSetup::make(cfg, l), plan_device(cfg));
    if (double(plan.peak_bytes()) > req.budget_bytes())
      return no("its planned peak " + format_bytes(double(plan.peak_bytes())) + " exceeds " +
                format_bytes(req.budget_bytes()) + " per rank");
  } catch (const Error& e) {
    return no(e.what());
  }
  return true;
}

std::string format_choice(const AutoLayoutChoice& c) {
  std::ostringstream os;
  const FitRow& best = c.search.rows[0];
  os << "layout auto: " << c.search.rows.size() << " of " << c.search.candidates << " layouts of " << c.req.gpus
     << " ranks fit " << gib_text(c.req.hw.memory_gib * kGiB) << " per rank (" << c.source << ", keeping "
     << int(100 * c.req.margin + 0.5) << "% free; time model of " << c.req.hw.name << "); training on the first: "
     << describe(best.plan) << ", planned peak " << format_bytes(double(best.plan.peak_bytes())) << ", predicted step "
     << best.time.step_s * 1e3 << " ms (a ranking aid, not a measurement)\n"
     << format_fit_rows(c.search.rows, 0, 3);
  return os.str();
}

}  // namespace dit
