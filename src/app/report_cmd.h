// `dit_mp report RUN [--out FILE]`: one self-contained HTML page of a run folder (run/report.h).
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace dit {

// Registers `report` on `app`; returns what runs it once the command line is parsed.
std::function<int()> add_report_command(CLI::App& app);

}  // namespace dit
