// The driver of a fuzz harness without libFuzzer (gcc builds, CI): every file of the corpus
// directories given on the command line, then `--mutations N` seeded mutations of each (bit
// flips, truncations, byte runs, splices), through LLVMFuzzerTestOneInput. Fails (exit 1) naming
// the input when one takes longer than --max-seconds (a stall); a crash fails the test by itself.
// Not a fuzzer: it explores nothing beyond the corpus neighbourhood.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_target.h"

namespace {

std::vector<uint8_t> read_all(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void mutate(std::vector<uint8_t>& b, std::mt19937_64& rng) {
  switch (rng() % 4) {
    case 0:
      if (!b.empty()) b[rng() % b.size()] ^= uint8_t(1u << (rng() % 8));
      break;
    case 1:
      b.resize(b.empty() ? 0 : rng() % b.size());
      break;
    case 2: {
      const size_t at = b.empty() ? 0 : rng() % b.size();
      const uint8_t v = uint8_t(rng());
      b.insert(b.begin() + std::ptrdiff_t(at), size_t(1 + rng() % 64), v);
      break;
    }
    default:
      for (int k = 0; k < 8 && !b.empty(); ++k) b[rng() % b.size()] = uint8_t(rng());
  }
}

}  // namespace

int main(int argc, char** argv) {
  int mutations = 0;
  double max_seconds = 2.0;
  std::vector<std::filesystem::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--mutations" && i + 1 < argc) {
      mutations = std::atoi(argv[++i]);
    } else if (a == "--max-seconds" && i + 1 < argc) {
      max_seconds = std::atof(argv[++i]);
    } else if (std::filesystem::is_directory(a)) {
      for (const auto& e : std::filesystem::directory_iterator(a))
        if (e.is_regular_file()) inputs.push_back(e.path());
    } else {
      inputs.push_back(a);
    }
  }
  std::sort(inputs.begin(), inputs.end());
  std::mt19937_64 rng(0x5eed);
  size_t runs = 0;
  for (const std::filesystem::path& p : inputs) {
    const std::vector<uint8_t> original = read_all(p);
    for (int m = -1; m < mutations; ++m) {
      std::vector<uint8_t> b = original;
      if (m >= 0) mutate(b, rng);
      const auto t0 = std::chrono::steady_clock::now();
      LLVMFuzzerTestOneInput(b.data(), b.size());
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ++runs;
      if (s > max_seconds) {
        std::fprintf(stderr, "%s (mutation %d, %zu bytes) took %.2f s, more than %.2f s\n", p.c_str(), m, b.size(),
                     s, max_seconds);
        return 1;
      }
    }
  }
  std::printf("%zu inputs from %zu corpus files ran without a crash or a stall\n", runs, inputs.size());
  return inputs.empty() ? 1 : 0;
}
