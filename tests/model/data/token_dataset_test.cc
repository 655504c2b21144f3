// TokenDataset: every file kind, datasets over memory, shard concatenation, slicing, globbing, and
// each validation error with the file and position it names.
#include "model/data/token_dataset.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <span>
#include <string_view>

#include "tests/model/model_test_files.h"

namespace strata::model {
namespace {

using testing::TempDir;
using testing::write_gpt2_shard;
using testing::write_llmc_shard;

std::vector<int32_t> read_all(const TokenDataset& ds) {
  std::vector<int32_t> out(ds.size());
  ds.read(0, ds.size(), out.data());
  return out;
}

TEST(TokenDatasetTest, ReadsGpt2Shard) {
  TempDir dir;
  std::vector<uint16_t> tokens = {5, 50256, 0, 17, 65535};
  write_gpt2_shard(dir.file("a.bin"), tokens);
  auto ds = TokenDataset::open({dir.file("a.bin")}, {TokenFileKind::llmc_bin, 0});
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  EXPECT_EQ(ds->size(), 5u);
  EXPECT_EQ(read_all(*ds), (std::vector<int32_t>{5, 50256, 0, 17, 65535}));
  EXPECT_EQ(ds->token(1), 50256u);
  EXPECT_EQ(ds->shards()[0].token_bytes, 2);
}

TEST(TokenDatasetTest, ReadsLlama3ShardWithUint32Tokens) {
  TempDir dir;
  std::vector<uint32_t> tokens = {128000, 7, 128255};
  write_llmc_shard(dir.file("l.bin"), tokens, kLlmcMagicLlama3, 7, 3);
  auto ds = TokenDataset::open({dir.file("l.bin")}, {TokenFileKind::llmc_bin, 128256});
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  EXPECT_EQ(read_all(*ds), (std::vector<int32_t>{128000, 7, 128255}));
}

TEST(TokenDatasetTest, ReadsRawArraysAndText) {
  TempDir dir;
  const std::vector<uint16_t> u16 = {1, 2, 60000};
  const std::vector<uint32_t> u32 = {70000, 3};
  testing::write_bytes(dir.file("a.u16"), u16.data(), 6);
  testing::write_bytes(dir.file("a.u32"), u32.data(), 8);
  testing::write_text(dir.file("a.txt"), "Hi\xff\n");
  auto a = TokenDataset::open({dir.file("a.u16")}, {TokenFileKind::raw_u16, 0});
  auto b = TokenDataset::open({dir.file("a.u32")}, {TokenFileKind::raw_u32, 0});
  auto c = TokenDataset::open({dir.file("a.txt")}, {TokenFileKind::text, 0});
  ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
  EXPECT_EQ(read_all(*a), (std::vector<int32_t>{1, 2, 60000}));
  EXPECT_EQ(read_all(*b), (std::vector<int32_t>{70000, 3}));
  EXPECT_EQ(read_all(*c), (std::vector<int32_t>{'H', 'i', 255, '\n'}));
  EXPECT_EQ(c->vocab_size(), 256u);
}

TEST(TokenDatasetTest, ConcatenatesShardsAndReadsAcrossBoundaries) {
  TempDir dir;
  write_gpt2_shard(dir.file("s0.bin"), {0, 1, 2});
  write_gpt2_shard(dir.file("s1.bin"), {3});
  write_gpt2_shard(dir.file("s2.bin"), {4, 5, 6, 7});
  auto ds = TokenDataset::open({dir.file("s0.bin"), dir.file("s1.bin"), dir.file("s2.bin")}, {});
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  EXPECT_EQ(ds->size(), 8u);
  EXPECT_EQ(ds->shard_begin(2), 4u);
  std::vector<int32_t> window(5);
  ds->read(1, 5, window.data());
  EXPECT_EQ(window, (std::vector<int32_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(ds->token(7), 7u);
}

TEST(TokenDatasetTest, SliceAndSplitTail) {
  TempDir dir;
  write_gpt2_shard(dir.file("s0.bin"), {0, 1, 2, 3, 4});
  write_gpt2_shard(dir.file("s1.bin"), {5, 6, 7, 8, 9});
  auto ds = TokenDataset::open({dir.file("s0.bin"), dir.file("s1.bin")}, {});
  ASSERT_TRUE(ds.is_ok());
  auto mid = ds->slice(3, 7);
  ASSERT_TRUE(mid.is_ok()) << mid.status().to_string();
  EXPECT_EQ(read_all(*mid), (std::vector<int32_t>{3, 4, 5, 6}));
  ASSERT_EQ(mid->shards().size(), 2u);
  EXPECT_EQ(mid->shards()[0].first_in_file, 3u);
  EXPECT_EQ(mid->shards()[1].count, 2u);

  auto split = ds->split_tail(0.2);
  ASSERT_TRUE(split.is_ok()) << split.status().to_string();
  EXPECT_EQ(read_all(split->first), (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(read_all(split->second), (std::vector<int32_t>{8, 9}));

  EXPECT_EQ(ds->slice(4, 4).status().code(), Code::out_of_range);
  EXPECT_EQ(ds->slice(0, 11).status().code(), Code::out_of_range);
  EXPECT_EQ(ds->split_tail(1.0).status().code(), Code::invalid_argument);
  EXPECT_EQ(ds->split_tail(0.95).status().code(), Code::invalid_argument);  // 0 training tokens
}

TEST(TokenDatasetTest, ExpandsListsAndGlobsSorted) {
  TempDir dir;
  for (const char* name : {"train_002.bin", "train_000.bin", "train_001.bin", "val_000.bin"}) {
    testing::write_text(dir.file(name), "x");
  }
  auto paths = expand_token_paths(dir.file("train_*.bin") + ", " + dir.file("val_000.bin"));
  ASSERT_TRUE(paths.is_ok()) << paths.status().to_string();
  EXPECT_EQ(*paths, (std::vector<std::string>{dir.file("train_000.bin"), dir.file("train_001.bin"),
                                              dir.file("train_002.bin"), dir.file("val_000.bin")}));
  auto none = expand_token_paths(dir.file("nope_*.bin"));
  EXPECT_EQ(none.status().code(), Code::not_found);
  EXPECT_NE(none.status().message().find("nope_*.bin"), std::string::npos);
  EXPECT_EQ(expand_token_paths(" , ").status().code(), Code::invalid_argument);
}

TEST(TokenDatasetTest, ParsesKinds) {
  EXPECT_EQ(*parse_token_file_kind("bin"), TokenFileKind::llmc_bin);
  EXPECT_EQ(*parse_token_file_kind("u32"), TokenFileKind::raw_u32);
  EXPECT_EQ(*parse_token_file_kind("text"), TokenFileKind::text);
  auto bad = parse_token_file_kind("npy");
  EXPECT_EQ(bad.status().code(), Code::invalid_argument);
  EXPECT_NE(bad.status().message().find("u16"), std::string::npos);
}

// Opens `path` as an llm.c shard and returns the error (the test fails if it opens).
Status open_error(const std::string& path, TokenFileKind kind = TokenFileKind::llmc_bin, uint32_t vocab = 0) {
  auto ds = TokenDataset::open({path}, {kind, vocab});
  EXPECT_FALSE(ds.is_ok());
  return ds.status();
}

void expect_error(const Status& s, Code code, std::initializer_list<std::string_view> words) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  for (std::string_view w : words) EXPECT_NE(s.message().find(w), std::string::npos) << "'" << w << "' not in " << s.to_string();
}

TEST(TokenDatasetTest, RejectsBadHeaders) {
  TempDir dir;
  const std::vector<uint16_t> toks = {1, 2, 3};
  write_llmc_shard(dir.file("magic.bin"), toks, 12345, 1, 3);
  expect_error(open_error(dir.file("magic.bin")), Code::invalid_argument, {dir.file("magic.bin"), "bad magic 12345"});
  write_llmc_shard(dir.file("version.bin"), toks, kLlmcMagicGpt2, 2, 3);
  expect_error(open_error(dir.file("version.bin")), Code::invalid_argument, {"version.bin", "version 2", "byte 4"});
  write_llmc_shard(dir.file("count.bin"), toks, kLlmcMagicGpt2, 1, 10);
  expect_error(open_error(dir.file("count.bin")), Code::invalid_argument, {"count.bin", "10 tokens", "1030 bytes"});
  write_llmc_shard(dir.file("negative.bin"), toks, kLlmcMagicGpt2, 1, -1);
  expect_error(open_error(dir.file("negative.bin")), Code::invalid_argument, {"negative token count -1"});
  testing::write_text(dir.file("short.bin"), std::string(100, 'x'));
  expect_error(open_error(dir.file("short.bin")), Code::invalid_argument, {"short.bin", "100 bytes", "header"});
  write_llmc_shard(dir.file("zero.bin"), std::vector<uint16_t>{}, kLlmcMagicGpt2, 1, 0);
  expect_error(open_error(dir.file("zero.bin")), Code::invalid_argument, {"zero.bin", "no tokens"});
}

TEST(TokenDatasetTest, RejectsEmptyMissingAndRaggedFiles) {
  TempDir dir;
  testing::write_text(dir.file("empty.txt"), "");
  expect_error(open_error(dir.file("empty.txt"), TokenFileKind::text), Code::invalid_argument, {"empty.txt", "empty"});
  expect_error(open_error(dir.file("missing.bin")), Code::not_found, {"missing.bin"});
  testing::write_text(dir.file("odd.u32"), "123456");
  expect_error(open_error(dir.file("odd.u32"), TokenFileKind::raw_u32), Code::invalid_argument,
               {"odd.u32", "6 bytes", "4-byte tokens", "byte 4"});
  expect_error(open_error(dir.path()), Code::invalid_argument, {"not a regular file"});
}

TEST(TokenDatasetTest, ReportsFirstTokenOutsideVocabulary) {
  TempDir dir;
  // Past the first 64 Ki-token block, so the block scan has to find it in a later block.
  std::vector<uint16_t> tokens(100000, 7);
  tokens[70001] = 50257;
  tokens[90000] = 60000;
  write_gpt2_shard(dir.file("v.bin"), tokens);
  const Status s = open_error(dir.file("v.bin"), TokenFileKind::llmc_bin, 50257);
  expect_error(s, Code::invalid_argument,
               {"v.bin", "token 50257", "position 70001", "byte offset 141026", "vocabulary size 50257"});
  auto ok = TokenDataset::open({dir.file("v.bin")}, {TokenFileKind::llmc_bin, 60001});
  EXPECT_TRUE(ok.is_ok()) << ok.status().to_string();

  testing::write_text(dir.file("t.txt"), "abc");
  expect_error(open_error(dir.file("t.txt"), TokenFileKind::text, 99), Code::invalid_argument,
               {"token 99", "position 2", "byte offset 2"});
}

std::span<const std::byte> bytes_of(std::string_view text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

TEST(TokenDatasetTest, FromMemoryReadsTheBufferInPlace) {
  const std::string text = "Hello, corpus\xff";
  auto ds = TokenDataset::from_memory("greeting", bytes_of(text), {TokenFileKind::text, 0});
  ASSERT_TRUE(ds.is_ok()) << ds.status().to_string();
  EXPECT_EQ(ds->size(), text.size());
  EXPECT_EQ(ds->vocab_size(), 256u);
  ASSERT_EQ(ds->shards().size(), 1u);
  EXPECT_EQ(ds->shards()[0].path, "greeting");
  EXPECT_EQ(ds->shards()[0].file, nullptr);
  // In place: the shard's tokens are the caller's bytes, not a copy.
  EXPECT_EQ(ds->shards()[0].tokens, static_cast<const void*>(text.data()));
  EXPECT_EQ(ds->token(0), uint32_t('H'));
  EXPECT_EQ(ds->token(text.size() - 1), 255u);
  auto tail = ds->slice(7, text.size());
  ASSERT_TRUE(tail.is_ok()) << tail.status().to_string();
  EXPECT_EQ(read_all(*tail), (std::vector<int32_t>{'c', 'o', 'r', 'p', 'u', 's', 255}));

  const std::vector<uint16_t> u16 = {3, 60000, 9};
  std::vector<std::byte> raw(6);
  std::memcpy(raw.data(), u16.data(), raw.size());
  auto wide = TokenDataset::from_memory("u16 buffer", raw, {TokenFileKind::raw_u16, 0});
  ASSERT_TRUE(wide.is_ok()) << wide.status().to_string();
  EXPECT_EQ(read_all(*wide), (std::vector<int32_t>{3, 60000, 9}));
}

TEST(TokenDatasetTest, FromMemoryValidatesLikeAFile) {
  const std::string text = "abc";
  auto vocab = TokenDataset::from_memory("corpus", bytes_of(text), {TokenFileKind::text, 99});
  ASSERT_FALSE(vocab.is_ok());
  expect_error(vocab.status(), Code::invalid_argument, {"corpus", "token 99", "position 2", "byte offset 2"});
  auto empty = TokenDataset::from_memory("nothing", {}, {TokenFileKind::text, 0});
  ASSERT_FALSE(empty.is_ok());
  expect_error(empty.status(), Code::invalid_argument, {"nothing", "empty"});
  auto ragged = TokenDataset::from_memory("odd", bytes_of(text), {TokenFileKind::raw_u16, 0});
  ASSERT_FALSE(ragged.is_ok());
  expect_error(ragged.status(), Code::invalid_argument, {"odd", "3 bytes", "2-byte tokens"});
  auto header = TokenDataset::from_memory("short", bytes_of(text), {TokenFileKind::llmc_bin, 0});
  ASSERT_FALSE(header.is_ok());
  expect_error(header.status(), Code::invalid_argument, {"short", "3 bytes", "header"});
}

}  // namespace
}  // namespace strata::model
