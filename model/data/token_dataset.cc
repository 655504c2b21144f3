// TokenDataset: opening, validating (header, size, vocabulary scan) and reading memory-mapped
// token shards. The vocabulary scan takes the max of 64 Ki-token blocks in a tight loop the
// compiler vectorises, and only walks a block token by token when its max is out of range.
#include "model/data/token_dataset.h"

#include <glob.h>

#include <algorithm>
#include <cstring>

#include "model/hf/mapped_file.h"

namespace strata::model {
namespace {

bool has_glob_chars(std::string_view s) { return s.find_first_of("*?[") != std::string_view::npos; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

Status glob_into(const std::string& pattern, std::vector<std::string>& out) {
  glob_t g{};
  int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  if (rc == GLOB_NOMATCH || (rc == 0 && g.gl_pathc == 0)) {
    globfree(&g);
    return error(Code::not_found, "no token files match '{}'; check the path and pattern", pattern);
  }
  if (rc != 0) {
    globfree(&g);
    return error(Code::io_error, "glob '{}' failed (glob error {})", pattern, rc);
  }
  for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  globfree(&g);
  return Status::ok();
}

// Token i of type T at `tokens`, which need not be aligned to sizeof(T): token data sits at a
// header offset in a file, or anywhere in a caller's buffer (memcpy compiles to one plain load).
template <typename T>
T token_at(const void* tokens, uint64_t i) {
  T v;
  std::memcpy(&v, static_cast<const unsigned char*>(tokens) + i * sizeof(T), sizeof(T));
  return v;
}

// Position of the first token >= limit in tokens[0..n), or n when there is none.
template <typename T>
uint64_t first_token_at_or_above(const void* tokens, uint64_t n, uint64_t limit) {
  constexpr uint64_t kBlock = 64 * 1024;
  for (uint64_t begin = 0; begin < n; begin += kBlock) {
    const uint64_t end = std::min(n, begin + kBlock);
    T block_max = 0;
    for (uint64_t i = begin; i < end; ++i) block_max = std::max(block_max, token_at<T>(tokens, i));
    if (block_max < limit) continue;
    for (uint64_t i = begin; i < end; ++i) {
      if (token_at<T>(tokens, i) >= limit) return i;
    }
  }
  return n;
}

uint64_t find_out_of_vocab(const void* tokens, uint8_t token_bytes, uint64_t n, uint64_t limit) {
  switch (token_bytes) {
    case 1: return first_token_at_or_above<uint8_t>(tokens, n, limit);
    case 2: return first_token_at_or_above<uint16_t>(tokens, n, limit);
    default: return first_token_at_or_above<uint32_t>(tokens, n, limit);
  }
}

uint32_t load_token(const void* tokens, uint8_t token_bytes, uint64_t i) {
  switch (token_bytes) {
    case 1: return token_at<uint8_t>(tokens, i);
    case 2: return token_at<uint16_t>(tokens, i);
    default: return token_at<uint32_t>(tokens, i);
  }
}

template <typename T>
void widen(const void* src, uint64_t first, uint64_t n, int32_t* out) {
  for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(token_at<T>(src, first + i));
}

// Parses the llm.c header at the start of `bytes` (the whole shard named `name`) into the shard's
// token pointer, width and count.
Status parse_llmc_header(const std::string& name, std::span<const std::byte> bytes, TokenDataset::Shard& shard) {
  const uint64_t size = bytes.size();
  if (size < kLlmcHeaderBytes) {
    return error(Code::invalid_argument,
                 "{} is {} bytes, shorter than the {}-byte llm.c header; it is not an llm.c .bin shard "
                 "(pass the right file, or --data-format u16, u32 or text for another layout)",
                 name, size, kLlmcHeaderBytes);
  }
  int32_t header[3];
  std::memcpy(header, bytes.data(), sizeof(header));
  const int32_t magic = header[0], version = header[1], count = header[2];
  if (magic == kLlmcMagicGpt2 && version == 1) {
    shard.token_bytes = 2;
  } else if (magic == kLlmcMagicLlama3 && version == 7) {
    shard.token_bytes = 4;
  } else if (magic != kLlmcMagicGpt2 && magic != kLlmcMagicLlama3) {
    return error(Code::invalid_argument,
                 "{}: bad magic {} at byte 0 (an llm.c shard starts with {} or {}); not an llm.c .bin "
                 "shard, or written by another tool (pass --data-format u16 or u32 for bare token arrays)",
                 name, magic, kLlmcMagicGpt2, kLlmcMagicLlama3);
  } else {
    return error(Code::invalid_argument,
                 "{}: unsupported version {} at byte 4 for magic {} (expected {}); re-run the data "
                 "preparation with llm.c's current dev/data scripts",
                 name, version, magic, magic == kLlmcMagicGpt2 ? 1 : 7);
  }
  if (count < 0) {
    return error(Code::invalid_argument, "{}: negative token count {} in the header at byte 8", name, count);
  }
  const uint64_t expected = kLlmcHeaderBytes + static_cast<uint64_t>(count) * shard.token_bytes;
  if (expected != size) {
    return error(Code::invalid_argument,
                 "{}: the header at byte 8 says {} tokens ({} bytes with the header) but the file is {} "
                 "bytes; the shard is truncated or corrupt, re-create it",
                 name, count, expected, size);
  }
  shard.tokens = bytes.data() + kLlmcHeaderBytes;
  shard.count = static_cast<uint64_t>(count);
  return Status::ok();
}

// A shard over `bytes`, the whole content of the file or buffer `name` in layout `kind`; the caller
// keeps the bytes alive (and sets shard.file when they are a mapping).
StatusOr<TokenDataset::Shard> shard_over(const std::string& name, std::span<const std::byte> bytes,
                                         TokenFileKind kind) {
  if (bytes.empty()) return error(Code::invalid_argument, "token file {} is empty; pass a file with tokens", name);
  TokenDataset::Shard shard;
  shard.path = name;
  shard.bytes = bytes.data();
  if (kind == TokenFileKind::llmc_bin) {
    STRATA_RETURN_IF_ERROR(parse_llmc_header(name, bytes, shard));
  } else {
    shard.token_bytes = kind == TokenFileKind::text ? 1 : kind == TokenFileKind::raw_u16 ? 2 : 4;
    if (bytes.size() % shard.token_bytes != 0) {
      return error(Code::invalid_argument,
                   "{} is {} bytes, not a whole number of {}-byte tokens (the last token at byte {} is "
                   "cut); is --data-format {} right?",
                   name, bytes.size(), shard.token_bytes, bytes.size() - bytes.size() % shard.token_bytes,
                   token_file_kind_name(kind));
    }
    shard.tokens = bytes.data();
    shard.count = bytes.size() / shard.token_bytes;
  }
  if (shard.count == 0) {
    return error(Code::invalid_argument, "token file {} holds no tokens (an empty shard); remove it or re-create it",
                 name);
  }
  return shard;
}

StatusOr<TokenDataset::Shard> open_shard(const std::string& path, TokenFileKind kind) {
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> file, MappedFile::open(path));
  STRATA_ASSIGN_OR_RETURN(TokenDataset::Shard shard, shard_over(path, file->bytes(), kind));
  shard.file = std::move(file);
  return shard;
}

Status check_vocab(const TokenDataset::Shard& shard, uint32_t vocab_size) {
  if (vocab_size == 0 || (shard.token_bytes == 1 && vocab_size >= 256)) return Status::ok();
  const uint64_t at = find_out_of_vocab(shard.tokens, shard.token_bytes, shard.count, vocab_size);
  if (at == shard.count) return Status::ok();
  const auto* tokens_start = static_cast<const std::byte*>(shard.tokens);
  const uint64_t byte_offset = static_cast<uint64_t>(tokens_start - shard.bytes) + at * shard.token_bytes;
  return error(Code::invalid_argument,
               "{}: token {} at position {} (byte offset {}) is >= the vocabulary size {}; the data was "
               "tokenized for another vocabulary: re-tokenize it or set the model's vocab_size",
               shard.path, load_token(shard.tokens, shard.token_bytes, at), at, byte_offset, vocab_size);
}

}  // namespace

StatusOr<TokenFileKind> parse_token_file_kind(std::string_view name) {
  if (name == "bin" || name == "llmc") return TokenFileKind::llmc_bin;
  if (name == "u16") return TokenFileKind::raw_u16;
  if (name == "u32") return TokenFileKind::raw_u32;
  if (name == "text") return TokenFileKind::text;
  return error(Code::invalid_argument, "unknown token file kind '{}'; use bin, u16, u32 or text", name);
}

std::string_view token_file_kind_name(TokenFileKind kind) {
  switch (kind) {
    case TokenFileKind::llmc_bin: return "bin";
    case TokenFileKind::raw_u16: return "u16";
    case TokenFileKind::raw_u32: return "u32";
    case TokenFileKind::text: return "text";
  }
  return "?";
}

StatusOr<std::vector<std::string>> expand_token_paths(std::string_view spec) {
  std::vector<std::string> out;
  while (true) {
    const size_t comma = spec.find(',');
    const std::string_view item = trim(spec.substr(0, comma));
    if (!item.empty()) {
      if (has_glob_chars(item)) {
        STRATA_RETURN_IF_ERROR(glob_into(std::string(item), out));
      } else {
        out.emplace_back(item);
      }
    }
    if (comma == std::string_view::npos) break;
    spec.remove_prefix(comma + 1);
  }
  if (out.empty()) return error(Code::invalid_argument, "no token files given; pass a path, a list or a glob");
  return out;
}

StatusOr<TokenDataset> TokenDataset::open(const std::vector<std::string>& paths, const TokenDatasetOptions& options) {
  if (paths.empty()) return error(Code::invalid_argument, "no token files given; pass a path, a list or a glob");
  std::vector<Shard> shards;
  for (const std::string& path : paths) {
    STRATA_ASSIGN_OR_RETURN(Shard shard, open_shard(path, options.kind));
    shards.push_back(std::move(shard));
  }
  return from_shards(std::move(shards), options);
}

StatusOr<TokenDataset> TokenDataset::from_memory(std::string_view name, std::span<const std::byte> bytes,
                                                 const TokenDatasetOptions& options) {
  STRATA_ASSIGN_OR_RETURN(Shard shard, shard_over(std::string(name), bytes, options.kind));
  std::vector<Shard> shards;
  shards.push_back(std::move(shard));
  return from_shards(std::move(shards), options);
}

StatusOr<TokenDataset> TokenDataset::from_shards(std::vector<Shard> shards, const TokenDatasetOptions& options) {
  TokenDataset ds;
  ds.kind_ = options.kind;
  ds.vocab_size_ = options.vocab_size != 0 ? options.vocab_size : (options.kind == TokenFileKind::text ? 256 : 0);
  for (const Shard& shard : shards) STRATA_RETURN_IF_ERROR(check_vocab(shard, ds.vocab_size_));
  ds.shards_ = std::move(shards);
  ds.index_shards();
  return ds;
}

void TokenDataset::index_shards() {
  starts_.clear();
  total_ = 0;
  for (const Shard& s : shards_) {
    starts_.push_back(total_);
    total_ += s.count;
  }
}

StatusOr<TokenDataset> TokenDataset::slice(uint64_t begin, uint64_t end) const {
  if (begin >= end || end > total_) {
    return error(Code::out_of_range, "token range [{}, {}) is empty or outside the dataset's {} tokens", begin, end,
                 total_);
  }
  TokenDataset out;
  out.kind_ = kind_;
  out.vocab_size_ = vocab_size_;
  for (size_t i = 0; i < shards_.size(); ++i) {
    const uint64_t s_begin = starts_[i], s_end = starts_[i] + shards_[i].count;
    const uint64_t lo = std::max(begin, s_begin), hi = std::min(end, s_end);
    if (lo >= hi) continue;
    Shard piece = shards_[i];
    piece.tokens = static_cast<const std::byte*>(piece.tokens) + (lo - s_begin) * piece.token_bytes;
    piece.first_in_file += lo - s_begin;
    piece.count = hi - lo;
    out.shards_.push_back(std::move(piece));
  }
  out.index_shards();
  return out;
}

StatusOr<std::pair<TokenDataset, TokenDataset>> TokenDataset::split_tail(double validation_fraction) const {
  if (!(validation_fraction > 0.0 && validation_fraction < 1.0)) {
    return error(Code::invalid_argument, "validation fraction {} must be between 0 and 1 (exclusive)",
                 validation_fraction);
  }
  const auto cut = static_cast<uint64_t>(static_cast<double>(total_) * (1.0 - validation_fraction));
  if (cut == 0 || cut >= total_) {
    return error(Code::invalid_argument,
                 "a validation fraction of {} of {} tokens leaves one side empty; use more data or another fraction",
                 validation_fraction, total_);
  }
  STRATA_ASSIGN_OR_RETURN(TokenDataset train, slice(0, cut));
  STRATA_ASSIGN_OR_RETURN(TokenDataset validation, slice(cut, total_));
  return std::pair<TokenDataset, TokenDataset>(std::move(train), std::move(validation));
}

void TokenDataset::read(uint64_t begin, uint64_t n, int32_t* out) const {
  size_t i = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin()) - 1;
  while (n > 0) {
    const Shard& s = shards_[i];
    const uint64_t offset = begin - starts_[i];
    const uint64_t take = std::min(n, s.count - offset);
    switch (s.token_bytes) {
      case 1: widen<uint8_t>(s.tokens, offset, take, out); break;
      case 2: widen<uint16_t>(s.tokens, offset, take, out); break;
      default: widen<uint32_t>(s.tokens, offset, take, out); break;
    }
    out += take;
    begin += take;
    n -= take;
    ++i;
  }
}

uint32_t TokenDataset::token(uint64_t index) const {
  const size_t i = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), index) - starts_.begin()) - 1;
  return load_token(shards_[i].tokens, shards_[i].token_bytes, index - starts_[i]);
}

}  // namespace strata::model
