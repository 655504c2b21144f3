// TokenDataset: the training tokens, memory-mapped, as one sequence made of shards. A shard is a
// file (or, after slice(), part of one) holding tokens in one of four layouts:
//   llmc_bin  llm.c's .bin shard: 256 int32 header {magic, version, token count, 0...}, then the
//             tokens; magic 20240520 version 1 = uint16 tokens (GPT-2), magic 20240801 version 7
//             = uint32 tokens (LLaMA 3), as karpathy/llm.c dev/data/data_common.py writes them
//   raw_u16 / raw_u32   a bare little-endian array of tokens
//   text      a plain text file with a byte-level vocabulary: each byte is one token (vocab 256)
// The tokens may also be a buffer in memory (from_memory), used in place.
// Not a sampler (window_sampler.h) nor a loader thread (batch_loader.h); not a tokenizer.
// Thread-safety: immutable after open; read() may be called from any thread. Copies are cheap and
// share the mappings, which live as long as any copy.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/status.h"

namespace strata::model {

class MappedFile;

enum class TokenFileKind : uint8_t { llmc_bin, raw_u16, raw_u32, text };

// "bin" (or "llmc"), "u16", "u32", "text"; anything else is invalid_argument listing these.
StatusOr<TokenFileKind> parse_token_file_kind(std::string_view name);
std::string_view token_file_kind_name(TokenFileKind kind);

// The llm.c header constants (header of 256 int32 values).
inline constexpr int32_t kLlmcMagicGpt2 = 20240520;   // version 1, uint16 tokens
inline constexpr int32_t kLlmcMagicLlama3 = 20240801;  // version 7, uint32 tokens
inline constexpr uint64_t kLlmcHeaderBytes = 256 * 4;

struct TokenDatasetOptions {
  TokenFileKind kind = TokenFileKind::llmc_bin;
  // Every token must be < vocab_size; checked once on open (a fast scan of the mapping) and the
  // first offending token is reported with its file and position. 0 = the kind's natural bound
  // (256 for text, no check otherwise).
  uint32_t vocab_size = 0;
};

// "a.bin,b.bin" or "data/fineweb_train_*.bin" or both: a comma-separated list whose items are
// glob patterns when they contain * ? or [ (matches sorted by name, as llm.c's glob). A pattern
// that matches nothing is not_found naming it; an empty spec is invalid_argument.
StatusOr<std::vector<std::string>> expand_token_paths(std::string_view spec);

class TokenDataset {
 public:
  struct Shard {
    std::string path;                         // the file's path, or from_memory's name
    std::shared_ptr<const MappedFile> file;   // null for from_memory (the caller owns the bytes)
    const std::byte* bytes = nullptr;         // the first byte of the whole file or buffer
    const void* tokens = nullptr;  // first token of this shard in the mapping
    uint64_t count = 0;            // tokens in this shard
    uint64_t first_in_file = 0;    // index in the file's token array of tokens[0] (after slice)
    uint8_t token_bytes = 2;       // 1 (text), 2 or 4
  };

  // Opens and validates every path in order; the dataset is their concatenation. Errors
  // (invalid_argument unless noted), each naming the file: empty file; llm.c header too short,
  // bad magic or version, header token count that disagrees with the file size; raw file whose
  // size is not a whole number of tokens; a token >= vocab_size (with its token index and byte
  // offset); plus the errno errors of opening and mapping.
  static StatusOr<TokenDataset> open(const std::vector<std::string>& paths, const TokenDatasetOptions& options);

  // A one-shard dataset over `bytes`, laid out as options.kind (e.g. the built-in corpus as text),
  // validated as open() validates a file; `name` stands for the path in shards() and messages.
  // Lifetime: the bytes are used in place, not copied; they must stay valid and unchanged while
  // this dataset or any copy or slice of it lives (static data, or a buffer that outlives them).
  static StatusOr<TokenDataset> from_memory(std::string_view name, std::span<const std::byte> bytes,
                                            const TokenDatasetOptions& options);

  // The tokens [begin, end) of this dataset as a new dataset sharing the mappings (shards are
  // trimmed; shards outside the range are dropped). out_of_range when end > size() or begin >= end.
  StatusOr<TokenDataset> slice(uint64_t begin, uint64_t end) const;

  // A train/validation split at the last `validation_fraction` of the tokens (0 < f < 1): the
  // first part for training, the tail for validation. The cut is rounded down to a whole token.
  StatusOr<std::pair<TokenDataset, TokenDataset>> split_tail(double validation_fraction) const;

  uint64_t size() const { return total_; }  // tokens
  uint32_t vocab_size() const { return vocab_size_; }  // 0 when unchecked
  TokenFileKind kind() const { return kind_; }
  const std::vector<Shard>& shards() const { return shards_; }
  // Index in the concatenated sequence of shard i's first token.
  uint64_t shard_begin(size_t i) const { return starts_[i]; }

  // Copies tokens [begin, begin + n) of the concatenated sequence into out[0..n) as int32;
  // crosses shard boundaries. Precondition: begin + n <= size().
  void read(uint64_t begin, uint64_t n, int32_t* out) const;
  uint32_t token(uint64_t index) const;

 private:
  TokenDataset() = default;
  // Checks every shard's tokens against the vocabulary and indexes them.
  static StatusOr<TokenDataset> from_shards(std::vector<Shard> shards, const TokenDatasetOptions& options);
  void index_shards();

  std::vector<Shard> shards_;
  std::vector<uint64_t> starts_;  // starts_[i] = sum of counts before shard i
  uint64_t total_ = 0;
  uint32_t vocab_size_ = 0;
  TokenFileKind kind_ = TokenFileKind::llmc_bin;
};

}  // namespace strata::model
