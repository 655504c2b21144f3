// SlotGroup: the device slots of one slot group -- K device buffers of the group's largest chunk,
// carved once from the Backend with tags "<owner> slot (<group>) i/n", each with the chunk it holds
// and two events ordering its writers and readers. Shared by TierManager (weights paged in) and
// GradientOffloader (gradients written by the backward and copied out). Not a policy: which slot
// a chunk takes (farthest-next-use eviction, round robin) stays with the owner.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/align.h"
#include "runtime/backend.h"
#include "runtime/status.h"

namespace strata {

// One device slot. The owner's driving thread reads and writes the fields; the events are recorded
// and waited on its streams.
struct DeviceSlot {
  std::byte* ptr = nullptr;  // the group's bytes() long
  int64_t chunk = -1;        // the chunk whose bytes it holds or receives; -1: free
  uint32_t holds = 0;        // acquires of that chunk not yet released
  uint64_t last_use = 0;     // the owner's clock at its last acquire or release (for an LRU choice)
  // The end of the last write into the slot (TierManager: the H2D copy, Stream::h2d; the gradient
  // offloader: the backward's writes, Stream::compute), and of the last read of it before it may be
  // overwritten (TierManager: the compute use before release; the gradient offloader: the D2H
  // copy-out, Stream::d2h).
  std::unique_ptr<Event> filled;
  std::unique_ptr<Event> drained;
};

struct SlotGroupSpec {
  std::string name;    // in tags and messages ("layers")
  uint64_t bytes = 0;  // per slot: the group's largest chunk (0: a group without chunks, no slots)
  uint32_t slots = 0;
};

// Ownership: the group owns its device blocks (released to `backend` when it dies) and events;
// the backend is borrowed and outlives it. The owner synchronizes the streams that use the slots
// before the group dies. Thread-safety: none; the owner's driving thread uses it.
class SlotGroup {
 public:
  SlotGroup() = default;
  SlotGroup(SlotGroup&& other) noexcept;
  SlotGroup& operator=(SlotGroup&& other) noexcept;
  SlotGroup(const SlotGroup&) = delete;
  SlotGroup& operator=(const SlotGroup&) = delete;
  ~SlotGroup();  // releases the blocks; an error is logged

  const std::string& name() const { return name_; }
  uint64_t bytes() const { return bytes_; }
  size_t size() const { return slots_.size(); }
  DeviceSlot& operator[](size_t i) { return slots_[i]; }
  const DeviceSlot& operator[](size_t i) const { return slots_[i]; }

 private:
  friend StatusOr<std::vector<SlotGroup>> carve_slot_groups(Backend&, std::string_view, std::span<const SlotGroupSpec>);
  void release();
  Backend* backend_ = nullptr;
  std::string name_;
  uint64_t bytes_ = 0;
  std::vector<DeviceSlot> slots_;
};

// Device bytes carve_slot_groups takes for `specs`: per group, slots x bytes rounded up to the
// arena's 256-byte block alignment. For a preflight against the device budget. Pure.
uint64_t slot_groups_device_bytes(std::span<const SlotGroupSpec> specs);

// One SlotGroup per spec, slot i of group g tagged "<owner> slot (<name>) <i+1>/<slots>". The
// backend's error (out_of_memory naming the tag) comes back with "<owner>: the device slots need
// <total> in all (...)" in front; what was carved is released.
StatusOr<std::vector<SlotGroup>> carve_slot_groups(Backend& backend, std::string_view owner,
                                                   std::span<const SlotGroupSpec> specs);

// "<names[g]>", or "group <g>" where names has none.
std::string slot_group_name(std::span<const std::string> names, size_t g);

// The specs of an owner's options: per group, its name, slot count and the largest of its chunks'
// bytes, each rounded up to `pad` (chunks whose group is out of range are skipped, so options that
// fail validation give the figure for their valid parts). Pure.
template <typename GroupIndex, typename SlotCount>
std::vector<SlotGroupSpec> slot_group_specs(const std::vector<uint64_t>& chunk_bytes,
                                            const std::vector<GroupIndex>& chunk_group,
                                            const std::vector<SlotCount>& group_slots,
                                            const std::vector<std::string>& group_names, uint64_t pad) {
  std::vector<SlotGroupSpec> specs(group_slots.size());
  for (size_t g = 0; g < specs.size(); g++) {
    specs[g].name = slot_group_name(group_names, g);
    specs[g].slots = static_cast<uint32_t>(group_slots[g]);
  }
  for (size_t c = 0; c < chunk_bytes.size() && c < chunk_group.size(); c++) {
    if (static_cast<size_t>(chunk_group[c]) >= specs.size()) continue;
    uint64_t& b = specs[chunk_group[c]].bytes;
    b = std::max(b, round_up(chunk_bytes[c], pad));
  }
  return specs;
}

}  // namespace strata
