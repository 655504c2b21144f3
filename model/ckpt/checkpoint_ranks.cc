// The messages of a checkpoint written by several ranks (see checkpoint_ranks.h).
#include "model/ckpt/checkpoint_ranks.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace strata::model {

StatusOr<std::vector<std::string>> CheckpointRanks::all_gather(const std::string& mine) {
  // The lengths first (8 bytes a rank), then every text in a block as long as the longest.
  const uint64_t n = mine.size();
  std::vector<uint64_t> lengths(size_t(size_), 0);
  STRATA_RETURN_IF_ERROR(gather_.gather(reinterpret_cast<const std::byte*>(&n), sizeof(n), sizeof(n),
                                        reinterpret_cast<std::byte*>(lengths.data()), lengths.size() * sizeof(n)));
  const uint64_t block = *std::max_element(lengths.begin(), lengths.end());
  std::vector<std::string> out(static_cast<size_t>(size_));
  if (block == 0) return out;
  std::string all(block * uint64_t(size_), '\0');
  STRATA_RETURN_IF_ERROR(gather_.gather(reinterpret_cast<const std::byte*>(mine.data()), n, block,
                                        reinterpret_cast<std::byte*>(all.data()), all.size()));
  for (size_t r = 0; r < out.size(); ++r) out[r] = all.substr(r * block, lengths[r]);
  return out;
}

StatusOr<std::string> CheckpointRanks::broadcast(const std::string& text) {
  STRATA_ASSIGN_OR_RETURN(std::vector<std::string> all, all_gather(rank_ == 0 ? text : std::string()));
  return std::move(all[0]);
}

Status CheckpointRanks::send_failure(const Status& why) {
  return send_files(nlohmann::json{{"error", why.is_ok() ? std::string("no files") : why.message()}}.dump()).status();
}

bool CheckpointRanks::failed_files(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  return !j.is_object() || j.contains("error");
}

std::string CheckpointRanks::encode_status(const Status& s) {
  const int32_t head[2] = {int32_t(s.code()), int32_t(s.sys_errno())};
  const uint64_t n = s.message().size();
  std::string out(sizeof(head) + sizeof(n), '\0');
  std::memcpy(out.data(), head, sizeof(head));
  std::memcpy(out.data() + sizeof(head), &n, sizeof(n));
  return out + s.message();
}

Status CheckpointRanks::decode_status(const std::string& bytes, size_t& at, Status& out) {
  int32_t head[2] = {0, 0};
  uint64_t n = 0;
  if (at > bytes.size() || bytes.size() - at < sizeof(head) + sizeof(n))
    return error(Code::corruption, "a rank's checkpoint status is cut short ({} bytes)", bytes.size());
  std::memcpy(head, bytes.data() + at, sizeof(head));
  std::memcpy(&n, bytes.data() + at + sizeof(head), sizeof(n));
  at += sizeof(head) + sizeof(n);
  if (bytes.size() - at < n) return error(Code::corruption, "a rank's checkpoint status is cut short");
  out = head[0] == int32_t(Code::ok) ? Status::ok() : Status(Code(head[0]), bytes.substr(at, n), head[1]);
  at += n;
  return Status::ok();
}

Status CheckpointRanks::agree(const Status& mine, Status& agreed) {
  STRATA_ASSIGN_OR_RETURN(std::vector<std::string> all, all_gather(encode_status(mine)));
  for (size_t r = 0; r < all.size(); ++r) {
    size_t at = 0;
    Status s;
    STRATA_RETURN_IF_ERROR(decode_status(all[r], at, s));
    if (s.is_ok()) continue;
    agreed = Status(s.code(), fmt::format("rank {}: {}", r, s.message()), s.sys_errno());
    return Status::ok();
  }
  agreed = Status::ok();
  return Status::ok();
}

}  // namespace strata::model
