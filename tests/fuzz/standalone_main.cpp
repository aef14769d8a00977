// A deterministic driver for the fuzz targets where libFuzzer is not available (GCC builds, CI):
// runs every file of the given corpus folders, then -runs=N mutants of them (bit flips, byte
// sets, interesting values, inserts, deletes, splices of two inputs) from a fixed -seed=S, so a
// run is reproducible. Before each input runs it is written to ./fuzz-current-<target>; a crash
// leaves that file behind, ready to become a regression input under tests/data/fuzz/<target>/.
// Usage: fuzz_X [-runs=N] [-seed=S] [-max_len=B] DIR_OR_FILE...
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "fuzz_target.h"

namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

Bytes read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

void mutate(Bytes& b, const std::vector<Bytes>& corpus, std::mt19937_64& rng, std::size_t max_len) {
  auto pick = [&](std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(rng() % n); };
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 6) {
      case 0:  // flip one bit
        if (!b.empty()) b[pick(b.size())] ^= static_cast<std::uint8_t>(1u << (rng() % 8));
        break;
      case 1:  // set a byte
        if (!b.empty()) b[pick(b.size())] = static_cast<std::uint8_t>(rng());
        break;
      case 2: {  // an interesting value over 1, 2, 4 or 8 bytes
        static const std::uint64_t values[] = {0, 1, 0x7f, 0x80, 0xff, 0x7fff, 0xffff, 0x7fffffff,
                                               0xffffffff, 0x7fffffffffffffffull, ~0ull};
        const std::size_t w = std::size_t{1} << (rng() % 4);
        if (b.size() >= w) {
          const std::uint64_t v = values[pick(std::size(values))];
          std::memcpy(b.data() + pick(b.size() - w + 1), &v, w);
        }
        break;
      }
      case 3:  // insert a few bytes
        if (b.size() < max_len) {
          const std::size_t at = pick(b.size() + 1), n = 1 + pick(8);
          for (std::size_t i = 0; i < n; ++i) b.insert(b.begin() + std::ptrdiff_t(at), static_cast<std::uint8_t>(rng()));
        }
        break;
      case 4:  // delete a range
        if (!b.empty()) {
          const std::size_t at = pick(b.size()), n = 1 + pick(std::min<std::size_t>(16, b.size() - at));
          b.erase(b.begin() + std::ptrdiff_t(at), b.begin() + std::ptrdiff_t(std::min(b.size(), at + n)));
        }
        break;
      default: {  // splice: the head of this input, the tail of another
        const Bytes& o = corpus[pick(corpus.size())];
        if (!o.empty()) {
          const std::size_t cut = pick(b.size() + 1), from = pick(o.size());
          b.resize(cut);
          b.insert(b.end(), o.begin() + std::ptrdiff_t(from), o.end());
        }
      }
    }
  }
  if (b.size() > max_len) b.resize(max_len);
}

}  // namespace

int main(int argc, char** argv) {
  long long runs = 0;
  std::uint64_t seed = 1;
  std::size_t max_len = 1 << 20;
  std::vector<Bytes> corpus;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("-runs=", 0) == 0) runs = std::atoll(a.c_str() + 6);
    else if (a.rfind("-seed=", 0) == 0) seed = std::strtoull(a.c_str() + 6, nullptr, 10);
    else if (a.rfind("-max_len=", 0) == 0) max_len = std::strtoull(a.c_str() + 9, nullptr, 10);
    else if (a.rfind("-", 0) == 0) std::fprintf(stderr, "standalone fuzz driver: ignoring %s\n", a.c_str());
    else if (fs::is_directory(a)) {
      std::vector<fs::path> files;
      for (const auto& e : fs::directory_iterator(a))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());  // deterministic order
      for (const auto& f : files) corpus.push_back(read_all(f));
    } else {
      corpus.push_back(read_all(a));
    }
  }
  if (corpus.empty()) corpus.push_back({});
  const std::string target = fs::path(argv[0]).filename().string();
  const std::string current = "fuzz-current-" + target;
  auto run = [&](const Bytes& b) {
    std::ofstream(current, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
    LLVMFuzzerTestOneInput(b.data(), b.size());
  };
  for (const Bytes& b : corpus) run(b);
  std::mt19937_64 rng(seed);
  for (long long r = 0; r < runs; ++r) {
    Bytes b = corpus[static_cast<std::size_t>(rng() % corpus.size())];
    mutate(b, corpus, rng, max_len);
    run(b);
  }
  std::remove(current.c_str());
  std::printf("%s: %zu corpus inputs and %lld mutants from seed %llu: no crash\n", target.c_str(), corpus.size(),
              runs, static_cast<unsigned long long>(seed));
  return 0;
}
