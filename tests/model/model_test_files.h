// Test helpers for tests/model: a temporary directory removed at the end of the test, writing
// bytes or an llm.c token shard into it, and unwrapping a StatusOr expected to be ok. Not used outside tests.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/status.h"

namespace strata::model::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "strata-model-XXXXXX").string();
    path_ = mkdtemp(pattern.data()) != nullptr ? pattern : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The value of a StatusOr that the test expects to be ok (records a failure otherwise).
template <typename T>
T expect_value(StatusOr<T> result) {
  EXPECT_TRUE(result.is_ok()) << result.status().to_string();
  return std::move(result).value();
}

inline void write_bytes(const std::string& path, const void* data, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}

inline void write_text(const std::string& path, const std::string& text) { write_bytes(path, text.data(), text.size()); }

// An llm.c shard: 256 int32 header {magic, version, count}, then the tokens of type T.
template <typename T>
void write_llmc_shard(const std::string& path, const std::vector<T>& tokens, int32_t magic, int32_t version,
                      int32_t header_count) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = header_count;
  std::vector<char> bytes(header.size() * 4 + tokens.size() * sizeof(T));
  std::memcpy(bytes.data(), header.data(), header.size() * 4);
  if (!tokens.empty()) std::memcpy(bytes.data() + header.size() * 4, tokens.data(), tokens.size() * sizeof(T));
  write_bytes(path, bytes.data(), bytes.size());
}

inline void write_gpt2_shard(const std::string& path, const std::vector<uint16_t>& tokens) {
  write_llmc_shard(path, tokens, 20240520, 1, static_cast<int32_t>(tokens.size()));
}

}  // namespace strata::model::testing
