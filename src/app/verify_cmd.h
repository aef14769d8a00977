// `dit_mp verify`: checks the model against a golden file at any layout (verify/verify.h runs it).
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace dit {

// Registers `verify` on `app`; returns what runs it once the command line is parsed.
std::function<int()> add_verify_command(CLI::App& app);

}  // namespace dit
