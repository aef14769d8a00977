// `dit_mp report RUN`: one self-contained HTML page of a run folder, to look at after (or while) it
// trains. The run's files are read and checked here (report_data.cpp: every line of metrics.jsonl and
// ranks.jsonl, the trace, the grids) and gathered as one JSON document that the page's own script
// draws from (report_page.cpp: inline SVG, no network); the grids go in as data: URIs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dit {

// A sample grid of the run folder: samples_step_N.png (step N) or samples.png (the end, step -1).
struct ReportGrid {
  std::int64_t step = -1;
  std::string name;  // its file name in the run folder
  std::string png;   // its bytes
};

struct ReportInputs {
  std::string run_dir;
  std::string data;  // the JSON object the page's script reads (report_data.cpp lists its members)
  std::vector<ReportGrid> grids;  // by step, samples.png last
};

// Throws one line unless `run_dir` is a run folder: a folder holding the config.toml a training run
// writes at its start.
void check_report_run(const std::string& run_dir);

// Reads the run folder's files (check_report_run first). A malformed file throws one line naming it
// (and the line, for metrics.jsonl and ranks.jsonl); a file the run did not write (ranks.jsonl
// before monitoring, trace.json without --profile) leaves its part empty.
ReportInputs read_report_inputs(const std::string& run_dir);

// The page: HTML opening with kReportHead (io/file_roles.h), CSS, the data and the script inline.
std::string report_page(const ReportInputs& in);

}  // namespace dit
