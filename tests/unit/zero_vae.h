// A VAE's safetensors file of all-zero weights in diffusers' naming, for tests that need a VAE the
// shapes alone describe (no config.json beside it): every parameter vae_parameters(cfg) lists, F32.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include "layers/vae.h"

namespace dit::io_test {

inline void write_zero_vae(const std::string& path, const VaeConfig& cfg) {
  std::string header = "{", data;
  for (const VaeParam& p : vae_parameters(cfg)) {
    std::string shape;
    for (std::int64_t d : p.shape) shape += (shape.empty() ? "" : ",") + std::to_string(d);
    const std::size_t begin = data.size();
    data.append(static_cast<std::size_t>(p.numel()) * 4, '\0');
    header += (header.size() > 1 ? "," : "") + std::string("\"") + p.name + "\":{\"dtype\":\"F32\",\"shape\":[" + shape +
              "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(data.size()) + "]}";
  }
  header += "}";
  std::string length(8, '\0');  // the header's length, 8 bytes little-endian
  for (int i = 0; i < 8; ++i) length[std::size_t(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xFF);
  std::ofstream(path, std::ios::binary) << length << header << data;
}

}  // namespace dit::io_test
