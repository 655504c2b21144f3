// Safetensors reading (mmap + full validation) and atomic writing (temp file, fsync, rename).
// The JSON header is parsed and produced with nlohmann-json; the data section is never copied
// on read.
#include "model/hf/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <tuple>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "kernels/cpu/crc32c.h"
#include "model/hf/mapped_file.h"

namespace strata::model {
namespace {

struct DTypeRow {
  SafeDType type;
  std::string_view name;
  uint64_t size;
};
constexpr std::array<DTypeRow, 15> kDTypes{{
    {SafeDType::f64, "F64", 8},       {SafeDType::f32, "F32", 4},         {SafeDType::f16, "F16", 2},
    {SafeDType::bf16, "BF16", 2},     {SafeDType::i64, "I64", 8},         {SafeDType::i32, "I32", 4},
    {SafeDType::i16, "I16", 2},       {SafeDType::i8, "I8", 1},           {SafeDType::u64, "U64", 8},
    {SafeDType::u32, "U32", 4},       {SafeDType::u16, "U16", 2},         {SafeDType::u8, "U8", 1},
    {SafeDType::boolean, "BOOL", 1},  {SafeDType::f8_e4m3, "F8_E4M3", 1}, {SafeDType::f8_e5m2, "F8_E5M2", 1},
}};
static_assert(kDTypes.size() == static_cast<size_t>(SafeDType::f8_e5m2) + 1, "one row per SafeDType, in order");

constexpr std::string_view kMetadataKey = "__metadata__";

// dtype size * product(shape), or nullopt on overflow.
std::optional<uint64_t> byte_size(SafeDType dtype, const std::vector<uint64_t>& shape) {
  uint64_t n = safe_dtype_size(dtype);
  for (uint64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
  }
  return n;
}

std::string shape_text(const std::vector<uint64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

Status corrupt(const std::string& path, std::string_view what) {
  return error(Code::corruption, "safetensors file {}: {}; the file is damaged or not a safetensors file", path,
               what);
}

StatusOr<std::vector<uint64_t>> read_uint_array(const nlohmann::json& j, const std::string& path,
                                                const std::string& tensor, std::string_view field) {
  if (!j.is_array()) return corrupt(path, fmt::format("tensor '{}': \"{}\" is not an array", tensor, field));
  std::vector<uint64_t> out;
  for (const nlohmann::json& v : j) {
    if (!v.is_number_unsigned()) {
      return corrupt(path, fmt::format("tensor '{}': \"{}\" holds {}, not a non-negative integer", tensor, field,
                                       v.dump()));
    }
    out.push_back(v.get<uint64_t>());
  }
  return out;
}

StatusOr<SafetensorsTensor> parse_entry(const std::string& path, const std::string& name, const nlohmann::json& e) {
  if (!e.is_object()) return corrupt(path, fmt::format("tensor '{}' is not a JSON object", name));
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!e.contains(field)) return corrupt(path, fmt::format("tensor '{}' has no \"{}\"", name, field));
  }
  SafetensorsTensor t;
  t.name = name;
  if (!e["dtype"].is_string()) return corrupt(path, fmt::format("tensor '{}': dtype is not a string", name));
  StatusOr<SafeDType> dtype = parse_safe_dtype(e["dtype"].get<std::string>());
  if (!dtype.is_ok()) return corrupt(path, fmt::format("tensor '{}': {}", name, dtype.status().message()));
  t.dtype = *dtype;
  STRATA_ASSIGN_OR_RETURN(t.shape, read_uint_array(e["shape"], path, name, "shape"));
  STRATA_ASSIGN_OR_RETURN(std::vector<uint64_t> offsets, read_uint_array(e["data_offsets"], path, name, "data_offsets"));
  if (offsets.size() != 2) {
    return corrupt(path, fmt::format("tensor '{}': data_offsets has {} values, not [begin, end]", name, offsets.size()));
  }
  t.begin = offsets[0];
  t.end = offsets[1];
  if (t.begin > t.end) {
    return corrupt(path, fmt::format("tensor '{}': data_offsets [{}, {}] end before they begin", name, t.begin, t.end));
  }
  std::optional<uint64_t> expected = byte_size(t.dtype, t.shape);
  if (!expected || *expected != t.bytes()) {
    return corrupt(path, fmt::format("tensor '{}': {} {} needs {} bytes but data_offsets [{}, {}] span {}", name,
                                     safe_dtype_name(t.dtype), shape_text(t.shape),
                                     expected ? fmt::format("{}", *expected) : std::string("more than 2^64"),
                                     t.begin, t.end, t.bytes()));
  }
  return t;
}

// The offsets must tile [0, data_bytes) exactly: in bounds, no overlap, no hole.
Status check_layout(const std::string& path, std::vector<const SafetensorsTensor*> by_offset, uint64_t data_bytes) {
  std::sort(by_offset.begin(), by_offset.end(), [](const SafetensorsTensor* a, const SafetensorsTensor* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const SafetensorsTensor* previous = nullptr;
  for (const SafetensorsTensor* t : by_offset) {
    if (t->end > data_bytes) {
      return corrupt(path, fmt::format("tensor '{}' ends at data byte {} but the data section has only {} bytes "
                                       "(truncated file?)",
                                       t->name, t->end, data_bytes));
    }
    if (t->begin < covered) {
      return corrupt(path, fmt::format("tensor '{}' [{}, {}) overlaps tensor '{}' [{}, {})", t->name, t->begin,
                                       t->end, previous->name, previous->begin, previous->end));
    }
    if (t->begin > covered) {
      return corrupt(path, fmt::format("data bytes [{}, {}) before tensor '{}' belong to no tensor", covered,
                                       t->begin, t->name));
    }
    covered = t->end;
    previous = t;
  }
  if (covered != data_bytes) {
    return corrupt(path, fmt::format("the data section has {} bytes but the tensors cover only {}", data_bytes,
                                     covered));
  }
  return Status::ok();
}

Status write_all_at(int fd, const std::byte* p, uint64_t n, uint64_t offset, const std::string& path) {
  while (n > 0) {
    const ssize_t w = pwrite(fd, p, std::min<uint64_t>(n, 1ull << 30), static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno_status(errno, fmt::format("writing {} bytes at offset {} of {}", n, offset, path));
    }
    p += w;
    n -= static_cast<uint64_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return Status::ok();
}

// The JSON header text, padded with spaces so the data section starts 8-byte aligned (as the
// reference writer does). The same inputs give the same text: commit() relies on that to
// rewrite the checksum entry in place.
std::string header_text(const std::vector<SafetensorsSpec>& specs, const std::vector<uint64_t>& begins,
                        const std::vector<uint64_t>& sizes, const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  for (size_t i = 0; i < specs.size(); ++i) {
    header[specs[i].name] = {{"dtype", safe_dtype_name(specs[i].dtype)},
                             {"shape", specs[i].shape},
                             {"data_offsets", {begins[i], begins[i] + sizes[i]}}};
  }
  if (!metadata.empty()) header[std::string(kMetadataKey)] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

// The checksum metadata value: {"name":"xxxxxxxx",...}, every value 8 lowercase hex digits.
std::string checksum_text(const std::vector<SafetensorsSpec>& specs, const std::vector<uint32_t>& crcs) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t i = 0; i < specs.size(); ++i) j[specs[i].name] = fmt::format("{:08x}", crcs[i]);
  return j.dump();
}

// The piece `bytes` bytes at `offset` of tensor `index` fits the declared tensors: out_of_range
// naming the tensor otherwise.
Status check_piece(const std::string& path, const std::vector<SafetensorsSpec>& specs,
                   const std::vector<uint64_t>& sizes, size_t index, uint64_t bytes, uint64_t offset) {
  if (index >= specs.size())
    return error(Code::out_of_range, "tensor index {} for {} is past the {} declared tensors", index, path,
                 specs.size());
  if (offset > sizes[index] || bytes > sizes[index] - offset)
    return error(Code::out_of_range, "writing {} bytes at offset {} of tensor '{}' runs past its {} bytes ({})",
                 bytes, offset, specs[index].name, sizes[index], path);
  return Status::ok();
}

// Each tensor's place in the data section, in declaration order with no padding: begins and sizes
// appended; returns the section's bytes. invalid_argument naming the tensor whose size overflows.
StatusOr<uint64_t> place_tensors(const std::string& path, const std::vector<SafetensorsSpec>& specs,
                                 std::vector<uint64_t>& begins, std::vector<uint64_t>& sizes) {
  uint64_t offset = 0;
  for (const SafetensorsSpec& spec : specs) {
    const std::optional<uint64_t> size = byte_size(spec.dtype, spec.shape);
    if (!size || __builtin_add_overflow(offset, *size, &offset)) {
      return error(Code::invalid_argument, "tensor '{}' {} {} for {} is too large", spec.name,
                   safe_dtype_name(spec.dtype), shape_text(spec.shape), path);
    }
    begins.push_back(offset - *size);
    sizes.push_back(*size);
  }
  return offset;
}

// A piece of tensor `index` checked (check_piece) and written into `fd` at its place in the data
// section from `data_start`; its fragment (with its CRC-32C when `checksummed`) appended to `out`
// unless it is empty.
Status write_piece(int fd, const std::string& path, const std::vector<SafetensorsSpec>& specs,
                   const std::vector<uint64_t>& begins, const std::vector<uint64_t>& sizes, uint64_t data_start,
                   bool checksummed, size_t index, std::span<const std::byte> bytes, uint64_t offset,
                   std::vector<SafetensorsFragment>& out) {
  STRATA_RETURN_IF_ERROR(check_piece(path, specs, sizes, index, bytes.size(), offset));
  STRATA_RETURN_IF_ERROR(write_all_at(fd, bytes.data(), bytes.size(), data_start + begins[index] + offset, path));
  if (bytes.empty()) return Status::ok();
  out.push_back({.tensor = uint32_t(index),
                 .crc = checksummed ? kernels::crc32c(0, bytes.data(), bytes.size()) : 0,
                 .offset = offset,
                 .bytes = bytes.size()});
  return Status::ok();
}

Status fsync_directory_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_status(errno, fmt::format("opening directory {} to sync it", dir));
  Status s;
  if (fsync(fd) != 0) s = errno_status(errno, fmt::format("fsync of directory {}", dir));
  ::close(fd);
  return s;
}

}  // namespace

std::string_view safe_dtype_name(SafeDType t) { return kDTypes[static_cast<size_t>(t)].name; }
uint64_t safe_dtype_size(SafeDType t) { return kDTypes[static_cast<size_t>(t)].size; }

StatusOr<SafeDType> parse_safe_dtype(std::string_view name) {
  for (const DTypeRow& row : kDTypes) {
    if (row.name == name) return row.type;
  }
  return error(Code::invalid_argument, "unknown safetensors dtype '{}'", name);
}

std::optional<DType> to_dtype(SafeDType t) {
  switch (t) {
    case SafeDType::f32: return DType::f32;
    case SafeDType::f16: return DType::f16;
    case SafeDType::bf16: return DType::bf16;
    case SafeDType::u8: return DType::u8;
    case SafeDType::u16: return DType::u16;
    case SafeDType::i32: return DType::i32;
    case SafeDType::u32: return DType::u32;
    default: return std::nullopt;
  }
}

SafeDType to_safe_dtype(DType t) {
  switch (t) {
    case DType::f32: return SafeDType::f32;
    case DType::f16: return SafeDType::f16;
    case DType::bf16: return SafeDType::bf16;
    case DType::u8: return SafeDType::u8;
    case DType::u16: return SafeDType::u16;
    case DType::i32: return SafeDType::i32;
    case DType::u32: return SafeDType::u32;
  }
  return SafeDType::u8;
}

uint64_t SafetensorsTensor::elements() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

StatusOr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  STRATA_ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> file, MappedFile::open(path));
  const std::span<const std::byte> bytes = file->bytes();
  if (bytes.size() < 8) return corrupt(path, fmt::format("{} bytes is too short for the 8-byte header length", bytes.size()));
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);  // little-endian on every platform strata runs on
  if (header_len == 0 || header_len > kSafetensorsMaxHeaderBytes || header_len > bytes.size() - 8) {
    return corrupt(path, fmt::format("header length {} is not within 1..{} and the file's {} bytes after the length",
                                     header_len, kSafetensorsMaxHeaderBytes, bytes.size() - 8));
  }
  const char* header_text = reinterpret_cast<const char*>(bytes.data() + 8);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_text, header_text + header_len);
  } catch (const nlohmann::json::exception& e) {
    return corrupt(path, fmt::format("the header is not valid JSON ({})", e.what()));
  }
  if (!header.is_object()) return corrupt(path, "the header is not a JSON object");

  SafetensorsFile out;
  out.path_ = path;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == kMetadataKey) {
      if (!it->is_object()) return corrupt(path, "__metadata__ is not an object of strings");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) return corrupt(path, fmt::format("__metadata__ value of '{}' is not a string", m.key()));
        out.metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    STRATA_ASSIGN_OR_RETURN(SafetensorsTensor t, parse_entry(path, it.key(), *it));
    out.tensors_.push_back(std::move(t));
  }
  std::vector<const SafetensorsTensor*> by_offset;
  for (const SafetensorsTensor& t : out.tensors_) by_offset.push_back(&t);
  const uint64_t data_bytes = bytes.size() - 8 - header_len;
  STRATA_RETURN_IF_ERROR(check_layout(path, std::move(by_offset), data_bytes));
  out.data_section_ = bytes.data() + 8 + header_len;
  out.file_ = std::move(file);
  return out;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const SafetensorsTensor& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

std::span<const std::byte> SafetensorsFile::data(const SafetensorsTensor& t) const {
  return {data_section_ + t.begin, t.bytes()};
}

StatusOr<std::span<const std::byte>> SafetensorsFile::data(std::string_view name, SafeDType dtype,
                                                           const std::vector<uint64_t>& shape) const {
  const SafetensorsTensor* t = find(name);
  if (t == nullptr) {
    return error(Code::not_found, "tensor '{}' is not in {} ({} tensors); was it saved from another model?", name,
                 path_, tensors_.size());
  }
  if (t->dtype != dtype || t->shape != shape) {
    return error(Code::invalid_argument, "tensor '{}' in {} is {} {}, expected {} {}", name, path_,
                 safe_dtype_name(t->dtype), shape_text(t->shape), safe_dtype_name(dtype), shape_text(shape));
  }
  return data(*t);
}

StatusOr<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::create(std::string path,
                                                                       std::vector<SafetensorsSpec> specs,
                                                                       std::map<std::string, std::string> metadata,
                                                                       std::string checksum_key) {
  std::unique_ptr<SafetensorsWriter> w(new SafetensorsWriter());
  if (!checksum_key.empty() && metadata.contains(checksum_key)) {
    return error(Code::invalid_argument,
                 "metadata for {} already holds '{}', the key the writer records tensor checksums under", path,
                 checksum_key);
  }
  std::set<std::string_view> names;
  for (const SafetensorsSpec& spec : specs) {
    if (spec.name.empty() || spec.name == kMetadataKey || !names.insert(spec.name).second) {
      return error(Code::invalid_argument, "tensor name '{}' for {} is empty, reserved or given twice", spec.name,
                   path);
    }
  }
  STRATA_ASSIGN_OR_RETURN(const uint64_t offset, place_tensors(path, specs, w->begins_, w->sizes_));
  std::map<std::string, std::string> header_metadata = metadata;
  if (!checksum_key.empty()) {
    // "00000000" for each tensor: the header's length is fixed now, and commit() rewrites these
    // 8-digit values in place with the CRCs of the bytes written.
    header_metadata[checksum_key] = checksum_text(specs, std::vector<uint32_t>(specs.size(), 0));
    w->checksum_key_ = std::move(checksum_key);
    w->metadata_ = std::move(metadata);
  }
  const std::string text = header_text(specs, w->begins_, w->sizes_, header_metadata);

  w->path_ = std::move(path);
  w->temp_path_ = fmt::format("{}.tmp.{}", w->path_, getpid());
  w->fd_ = ::open(w->temp_path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd_ < 0) return errno_status(errno, fmt::format("creating checkpoint file {}", w->temp_path_));
  w->data_start_ = 8 + text.size();
  w->specs_ = std::move(specs);
  std::array<std::byte, 8> len{};
  const uint64_t header_len = text.size();
  std::memcpy(len.data(), &header_len, 8);
  STRATA_RETURN_IF_ERROR(write_all_at(w->fd_, len.data(), 8, 0, w->temp_path_));
  STRATA_RETURN_IF_ERROR(
      write_all_at(w->fd_, reinterpret_cast<const std::byte*>(text.data()), text.size(), 8, w->temp_path_));
  if (ftruncate(w->fd_, static_cast<off_t>(w->data_start_ + offset)) != 0) {
    return errno_status(errno, fmt::format("sizing {} to {} bytes", w->temp_path_, w->data_start_ + offset));
  }
  return w;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_path_.empty()) ::unlink(temp_path_.c_str());
}

Status SafetensorsWriter::write(size_t index, std::span<const std::byte> bytes, uint64_t offset) {
  if (committed_ || fd_ < 0) return error(Code::failed_precondition, "checkpoint {} is already committed", path_);
  return write_piece(fd_, temp_path_, specs_, begins_, sizes_, data_start_, checksummed(), index, bytes, offset,
                     fragments_);
}

Status SafetensorsWriter::accept(const SafetensorsFragment& f) {
  if (committed_ || fd_ < 0) return error(Code::failed_precondition, "checkpoint {} is already committed", path_);
  STRATA_RETURN_IF_ERROR(check_piece(path_, specs_, sizes_, f.tensor, f.bytes, f.offset));
  if (f.bytes > 0) fragments_.push_back(f);
  return Status::ok();
}

Status SafetensorsWriter::record_checksums(const std::vector<uint32_t>& crcs) {
  std::map<std::string, std::string> metadata = metadata_;
  metadata[checksum_key_] = checksum_text(specs_, crcs);
  const std::string text = header_text(specs_, begins_, sizes_, metadata);
  if (8 + text.size() != data_start_) {
    return error(Code::internal,
                 "the header of {} with checksums is {} bytes but {} were reserved at create(); the header was "
                 "not rewritten",
                 temp_path_, text.size(), data_start_ - 8);
  }
  return write_all_at(fd_, reinterpret_cast<const std::byte*>(text.data()), text.size(), 8, temp_path_);
}

Status SafetensorsWriter::commit() {
  if (committed_ || fd_ < 0) return error(Code::failed_precondition, "checkpoint {} is already committed", path_);
  // Tensor by tensor in offset order, each piece must start where the ones before it end; the
  // tensor's CRC is its pieces' joined in that order.
  std::sort(fragments_.begin(), fragments_.end(), [](const SafetensorsFragment& x, const SafetensorsFragment& y) {
    return std::tie(x.tensor, x.offset) < std::tie(y.tensor, y.offset);
  });
  std::vector<uint32_t> crcs(specs_.size(), 0);
  size_t next = 0;
  for (size_t i = 0; i < specs_.size(); ++i) {
    uint64_t total = 0, covered = 0;
    std::string problem;
    for (; next < fragments_.size() && fragments_[next].tensor == i; ++next) {
      const SafetensorsFragment& f = fragments_[next];
      total += f.bytes;
      if (problem.empty() && f.offset != covered)
        problem = f.offset > covered ? fmt::format("no piece starts at byte {}", covered)
                                     : fmt::format("two pieces overlap at byte {}", f.offset);
      covered = std::max(covered, f.offset + f.bytes);
      crcs[i] = kernels::crc32c_combine(crcs[i], f.crc, f.bytes);
    }
    if (problem.empty() && covered != sizes_[i]) problem = fmt::format("no piece starts at byte {}", covered);
    if (!problem.empty()) {
      return error(Code::failed_precondition,
                   "tensor '{}' of checkpoint {} got {} of its {} bytes ({}); write every byte of every tensor once "
                   "before commit()",
                   specs_[i].name, path_, total, sizes_[i], problem);
    }
  }
  if (checksummed()) STRATA_RETURN_IF_ERROR(record_checksums(crcs));
  if (fsync(fd_) != 0) return errno_status(errno, fmt::format("fsync of {}", temp_path_));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return errno_status(errno, fmt::format("closing {}", temp_path_));
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    return errno_status(errno, fmt::format("renaming {} to {}", temp_path_, path_));
  }
  committed_ = true;
  return fsync_directory_of(path_);
}

StatusOr<std::unique_ptr<SafetensorsPeerWriter>> SafetensorsPeerWriter::open(std::string temp_path,
                                                                              const std::vector<SafetensorsSpec>& specs,
                                                                              uint64_t data_start, bool checksummed) {
  std::unique_ptr<SafetensorsPeerWriter> w(new SafetensorsPeerWriter());
  STRATA_ASSIGN_OR_RETURN(const uint64_t offset, place_tensors(temp_path, specs, w->begins_, w->sizes_));
  w->fd_ = ::open(temp_path.c_str(), O_WRONLY | O_CLOEXEC);
  if (w->fd_ < 0) return errno_status(errno, fmt::format("opening {} to write a shard into it", temp_path));
  struct stat st{};
  if (fstat(w->fd_, &st) != 0) return errno_status(errno, fmt::format("stat of {}", temp_path));
  if (uint64_t(st.st_size) != data_start + offset)
    return error(Code::invalid_argument, "{} is {} bytes, not the {} its tensors and header take: not the file "
                 "its writer declared", temp_path, st.st_size, data_start + offset);
  w->path_ = std::move(temp_path);
  w->specs_ = specs;
  w->data_start_ = data_start;
  w->checksummed_ = checksummed;
  return w;
}

SafetensorsPeerWriter::~SafetensorsPeerWriter() {
  if (fd_ >= 0) ::close(fd_);
}

Status SafetensorsPeerWriter::write(size_t index, std::span<const std::byte> bytes, uint64_t offset) {
  if (fd_ < 0) return error(Code::failed_precondition, "the shard writer of {} is finished", path_);
  return write_piece(fd_, path_, specs_, begins_, sizes_, data_start_, checksummed_, index, bytes, offset,
                     fragments_);
}

Status SafetensorsPeerWriter::finish() {
  if (fd_ < 0) return Status::ok();
  Status s;
  if (fsync(fd_) != 0) s = errno_status(errno, fmt::format("fsync of {}", path_));
  if (::close(fd_) != 0 && s.is_ok()) s = errno_status(errno, fmt::format("closing {}", path_));
  fd_ = -1;
  return s;
}

Status write_safetensors(const std::string& path, std::span<const SafetensorsBlob> tensors,
                         const std::map<std::string, std::string>& metadata, const std::string& checksum_key) {
  std::vector<SafetensorsSpec> specs;
  for (const SafetensorsBlob& blob : tensors) {
    std::optional<uint64_t> size = byte_size(blob.spec.dtype, blob.spec.shape);
    if (size && *size != blob.bytes.size()) {
      return error(Code::invalid_argument, "tensor '{}' is {} {} ({} bytes) but {} bytes were given", blob.spec.name,
                   safe_dtype_name(blob.spec.dtype), shape_text(blob.spec.shape), *size, blob.bytes.size());
    }
    specs.push_back(blob.spec);
  }
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsWriter> writer, SafetensorsWriter::create(path, std::move(specs), metadata, checksum_key));
  for (size_t i = 0; i < tensors.size(); ++i) STRATA_RETURN_IF_ERROR(writer->write(i, tensors[i].bytes));
  return writer->commit();
}

}  // namespace strata::model
