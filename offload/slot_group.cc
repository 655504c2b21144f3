// SlotGroup (slot_group.h): carving the groups' device slots, and giving them back.
#include "offload/slot_group.h"

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "runtime/units.h"

namespace strata {
namespace {

constexpr uint64_t kArenaAlignment = 256;  // Backend::allocate's block alignment

}  // namespace

SlotGroup::SlotGroup(SlotGroup&& other) noexcept
    : backend_(other.backend_), name_(std::move(other.name_)), bytes_(other.bytes_), slots_(std::move(other.slots_)) {
  other.backend_ = nullptr;
  other.slots_.clear();
}

SlotGroup& SlotGroup::operator=(SlotGroup&& other) noexcept {
  if (this != &other) {
    release();
    backend_ = other.backend_;
    name_ = std::move(other.name_);
    bytes_ = other.bytes_;
    slots_ = std::move(other.slots_);
    other.backend_ = nullptr;
    other.slots_.clear();
  }
  return *this;
}

SlotGroup::~SlotGroup() { release(); }

void SlotGroup::release() {
  for (DeviceSlot& s : slots_) {
    if (s.ptr == nullptr) continue;
    Status r = backend_->release(s.ptr);
    if (!r.is_ok()) spdlog::error("releasing device slot of group '{}': {}", name_, r.to_string());
    s.ptr = nullptr;
  }
  slots_.clear();
}

uint64_t slot_groups_device_bytes(std::span<const SlotGroupSpec> specs) {
  uint64_t total = 0;
  for (const SlotGroupSpec& g : specs) total += g.slots * round_up(g.bytes, kArenaAlignment);
  return total;
}

std::string slot_group_name(std::span<const std::string> names, size_t g) {
  return g < names.size() && !names[g].empty() ? names[g] : fmt::format("group {}", g);
}

StatusOr<std::vector<SlotGroup>> carve_slot_groups(Backend& backend, std::string_view owner,
                                                   std::span<const SlotGroupSpec> specs) {
  std::vector<SlotGroup> groups(specs.size());
  for (size_t g = 0; g < specs.size(); g++) {
    SlotGroup& group = groups[g];
    group.backend_ = &backend;
    group.name_ = specs[g].name;
    group.bytes_ = specs[g].bytes;
    if (specs[g].bytes == 0) continue;  // a group without chunks needs no slots
    group.slots_.reserve(specs[g].slots);
    for (uint32_t i = 0; i < specs[g].slots; i++) {
      StatusOr<void*> p = backend.allocate(specs[g].bytes, fmt::format("{} slot ({}) {}/{}", owner, specs[g].name,
                                                                       i + 1, specs[g].slots));
      if (!p.is_ok()) {
        return p.status().with_context(fmt::format(
            "{}: the device slots need {} in all (the minimum for these slot groups; lower the slot counts or raise "
            "the device budget)",
            owner, format_size(slot_groups_device_bytes(specs))));
      }
      DeviceSlot s;
      s.ptr = static_cast<std::byte*>(*p);
      s.filled = backend.create_event();
      s.drained = backend.create_event();
      group.slots_.push_back(std::move(s));
    }
  }
  return groups;
}

}  // namespace strata
