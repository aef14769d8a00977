// `dit_mp report` (see report_cmd.h): the files' check (the run folder's files are inputs, the page
// the one output, <run>/report.html by default), then rank 0 reads the folder and writes the page
// atomically.
#include "app/report_cmd.h"

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "io/atomic_file.h"
#include "io/command_files.h"
#include "parallel/world.h"
#include "run/report.h"

namespace dit {

namespace fs = std::filesystem;

std::function<int()> add_report_command(CLI::App& app) {
  struct Flags {
    std::string run, out;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand(
      "report", "One self-contained HTML page of a run folder: loss (raw and smoothed), throughput and MFU, each "
                "rank's step split and memory, the sample grids, the evaluations, the layout and the timeline; it "
                "opens in any browser without a network");
  cmd->add_option("run", f->run, "The run folder (a training run's run.dir)")->required();
  cmd->add_option("--out", f->out, "The page to write (default: <run>/report.html)");
  return [cmd, f] {
    if (!*cmd) return -1;
    collective_check([&] {
      if (world_rank() != 0) return;
      check_command_files("report", [&](const FileDecl& d) -> std::string {
        if (d.role == FileRole::Output) return declares(d, "--out") ? f->out : f->out.empty() ? f->run : "";
        // An empty metrics.jsonl is a run before its first logged step: no rows, not a damaged file.
        const std::string path = derived_path(d, f->run);
        return declares(d, "@run", "dir:metrics.jsonl") && detect_kind(path) == FileKind::Empty ? "" : f->run;
      });
      check_report_run(f->run);
      const std::string out = f->out.empty() ? (fs::path(f->run) / "report.html").string() : f->out;
      write_file_atomic(out, report_page(read_report_inputs(f->run)), "report");
      std::printf("report: %s\n", out.c_str());
    });
    return 0;
  };
}

}  // namespace dit
