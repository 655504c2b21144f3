// SplitMix64 (Steele, Lea and Flood, 2014): a tiny 64-bit generator whose sequence for a seed is the
// same on every platform and standard library (unlike <random>'s distributions), for seeded weight
// initialisation and synthetic data. Not for cryptography. Thread-safety: one owner at a time.
#pragma once

#include <cstdint>

namespace strata {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

}  // namespace strata
