// Every subcommand's files by role, declared once (io/file_roles.h): the table `dit_mp help files`
// prints (tests/cli/file_roles.sh tries every output against every input from it), and the
// binders that give each declaration its path from a command's options and run one check before
// the command reads or creates anything.
#pragma once

#include <string>
#include <vector>

#include "app/evaluate_cmd.h"
#include "app/prune_cmd.h"
#include "app/sample_cmd.h"
#include "eval/quality.h"
#include "io/config.h"
#include "io/file_roles.h"

namespace dit {

// `dit_mp help check-files` (the table test's many tries in one process): with this on, each
// command's check, once passed, throws an Error whose message starts with kFilesPassed instead of
// going on to run the command.
inline constexpr const char* kFilesPassed = "files: passed";
void set_files_check_only(bool on);

// The declarations of every subcommand, in the order `dit_mp help` lists them.
const std::vector<CommandFiles>& command_files();
// One subcommand's declarations (throws for an unknown name).
const std::vector<FileDecl>& files_of(const std::string& command);

// The checks, one per subcommand; each throws one line naming both roles or the file and its kind.
void check_train_files(const RunConfig& cfg, const std::string& config);  // config: --config, or ""
void check_sample_files(const SampleOptions& opt);
void check_evaluate_files(const EvaluateOptions& opt, const EvalPaths& defaults);
void check_prune_files(const PruneOptions& opt);
void check_plan_files(const std::string& config, const std::string& calibration, const std::string& json);
void check_prepare_files(const std::string& src, const std::string& features, const std::string& labels,
                         const std::string& out);
void check_single_input(const std::string& command, const std::string& path);  // verify, inspect

}  // namespace dit
