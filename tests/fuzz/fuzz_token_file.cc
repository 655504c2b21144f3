// Fuzz harness: the token-file loaders (model/data/token_dataset.h). The first byte picks the layout
// (llm.c .bin, bare u16, bare u32, text), the next two a vocabulary bound (0: the layout's
// natural one); the rest is the file. An opened dataset is also split for validation.
#include <cstddef>
#include <span>

#include "model/data/token_dataset.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  using strata::model::TokenFileKind;
  constexpr TokenFileKind kinds[] = {TokenFileKind::llmc_bin, TokenFileKind::raw_u16, TokenFileKind::raw_u32,
                                     TokenFileKind::text};
  const TokenFileKind kind = kinds[data[0] % 4];
  const uint32_t vocab = uint32_t(data[1]) | uint32_t(data[2]) << 8;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data + 3), size - 3);
  strata::StatusOr<strata::model::TokenDataset> d =
      strata::model::TokenDataset::from_memory("fuzz input", bytes, {.kind = kind, .vocab_size = vocab});
  if (d.is_ok()) (void)d->split_tail(0.1);
  return 0;
}
