// Safetensors: round trips (whole-file and streamed writer), atomic replacement, per-tensor
// CRC-32C metadata computed while streaming, and every corruption the reader must reject, each
// with the file and tensor it names.
#include "model/hf/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/cpu/crc32c.h"
#include "tests/model/model_test_files.h"

namespace strata::model {
namespace {

using testing::TempDir;

template <typename T>
std::span<const std::byte> as_bytes(const std::vector<T>& v) {
  return std::as_bytes(std::span<const T>(v));
}

// A file from a hand-written header and `data_bytes` bytes of data.
std::string craft(const TempDir& dir, const std::string& name, const std::string& header, size_t data_bytes,
                  uint64_t header_len_override = 0) {
  const uint64_t len = header_len_override != 0 ? header_len_override : header.size();
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &len, 8);
  bytes += header;
  bytes.append(data_bytes, '\x11');
  testing::write_text(dir.file(name), bytes);
  return dir.file(name);
}

TEST(SafetensorsTest, RoundTripsTensorsAndMetadata) {
  TempDir dir;
  std::vector<float> wte(6);
  std::iota(wte.begin(), wte.end(), 0.5f);
  std::vector<uint16_t> bias = {0x3f80, 0xbf80, 0x0000};  // bf16 1, -1, 0
  std::vector<int32_t> step = {42};
  std::vector<SafetensorsBlob> blobs = {
      {{"transformer.wte.weight", SafeDType::f32, {3, 2}}, as_bytes(wte)},
      {{"transformer.h.0.attn.c_attn.bias", SafeDType::bf16, {3}}, as_bytes(bias)},
      {{"trainer.step", SafeDType::i32, {}}, as_bytes(step)},
      {{"empty", SafeDType::u8, {0, 4}}, {}},
  };
  const std::string path = dir.file("model.safetensors");
  ASSERT_TRUE(write_safetensors(path, blobs, {{"format", "pt"}, {"strata.loader", "{\"epoch\":1}"}}).is_ok());

  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  ASSERT_EQ(f->tensors().size(), 4u);
  EXPECT_EQ(f->tensors()[0].name, "empty");  // sorted by name
  EXPECT_EQ(f->metadata().at("strata.loader"), "{\"epoch\":1}");
  auto w = f->data("transformer.wte.weight", SafeDType::f32, {3, 2});
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  EXPECT_EQ(std::memcmp(w->data(), wte.data(), 24), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w->data()) % 8, 0u);  // header padded to 8 bytes
  const SafetensorsTensor* b = f->find("transformer.h.0.attn.c_attn.bias");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, SafeDType::bf16);
  EXPECT_EQ(std::memcmp(f->data(*b).data(), bias.data(), 6), 0);
  const SafetensorsTensor* s = f->find("trainer.step");
  EXPECT_EQ(s->elements(), 1u);
  int32_t step_read = 0;  // tensors are packed: this one starts at data byte 30, unaligned
  std::memcpy(&step_read, f->data(*s).data(), 4);
  EXPECT_EQ(step_read, 42);
  EXPECT_EQ(f->find("missing"), nullptr);

  auto absent = f->data("lm_head.weight", SafeDType::f32, {3, 2});
  EXPECT_EQ(absent.status().code(), Code::not_found);
  EXPECT_NE(absent.status().message().find("lm_head.weight"), std::string::npos);
  auto wrong = f->data("transformer.wte.weight", SafeDType::f32, {2, 3});
  EXPECT_EQ(wrong.status().code(), Code::invalid_argument);
  EXPECT_NE(wrong.status().message().find("F32 [3, 2], expected F32 [2, 3]"), std::string::npos) << wrong.status().to_string();
}

TEST(SafetensorsTest, StreamingWriterAcceptsPiecesInAnyOrder) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  std::vector<float> a = {1, 2, 3, 4}, b = {5, 6};
  auto w = SafetensorsWriter::create(path, {{"a", SafeDType::f32, {4}}, {"b", SafeDType::f32, {2}}});
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  ASSERT_TRUE((*w)->write(1, as_bytes(b)).is_ok());
  ASSERT_TRUE((*w)->write(0, as_bytes(a).subspan(8), 8).is_ok());
  const Status early = (*w)->commit();
  EXPECT_EQ(early.code(), Code::failed_precondition);
  EXPECT_NE(early.message().find("tensor 'a'"), std::string::npos);
  EXPECT_NE(early.message().find("8 of its 16 bytes"), std::string::npos) << early.to_string();
  const Status past = (*w)->write(0, as_bytes(a), 4);
  EXPECT_EQ(past.code(), Code::out_of_range);
  EXPECT_EQ((*w)->write(2, as_bytes(b)).code(), Code::out_of_range);
  ASSERT_TRUE((*w)->write(0, as_bytes(a).first(8)).is_ok());
  EXPECT_FALSE(std::filesystem::exists(path));  // nothing under the final name before commit
  ASSERT_TRUE((*w)->commit().is_ok());
  EXPECT_FALSE(std::filesystem::exists((*w)->temp_path()));
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(std::memcmp(f->data(*f->find("a")).data(), a.data(), 16), 0);
  EXPECT_EQ(std::memcmp(f->data(*f->find("b")).data(), b.data(), 8), 0);
}

TEST(SafetensorsTest, ReplacesAtomicallyAndCleansUpUncommittedWrites) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  std::vector<int32_t> v1 = {1}, v2 = {2};
  ASSERT_TRUE(write_safetensors(path, std::vector<SafetensorsBlob>{{{"x", SafeDType::i32, {1}}, as_bytes(v1)}}).is_ok());
  std::string temp;
  {
    auto w = SafetensorsWriter::create(path, {{"x", SafeDType::i32, {1}}});
    ASSERT_TRUE(w.is_ok());
    ASSERT_TRUE((*w)->write(0, as_bytes(v2)).is_ok());
    temp = (*w)->temp_path();
    EXPECT_EQ(std::filesystem::path(temp).parent_path(), std::filesystem::path(path).parent_path());
    // Abandoned (as by a crash before commit): the old checkpoint is intact.
  }
  EXPECT_FALSE(std::filesystem::exists(temp));
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(*reinterpret_cast<const int32_t*>(f->data(*f->find("x")).data()), 1);
}

TEST(SafetensorsTest, WriterRejectsBadDeclarations) {
  TempDir dir;
  std::vector<float> v = {1, 2};
  const Status size = write_safetensors(dir.file("s"), std::vector<SafetensorsBlob>{{{"v", SafeDType::f32, {3}}, as_bytes(v)}});
  EXPECT_EQ(size.code(), Code::invalid_argument);
  EXPECT_NE(size.message().find("12 bytes) but 8 bytes"), std::string::npos) << size.to_string();
  auto dup = SafetensorsWriter::create(dir.file("d"), {{"v", SafeDType::f32, {1}}, {"v", SafeDType::f32, {1}}});
  EXPECT_EQ(dup.status().code(), Code::invalid_argument);
  EXPECT_NE(dup.status().message().find("'v'"), std::string::npos);
  EXPECT_EQ(SafetensorsWriter::create(dir.file("m"), {{"__metadata__", SafeDType::u8, {1}}}).status().code(),
            Code::invalid_argument);
  auto huge = SafetensorsWriter::create(dir.file("h"), {{"h", SafeDType::f64, {1ull << 40, 1ull << 30}}});
  EXPECT_EQ(huge.status().code(), Code::invalid_argument);
  EXPECT_EQ(SafetensorsWriter::create(dir.file("no/such/dir/x"), {}).status().code(), Code::not_found);
}

std::string crc_hex(std::span<const std::byte> bytes) {
  return fmt::format("{:08x}", kernels::crc32c(0, bytes.data(), bytes.size()));
}

// The checksum entry of `path` under `key`, parsed; fails the test when absent or not an object.
nlohmann::json checksums_of(const std::string& path, const std::string& key) {
  auto f = SafetensorsFile::open(path);
  EXPECT_TRUE(f.is_ok()) << f.status().to_string();
  if (!f.is_ok() || !f->metadata().contains(key)) {
    ADD_FAILURE() << "no metadata '" << key << "' in " << path;
    return nlohmann::json::object();
  }
  nlohmann::json j = nlohmann::json::parse(f->metadata().at(key), nullptr, /*allow_exceptions=*/false);
  EXPECT_TRUE(j.is_object()) << f->metadata().at(key);
  return j;
}

TEST(SafetensorsTest, StreamedChecksumsMatchCrc32cOfEachTensor) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  std::vector<float> a(1000);
  std::iota(a.begin(), a.end(), -3.25f);
  std::vector<uint16_t> c = {0x3f80, 0xbf80, 0x4000, 0x1234, 0xffff};
  auto w = SafetensorsWriter::create(
      path, {{"a", SafeDType::f32, {10, 100}}, {"empty", SafeDType::u8, {0}}, {"c", SafeDType::bf16, {5}}},
      {{"format", "pt"}}, "strata_crc32c");
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  const std::span<const std::byte> ab = as_bytes(a);
  // Three in-order pieces of uneven sizes, an empty piece, tensors interleaved.
  ASSERT_TRUE((*w)->write(0, ab.first(1001)).is_ok());
  ASSERT_TRUE((*w)->write(2, as_bytes(c)).is_ok());
  ASSERT_TRUE((*w)->write(0, ab.subspan(1001, 2000), 1001).is_ok());
  ASSERT_TRUE((*w)->write(1, {}).is_ok());
  ASSERT_TRUE((*w)->write(0, ab.subspan(3001), 3001).is_ok());
  ASSERT_TRUE((*w)->commit().is_ok());

  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(std::memcmp(f->data(*f->find("a")).data(), a.data(), ab.size()), 0);
  const nlohmann::json crcs = checksums_of(path, "strata_crc32c");
  ASSERT_EQ(crcs.size(), 3u) << crcs.dump();
  EXPECT_EQ(crcs.at("a"), crc_hex(ab));
  EXPECT_EQ(crcs.at("c"), crc_hex(as_bytes(c)));
  EXPECT_EQ(crcs.at("empty"), "00000000");  // CRC-32C of no bytes
  EXPECT_NE(crcs.at("a"), "00000000");
  // The form model/ckpt/checkpoint.cc writes: a nlohmann dump of {"name":"8 hex digits"}.
  nlohmann::json want = nlohmann::json::object();
  want["a"] = crc_hex(ab);
  want["c"] = crc_hex(as_bytes(c));
  want["empty"] = "00000000";
  EXPECT_EQ(f->metadata().at("strata_crc32c"), want.dump());
}

TEST(SafetensorsTest, OutOfOrderPiecesAreChecksummedByJoiningTheirCrcs) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  std::vector<uint32_t> a(300), b(200), c(100);
  std::iota(a.begin(), a.end(), 7u);
  std::iota(b.begin(), b.end(), 1000u);
  std::iota(c.begin(), c.end(), 5000u);
  auto w = SafetensorsWriter::create(
      path, {{"a", SafeDType::u32, {300}}, {"b", SafeDType::u32, {200}}, {"c", SafeDType::u32, {100}}}, {}, "crc");
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  const auto ab = as_bytes(a), bb = as_bytes(b), cb = as_bytes(c);
  // a: backwards from the start. b: in order, then a gap filled last. c: in order.
  ASSERT_TRUE((*w)->write(0, ab.subspan(600), 600).is_ok());
  ASSERT_TRUE((*w)->write(0, ab.first(600)).is_ok());
  ASSERT_TRUE((*w)->write(1, bb.first(100)).is_ok());
  ASSERT_TRUE((*w)->write(1, bb.subspan(400), 400).is_ok());
  ASSERT_TRUE((*w)->write(1, bb.subspan(100, 300), 100).is_ok());
  ASSERT_TRUE((*w)->write(2, cb).is_ok());
  ASSERT_TRUE((*w)->commit().is_ok());
  const nlohmann::json crcs = checksums_of(path, "crc");
  EXPECT_EQ(crcs.at("a"), crc_hex(ab));
  EXPECT_EQ(crcs.at("b"), crc_hex(bb));
  EXPECT_EQ(crcs.at("c"), crc_hex(cb));
}

TEST(SafetensorsTest, OverlappingOrMissingPiecesAreRefusedAtCommit) {
  TempDir dir;
  std::vector<uint32_t> a(100);
  std::iota(a.begin(), a.end(), 1u);
  const auto ab = as_bytes(a);
  for (const bool overlap : {true, false}) {
    const std::string path = dir.file(overlap ? "overlap" : "gap");
    auto w = SafetensorsWriter::create(path, {{"a", SafeDType::u32, {100}}}, {}, "crc");
    ASSERT_TRUE(w.is_ok()) << w.status().to_string();
    ASSERT_TRUE((*w)->write(0, ab.first(200)).is_ok());
    // The overlap: bytes 196..400 again, 4 bytes counted twice and 396 bytes written in all, as
    // a byte count alone would pass; the gap: bytes 200..204 never written.
    if (overlap) ASSERT_TRUE((*w)->write(0, ab.subspan(196), 196).is_ok());
    else ASSERT_TRUE((*w)->write(0, ab.subspan(204), 204).is_ok());
    if (overlap) ASSERT_TRUE((*w)->accept({.tensor = 0, .crc = 0, .offset = 0, .bytes = 0}).is_ok());
    const Status s = (*w)->commit();
    EXPECT_EQ(s.code(), Code::failed_precondition) << s.to_string();
    EXPECT_NE(s.message().find(overlap ? "got 404 of its 400 bytes (two pieces overlap at byte 196)"
                                       : "got 396 of its 400 bytes (no piece starts at byte 200)"),
              std::string::npos)
        << s.to_string();
    EXPECT_FALSE(std::filesystem::exists(path));
  }
}

// A rank of a scale-out checkpoint writes its share into the file another process created; the
// creator accepts the peer's fragments and commits: the file is whole and its checksums are those
// of the bytes, whichever process wrote them.
TEST(SafetensorsTest, PeerWrittenPiecesCountAndAreChecksummed) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  std::vector<float> a(1000), b(10);
  std::iota(a.begin(), a.end(), 0.5f);
  std::iota(b.begin(), b.end(), -4.0f);
  const std::vector<SafetensorsSpec> specs = {{"a", SafeDType::f32, {1000}}, {"b", SafeDType::f32, {10}}};
  auto w = SafetensorsWriter::create(path, specs, {{"step", "7"}}, "crc");
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  const auto ab = as_bytes(a), bb = as_bytes(b);
  ASSERT_TRUE((*w)->write(0, ab.subspan(2000), 2000).is_ok());  // the creator: a's second half
  {
    auto peer = SafetensorsPeerWriter::open((*w)->temp_path(), specs, (*w)->data_start(), true);
    ASSERT_TRUE(peer.is_ok()) << peer.status().to_string();
    ASSERT_TRUE((*peer)->write(1, bb).is_ok());
    ASSERT_TRUE((*peer)->write(0, ab.subspan(1000, 1000), 1000).is_ok());  // out of order
    ASSERT_TRUE((*peer)->write(0, ab.first(1000)).is_ok());
    const Status past = (*peer)->write(1, bb, 4);
    EXPECT_EQ(past.code(), Code::out_of_range) << past.to_string();
    ASSERT_TRUE((*peer)->finish().is_ok());
    ASSERT_EQ((*peer)->fragments().size(), 3u);
    for (const SafetensorsFragment& f : (*peer)->fragments()) ASSERT_TRUE((*w)->accept(f).is_ok());
  }
  EXPECT_EQ((*w)->accept({.tensor = 2, .crc = 0, .offset = 0, .bytes = 4}).code(), Code::out_of_range);
  ASSERT_TRUE((*w)->commit().is_ok());
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().to_string();
  EXPECT_EQ(std::memcmp(f->data(*f->find("a")).data(), a.data(), ab.size()), 0);
  EXPECT_EQ(std::memcmp(f->data(*f->find("b")).data(), b.data(), bb.size()), 0);
  const nlohmann::json crcs = checksums_of(path, "crc");
  EXPECT_EQ(crcs.at("a"), crc_hex(ab));
  EXPECT_EQ(crcs.at("b"), crc_hex(bb));
}

TEST(SafetensorsTest, PeerWriterRefusesAMissingOrForeignFile) {
  TempDir dir;
  const std::vector<SafetensorsSpec> specs = {{"a", SafeDType::f32, {4}}};
  auto missing = SafetensorsPeerWriter::open(dir.file("nowhere.tmp.1"), specs, 64, true);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), Code::not_found) << missing.status().to_string();
  auto w = SafetensorsWriter::create(dir.file("x.safetensors"), specs, {}, "crc");
  ASSERT_TRUE(w.is_ok());
  const std::vector<SafetensorsSpec> other = {{"a", SafeDType::f32, {5}}};
  auto foreign = SafetensorsPeerWriter::open((*w)->temp_path(), other, (*w)->data_start(), true);
  ASSERT_FALSE(foreign.is_ok());
  EXPECT_EQ(foreign.status().code(), Code::invalid_argument) << foreign.status().to_string();
}

TEST(SafetensorsTest, WholeFileWriterRecordsChecksumsOnRequest) {
  TempDir dir;
  std::vector<float> v = {1.5f, -2.0f, 3.0f};
  const std::vector<SafetensorsBlob> blobs = {{{"v", SafeDType::f32, {3}}, as_bytes(v)}};
  ASSERT_TRUE(write_safetensors(dir.file("with"), blobs, {{"step", "3"}}, "strata_crc32c").is_ok());
  EXPECT_EQ(checksums_of(dir.file("with"), "strata_crc32c").at("v"), crc_hex(as_bytes(v)));
  ASSERT_TRUE(write_safetensors(dir.file("without"), blobs, {{"step", "3"}}).is_ok());
  auto f = SafetensorsFile::open(dir.file("without"));
  ASSERT_TRUE(f.is_ok());
  EXPECT_EQ(f->metadata().size(), 1u);  // no checksum entry unless asked for
}

TEST(SafetensorsTest, ChecksumKeyAlreadyInMetadataIsRefused) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  auto w = SafetensorsWriter::create(path, {{"x", SafeDType::u8, {1}}}, {{"strata_crc32c", "{}"}}, "strata_crc32c");
  ASSERT_FALSE(w.is_ok());
  EXPECT_EQ(w.status().code(), Code::invalid_argument);
  EXPECT_NE(w.status().message().find("'strata_crc32c'"), std::string::npos) << w.status().to_string();
  std::vector<uint8_t> x = {9};
  const Status s = write_safetensors(path, std::vector<SafetensorsBlob>{{{"x", SafeDType::u8, {1}}, as_bytes(x)}},
                                     {{"crc", "taken"}}, "crc");
  EXPECT_EQ(s.code(), Code::invalid_argument);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "a refused create() leaves nothing behind";
}

TEST(SafetensorsTest, UncommittedChecksummedWriterLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  std::vector<int32_t> v = {1, 2};
  std::string temp;
  {
    auto w = SafetensorsWriter::create(path, {{"v", SafeDType::i32, {2}}}, {}, "crc");
    ASSERT_TRUE(w.is_ok());
    ASSERT_TRUE((*w)->write(0, as_bytes(v)).is_ok());
    temp = (*w)->temp_path();
    EXPECT_TRUE(std::filesystem::exists(temp));
  }
  EXPECT_FALSE(std::filesystem::exists(temp));
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

struct CorruptCase {
  const char* name;
  std::string header;
  size_t data_bytes;
  uint64_t header_len_override;
  std::vector<std::string> words;
};

TEST(SafetensorsTest, RejectsEveryCorruption) {
  TempDir dir;
  const std::string ok_a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::vector<CorruptCase> cases = {
      {"len0", "{}", 0, UINT64_MAX, {"header length"}},
      {"lenhuge", "{}", 0, 200'000'000, {"header length 200000000"}},
      {"lenpast", "{}", 4, 100, {"header length 100"}},
      {"notjson", "{\"a\":", 0, 0, {"not valid JSON"}},
      {"array", "[1,2]", 0, 0, {"not a JSON object"}},
      {"nodtype", R"({"a":{"shape":[2],"data_offsets":[0,8]}})", 8, 0, {"tensor 'a' has no \"dtype\""}},
      {"baddtype", R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8, 0, {"tensor 'a'", "F33"}},
      {"negdim", R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8, 0, {"tensor 'a'", "shape", "-2"}},
      {"floatdim", R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8, 0, {"non-negative integer"}},
      {"threeoffsets", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4,8]}})", 8, 0, {"3 values"}},
      {"reversed", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8, 0, {"end before they begin"}},
      {"sizemismatch", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8, 0,
       {"tensor 'a'", "F32 [3] needs 12 bytes", "span 8"}},
      {"truncated", "{" + ok_a + "}", 5, 0, {"tensor 'a' ends at data byte 8", "only 5 bytes"}},
      {"overlap", "{" + ok_a + R"(,"b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", 8, 0,
       {"tensor 'b' [4, 8) overlaps tensor 'a' [0, 8)"}},
      {"hole", R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", 8, 0, {"[0, 4) before tensor 'a'"}},
      {"trailing", "{" + ok_a + "}", 12, 0, {"12 bytes but the tensors cover only 8"}},
      {"metadata", "{" + ok_a + R"(,"__metadata__":{"step":3}})", 8, 0, {"__metadata__ value of 'step'"}},
      {"notentry", R"({"a":7})", 0, 0, {"tensor 'a' is not a JSON object"}},
  };
  for (const CorruptCase& c : cases) {
    const std::string path = craft(dir, c.name, c.header, c.data_bytes, c.header_len_override == UINT64_MAX ? 0 : c.header_len_override);
    if (c.header_len_override == UINT64_MAX) {  // a zero length field
      std::string bytes(8, '\0');
      testing::write_text(path, bytes);
    }
    auto f = SafetensorsFile::open(path);
    ASSERT_FALSE(f.is_ok()) << c.name;
    EXPECT_EQ(f.status().code(), Code::corruption) << c.name << ": " << f.status().to_string();
    EXPECT_NE(f.status().message().find(path), std::string::npos) << c.name;
    for (const std::string& w : c.words) {
      EXPECT_NE(f.status().message().find(w), std::string::npos) << c.name << ": '" << w << "' not in " << f.status().to_string();
    }
  }
  testing::write_text(dir.file("tiny"), "abc");
  auto tiny = SafetensorsFile::open(dir.file("tiny"));
  EXPECT_EQ(tiny.status().code(), Code::corruption);
  EXPECT_NE(tiny.status().message().find("3 bytes is too short"), std::string::npos);
  EXPECT_EQ(SafetensorsFile::open(dir.file("absent")).status().code(), Code::not_found);
}

TEST(SafetensorsTest, DTypeNamesAndConversions) {
  EXPECT_EQ(*parse_safe_dtype("BF16"), SafeDType::bf16);
  EXPECT_EQ(safe_dtype_size(SafeDType::f8_e4m3), 1u);
  EXPECT_EQ(safe_dtype_name(SafeDType::boolean), "BOOL");
  EXPECT_EQ(to_dtype(SafeDType::f16), DType::f16);
  EXPECT_FALSE(to_dtype(SafeDType::f64).has_value());
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::u8, DType::u16, DType::i32, DType::u32}) {
    EXPECT_EQ(to_dtype(to_safe_dtype(t)), t);
    EXPECT_EQ(safe_dtype_size(to_safe_dtype(t)), dtype_size(t));
  }
}

}  // namespace
}  // namespace strata::model
