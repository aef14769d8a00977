// Every subcommand's files by role, declared once (io/file_roles.h): the table `dit_mp help files`
// prints (tests/cli/file_roles.sh tries every output against every input from it), and the one
// check a command runs before it reads or creates anything, once its binder (in the subcommand's
// file) has given each declaration its path from the command's options.
#pragma once

#include <functional>
#include <string>
#include <vector>

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

// Whether the run folder's outputs may replace it whole (--overwrite of a run dit_mp wrote).
enum class RunFolderUse { Kept, Replaced };
// Whether --overwrite was given: a PNG output may then replace a picture dit_mp did not write
// (without it, only a grid dit_mp wrote is replaced).
enum class ForeignPicture { Refused, Replaced };

// Binds `command`'s declarations with `path_of` (a declaration's path from the command's options,
// "" for none) and runs the one check; throws one line naming both roles or the file and its kind.
void check_command_files(const char* command, const std::function<std::string(const FileDecl&)>& path_of,
                         RunFolderUse run_folder = RunFolderUse::Kept,
                         ForeignPicture pictures = ForeignPicture::Refused);
// Whether `d` is the declaration of `option` (derived by `derive`, "" for the option's own path).
bool declares(const FileDecl& d, const char* option, const char* derive = "");

// The check of a command with one input and no output (verify, inspect).
void check_single_input(const std::string& command, const std::string& path);

}  // namespace dit
