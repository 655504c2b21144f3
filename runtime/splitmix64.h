// SplitMix64 (Steele, Lea and Flood, 2014): a tiny 64-bit generator whose sequence for a seed is the
// same on every platform and standard library (unlike <random>'s distributions), for seeded weight
// initialisation and synthetic data. Not for cryptography. Thread-safety: one owner at a time.
// Counter based: output k depends only on seed + (k + 1) * gamma, so discard() jumps ahead in O(1)
// and a long stream can be split into ranges generated in parallel, bit-identical to one loop.
#pragma once

#include <cstdint>

namespace strata {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += kGamma);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Skips n outputs, as n calls of next() would (the state wraps mod 2^64 exactly as theirs does).
  void discard(uint64_t n) { state_ += n * kGamma; }

 private:
  static constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;  // the golden-ratio increment
  uint64_t state_;
};

}  // namespace strata
