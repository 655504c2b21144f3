// Safetensors: the checkpoint file format of Hugging Face (an 8-byte little-endian header length
// N, N bytes of JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
// {string: string}}, then the tensor bytes; offsets are relative to the end of the header).
// Reading maps the file and validates everything before handing out a byte; writing goes to a
// temporary file in the destination's directory, is fsynced and renamed into place, so a crash
// never leaves a half-written checkpoint under the final name. Not a tensor library: bytes,
// dtypes and shapes only; conversion between dtypes is the caller's business.
// Thread-safety: a SafetensorsFile is immutable (readable from any thread); a SafetensorsWriter
// is used by one thread at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/status.h"

namespace strata::model {

class MappedFile;

// The dtypes of the safetensors specification.
enum class SafeDType : uint8_t { f64, f32, f16, bf16, i64, i32, i16, i8, u64, u32, u16, u8, boolean, f8_e4m3, f8_e5m2 };

std::string_view safe_dtype_name(SafeDType t);  // "F32", "BF16", "BOOL", "F8_E4M3", ...
uint64_t safe_dtype_size(SafeDType t);          // bytes per element
StatusOr<SafeDType> parse_safe_dtype(std::string_view name);
// Conversions to and from strata's DType where one exists (f32 f16 bf16 u8 u16 i32 u32).
std::optional<DType> to_dtype(SafeDType t);
SafeDType to_safe_dtype(DType t);

// Header lengths above this are rejected (the reference implementation's limit, 100 MB).
inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;

struct SafetensorsTensor {
  std::string name;
  SafeDType dtype = SafeDType::f32;
  std::vector<uint64_t> shape;
  uint64_t begin = 0;  // byte offsets in the data section
  uint64_t end = 0;
  uint64_t elements() const;
  uint64_t bytes() const { return end - begin; }
};

class SafetensorsFile {
 public:
  // Maps and validates `path`. Every problem is `corruption` naming the file (and the tensor):
  // file shorter than 8 bytes; header length 0, above kSafetensorsMaxHeaderBytes or past the end
  // of the file; header not JSON or not an object; a tensor entry without dtype/shape/
  // data_offsets, with an unknown dtype, negative or non-integer dims, begin > end, or a byte size
  // other than dtype size * product(shape); offsets out of bounds, overlapping, or leaving a hole
  // (the data section must be covered exactly, as the reference reader requires); a
  // __metadata__ that is not a string map. Plus the errno errors of opening the file.
  static StatusOr<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  // sorted by name
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // nullptr when absent.
  const SafetensorsTensor* find(std::string_view name) const;
  // The tensor's bytes in the mapping (valid while this object or a copy lives). Tensors are
  // packed back to back, so the bytes are aligned only as the file's layout makes them (the
  // data section starts 8-byte aligned in files this writer makes): memcpy, or check alignment.
  std::span<const std::byte> data(const SafetensorsTensor& t) const;
  // not_found naming the tensor and file, or invalid_argument when dtype/shape differ.
  StatusOr<std::span<const std::byte>> data(std::string_view name, SafeDType dtype,
                                            const std::vector<uint64_t>& shape) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::shared_ptr<const MappedFile> file_;
  const std::byte* data_section_ = nullptr;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

// One contiguous piece of a tensor as written: `bytes` bytes at byte `offset` within tensor
// `tensor` (declaration order), whose CRC-32C is `crc` (0 when the writer records no checksums).
struct SafetensorsFragment {
  uint32_t tensor = 0;
  uint32_t crc = 0;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// The declaration of one tensor to be written (its bytes come later, or at once below).
struct SafetensorsSpec {
  std::string name;
  SafeDType dtype = SafeDType::f32;
  std::vector<uint64_t> shape;
};

// Tensors are laid out in declaration order with no padding (the format allows no holes);
// declare wider dtypes first to keep every tensor aligned to its element size.
// Streams a checkpoint too big for memory: declare every tensor up front (the header with all
// offsets is written at once), then write each tensor's bytes, in pieces and in any order, then
// commit(). Destroying an uncommitted writer removes the temporary file.
//
// Checksums (optional, `checksum_key` non-empty): the header carries metadata[checksum_key], a
// JSON object text {"name":"xxxxxxxx",...} with each tensor's CRC-32C (kernels::crc32c) as 8
// lowercase hex digits, the form model/ckpt/checkpoint.cc records under kCrcMetadataKey. create()
// writes "00000000" for every tensor; commit() rewrites the header in place with the real values
// before the fsync (same length, since every value is 8 characters; a length mismatch is
// `internal` and the header is left alone). Each piece is checksummed as it is written (its
// SafetensorsFragment); commit() joins a tensor's fragments in offset order with
// kernels::crc32c_combine, so pieces may come in any order at no extra I/O.
//
// Pieces written by other processes (the ranks of a scale-out checkpoint, through a
// SafetensorsPeerWriter on temp_path()) are handed to accept() as their fragments: they count
// toward the tensor's bytes and checksum as if written here. The writer's commit() is the only
// one: the peers fsync their own writes before they report their fragments.
class SafetensorsWriter {
 public:
  // invalid_argument for an empty or duplicate name, a name "__metadata__", a size overflow, or a
  // non-empty `checksum_key` that `metadata` already holds; errno errors of creating the temporary
  // file "<path>.tmp.<pid>" in the same directory.
  static StatusOr<std::unique_ptr<SafetensorsWriter>> create(std::string path, std::vector<SafetensorsSpec> specs,
                                                             std::map<std::string, std::string> metadata = {},
                                                             std::string checksum_key = {});
  ~SafetensorsWriter();

  // Writes `bytes` at `offset` within tensor `index` (declaration order). Pieces of one tensor must
  // not overlap (commit() refuses them). out_of_range when the piece runs past the tensor; errno
  // errors of pwrite.
  Status write(size_t index, std::span<const std::byte> bytes, uint64_t offset = 0);
  // A piece another process wrote into temp_path() (SafetensorsPeerWriter::fragments()), counted
  // as if write() had written it. out_of_range when it runs past its tensor or names none.
  Status accept(const SafetensorsFragment& fragment);
  // failed_precondition naming the first tensor whose pieces do not cover its bytes exactly once
  // (a gap or an overlap); with checksums, the header rewrite (errno errors of pwrite, `internal`
  // on a length mismatch); then fsync, rename over `path`, fsync the directory.
  Status commit();

  const std::string& temp_path() const { return temp_path_; }
  uint64_t data_start() const { return data_start_; }          // file offset of the data section
  bool checksummed() const { return !checksum_key_.empty(); }

 private:
  SafetensorsWriter() = default;
  Status record_checksums(const std::vector<uint32_t>& crcs);  // the header rewritten with them

  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;  // file offset of the data section
  std::vector<SafetensorsSpec> specs_;
  std::vector<uint64_t> begins_;
  std::vector<uint64_t> sizes_;
  std::vector<SafetensorsFragment> fragments_;  // as written or accepted (commit() sorts them)
  bool committed_ = false;
  std::string checksum_key_;  // empty: no checksums
  std::map<std::string, std::string> metadata_;  // as given, without the checksum entry
};

// The pieces one process writes into a file another process's SafetensorsWriter created (a rank of
// a scale-out checkpoint writing its shard into rank 0's files): opens the writer's temp_path()
// without creating or truncating it and writes each piece at its place, recording its fragment
// (and, with `checksummed`, its CRC-32C); finish() fsyncs and closes, after which fragments() go to
// the creating writer's accept(). Never renames or removes the file. One thread at a time.
class SafetensorsPeerWriter {
 public:
  // `specs` must be the creating writer's (the same names, dtypes, shapes, in order) and
  // `data_start` its data_start(). not_found (errno ENOENT) when the file is not there -- the
  // directory is not shared with its creator; invalid_argument when its size is not
  // data_start + the tensors' bytes.
  static StatusOr<std::unique_ptr<SafetensorsPeerWriter>> open(std::string temp_path, const std::vector<SafetensorsSpec>& specs,
                                                               uint64_t data_start, bool checksummed);
  ~SafetensorsPeerWriter();
  // As SafetensorsWriter::write.
  Status write(size_t index, std::span<const std::byte> bytes, uint64_t offset = 0);
  // fsync and close: the pieces are durable before the creator commits. Errno errors naming the file.
  Status finish();
  const std::vector<SafetensorsFragment>& fragments() const { return fragments_; }

 private:
  SafetensorsPeerWriter() = default;
  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;
  bool checksummed_ = false;
  std::vector<SafetensorsSpec> specs_;
  std::vector<uint64_t> begins_, sizes_;
  std::vector<SafetensorsFragment> fragments_;
};

// One tensor held in memory, for write_safetensors.
struct SafetensorsBlob {
  SafetensorsSpec spec;
  std::span<const std::byte> bytes;  // exactly dtype size * product(shape) bytes
};

// Writes a whole file from memory, atomically (SafetensorsWriter underneath), with per-tensor
// CRC-32Cs under metadata[checksum_key] when the key is non-empty (see SafetensorsWriter).
// invalid_argument when a blob's byte count does not match its dtype and shape, or as create().
Status write_safetensors(const std::string& path, std::span<const SafetensorsBlob> tensors,
                         const std::map<std::string, std::string>& metadata = {},
                         const std::string& checksum_key = {});

}  // namespace strata::model
