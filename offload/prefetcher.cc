// Prefetcher: trace record/replay (see prefetcher.h).
#include "offload/prefetcher.h"

#include <algorithm>

namespace strata {

Status Prefetcher::begin(std::string_view name) {
  if (open_) return error(Code::failed_precondition, "sequence '{}' begun while '{}' is open (sequences do not nest)", name, name_);
  open_ = true;
  name_ = std::string(name);
  pos_ = 0;
  recording_.clear();
  auto it = traces_.find(name);
  replay_ = it == traces_.end() ? nullptr : &it->second;
  replaying_ = replay_ != nullptr;
  return Status::ok();
}

Status Prefetcher::end() {
  if (!open_) return Status(Code::failed_precondition, "end of a sequence with none open");
  open_ = false;
  if (replaying_ && pos_ == replay_->size()) {
    stats_.sequences_replayed++;
  } else {
    if (replaying_) {  // ended early: the trace's prefix is this sequence's order
      stats_.mismatches++;
      recording_.assign(replay_->begin(), replay_->begin() + static_cast<std::ptrdiff_t>(pos_));
    }
    traces_[name_] = std::move(recording_);
    recording_.clear();
    stats_.sequences_recorded++;
  }
  replaying_ = false;
  replay_ = nullptr;
  pos_ = 0;
  return Status::ok();
}

void Prefetcher::on_access(size_t c) {
  if (!open_) return;
  stats_.accesses++;
  if (replaying_) {
    if (pos_ < replay_->size() && (*replay_)[pos_] == c) {
      pos_++;
      return;
    }
    // Departed (a different chunk, or past the trace's end): record this sequence from its start;
    // the accesses so far matched, so they are the trace's prefix.
    stats_.mismatches++;
    replaying_ = false;
    recording_.assign(replay_->begin(), replay_->begin() + static_cast<std::ptrdiff_t>(pos_));
  }
  recording_.push_back(c);
}

std::vector<size_t> Prefetcher::upcoming(uint64_t window_bytes, std::span<const uint64_t> chunk_bytes) const {
  std::vector<size_t> out;
  if (!replaying()) return out;
  const std::vector<size_t>& t = *replay_;
  const bool has_current = pos_ > 0;
  const size_t current = has_current ? t[pos_ - 1] : 0;
  uint64_t sum = 0;
  for (size_t i = pos_; i < t.size(); i++) {
    const size_t c = t[i];
    if ((has_current && c == current) || std::find(out.begin(), out.end(), c) != out.end()) continue;
    const uint64_t b = c < chunk_bytes.size() ? chunk_bytes[c] : 0;
    if (!out.empty() && sum + b > window_bytes) break;
    sum += b;
    out.push_back(c);
    if (sum >= window_bytes) break;
  }
  return out;
}

uint64_t Prefetcher::next_use(size_t c) const {
  if (!replaying()) return kNever;
  const std::vector<size_t>& t = *replay_;
  for (size_t i = pos_; i < t.size(); i++)
    if (t[i] == c) return i - pos_;
  return kNever;
}

void Prefetcher::next_uses(size_t chunks, std::vector<uint64_t>& out) const {
  out.assign(chunks, kNever);
  if (!replaying()) return;
  const std::vector<size_t>& t = *replay_;
  for (size_t i = t.size(); i-- > pos_;)  // backwards: the first access after pos_ is written last
    if (t[i] < chunks) out[t[i]] = i - pos_;
}

const std::vector<size_t>& Prefetcher::trace(std::string_view name) const {
  static const std::vector<size_t> kEmpty;
  auto it = traces_.find(name);
  return it == traces_.end() ? kEmpty : it->second;
}

}  // namespace strata
