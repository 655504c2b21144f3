// SlotRing: the device slots of a scale-out buffer, taken round robin -- GradientExchange's
// exchange slots and ShardedWeights' gathered slots. Per group the slots its owner allocated, which
// chunk holds each, and per chunk the slot it holds. Everything those slots take part in is queued
// on one stream (the compute stream), so a slot put back is free at once: stream order keeps its
// next use after its last (offload/slot_group.h's SlotGroup, with events, is for slots that two
// streams share).
// Not an allocator: the owner allocates and frees the bytes. Thread-safety: none; the owner's
// thread. Lifetime: the slots' bytes outlive the ring's use of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace strata {

class SlotRing {
 public:
  SlotRing() = default;
  // `chunk_group[c]` is chunk c's group, below `groups`.
  SlotRing(size_t groups, std::vector<size_t> chunk_group)
      : groups_(groups), chunk_group_(std::move(chunk_group)), slot_of_(chunk_group_.size(), -1) {}

  void add_slot(size_t group, std::byte* slot) {
    groups_[group].slots.push_back(slot);
    groups_[group].holder.push_back(-1);
  }

  // The slot chunk c holds, or null.
  std::byte* held(size_t c) const {
    return slot_of_[c] < 0 ? nullptr : groups_[chunk_group_[c]].slots[size_t(slot_of_[c])];
  }

  // The first free slot of c's group from the one after the last taken (round robin), now c's;
  // null when every slot of the group is held. c holds none before.
  std::byte* take(size_t c) {
    Group& g = groups_[chunk_group_[c]];
    for (size_t k = 0; k < g.slots.size(); ++k) {
      const size_t s = (g.next + k) % g.slots.size();
      if (g.holder[s] >= 0) continue;
      g.next = s + 1;
      g.holder[s] = int64_t(c);
      slot_of_[c] = int64_t(s);
      return g.slots[s];
    }
    return nullptr;
  }

  // Frees c's slot; c holds one.
  void put(size_t c) {
    groups_[chunk_group_[c]].holder[size_t(slot_of_[c])] = -1;
    slot_of_[c] = -1;
  }

  // The first chunk holding a slot, or -1.
  int64_t first_held() const {
    for (size_t c = 0; c < slot_of_.size(); ++c)
      if (slot_of_[c] >= 0) return int64_t(c);
    return -1;
  }

 private:
  struct Group {
    std::vector<std::byte*> slots;
    std::vector<int64_t> holder;  // the chunk holding each slot, -1: free
    size_t next = 0;              // where the next take starts looking
  };
  std::vector<Group> groups_;
  std::vector<size_t> chunk_group_;
  std::vector<int64_t> slot_of_;  // per chunk: its slot in its group while held, else -1
};

}  // namespace strata
