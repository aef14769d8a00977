// `dit_mp prepare-data` (an HDF5 dataset from Fashion-MNIST, an image folder or latents) and
// `dit_mp inspect` (a checkpoint's tensors, layout and step, its checksums verified).
#pragma once

#include <functional>

#include <CLI/CLI.hpp>

namespace dit {

std::function<int()> add_prepare_data_command(CLI::App& app);
std::function<int()> add_inspect_command(CLI::App& app);

}  // namespace dit
