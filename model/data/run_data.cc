// The datasets a training run reads (run_data.h).
#include "model/data/run_data.h"

#include <span>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

#include "model/data/builtin_corpus.h"
#include "runtime/splitmix64.h"

namespace strata::model {
namespace {

// The built-in corpus as a text-token dataset over its static bytes (no copy).
StatusOr<TokenDataset> open_builtin_corpus(uint32_t vocab) {
  const std::string_view text = builtin_corpus();
  return TokenDataset::from_memory("built-in corpus", std::as_bytes(std::span(text.data(), text.size())),
                                   {.kind = TokenFileKind::text, .vocab_size = vocab});
}

// Every path of the comma/glob specs, which must share one layout.
StatusOr<TokenDataset> open_token_files(const TrainOptions& o, const std::vector<std::string>& specs, uint32_t vocab) {
  std::vector<std::string> paths;
  for (const std::string& spec : specs) {
    STRATA_ASSIGN_OR_RETURN(std::vector<std::string> expanded, expand_token_paths(spec));
    paths.insert(paths.end(), expanded.begin(), expanded.end());
  }
  STRATA_ASSIGN_OR_RETURN(TokenFileKind kind, data_format_for(o, paths.front()));
  for (const std::string& p : paths) {
    STRATA_ASSIGN_OR_RETURN(TokenFileKind k, data_format_for(o, p));
    if (k != kind)
      return error(Code::invalid_argument, "{} is {} but {} is {}: pass files of one layout (or --data-format)", p,
                   token_file_kind_name(k), paths.front(), token_file_kind_name(kind));
  }
  return TokenDataset::open(paths, {.kind = kind, .vocab_size = vocab});
}

// `count` tokens uniform over [0, vocab), from SplitMix64 seeded with `seed`: the same for a seed.
std::shared_ptr<const std::vector<uint32_t>> random_tokens(uint64_t count, uint32_t vocab, uint64_t seed) {
  auto tokens = std::make_shared<std::vector<uint32_t>>(count);
  SplitMix64 bits(seed ^ 0x5eed5eed5eed5eedull);
  for (uint32_t& t : *tokens) t = uint32_t(bits.next() % vocab);
  return tokens;
}

}  // namespace

StatusOr<RunData> open_run_data(const TrainOptions& o, uint32_t vocab, uint64_t seed) {
  std::optional<TokenDataset> all;
  std::shared_ptr<const std::vector<uint32_t>> random;
  if (o.random_tokens > 0) {
    random = random_tokens(o.random_tokens, vocab, seed);
    STRATA_ASSIGN_OR_RETURN(all, TokenDataset::from_memory("random tokens", std::as_bytes(std::span(*random)),
                                                           {.kind = TokenFileKind::raw_u32, .vocab_size = vocab}));
    spdlog::info("data: {} random tokens, uniform over the vocabulary of {} (seed {})", all->size(), vocab, seed);
  } else if (o.uses_builtin_corpus()) {
    STRATA_ASSIGN_OR_RETURN(all, open_builtin_corpus(vocab));
    spdlog::info("data: the built-in corpus, {} ({} byte tokens)", builtin_corpus_name(), all->size());
  } else if (!o.text.empty()) {
    STRATA_ASSIGN_OR_RETURN(all, TokenDataset::open({o.text}, {.kind = TokenFileKind::text, .vocab_size = vocab}));
    spdlog::info("data: {} ({} byte tokens)", o.text, all->size());
  } else {
    STRATA_ASSIGN_OR_RETURN(all, open_token_files(o, o.data, vocab));
    spdlog::info("data: {} file(s), {} tokens", all->shards().size(), all->size());
  }
  if (!o.val_data.empty()) {
    STRATA_ASSIGN_OR_RETURN(TokenDataset val, open_token_files(o, o.val_data, vocab));
    return RunData{std::move(*all), std::move(val), random};
  }
  if (o.val_fraction > 0.0) {
    STRATA_ASSIGN_OR_RETURN(auto split, all->split_tail(o.val_fraction));
    return RunData{std::move(split.first), std::move(split.second), random};
  }
  return RunData{std::move(*all), std::nullopt, random};
}

}  // namespace strata::model
