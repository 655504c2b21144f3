// SlotGroup (offload/slot_group.h): groups carved with their tags, sizes and events, a group
// without chunks getting no slots, the preflight bytes equal to what the arena hands out, a failure
// naming the slot and the total and leaving nothing allocated, and the specs from chunk sizes.
#include "offload/slot_group.h"

#include <cstring>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/backend.h"

namespace strata {
namespace {

std::unique_ptr<Backend> slot_test_backend(uint64_t budget) {
  auto b = make_backend(BackendOptions{.kind = BackendKind::cpu, .memory_budget = budget});
  EXPECT_TRUE(b.is_ok()) << b.status().to_string();
  return b.is_ok() ? std::move(*b) : nullptr;
}

TEST(SlotGroup, CarvesEverySlotWithItsEventsAndTheBytesThePreflightPredicts) {
  std::unique_ptr<Backend> backend = slot_test_backend(8u << 20);
  ASSERT_TRUE(backend);
  const std::vector<SlotGroupSpec> specs = {{"embedding", 5000, 1}, {"layers", 12288, 3}, {"empty", 0, 2}};
  {
    auto carved = carve_slot_groups(*backend, "weights", specs);
    ASSERT_TRUE(carved.is_ok()) << carved.status().to_string();
    std::vector<SlotGroup>& groups = *carved;
    ASSERT_EQ(groups.size(), 3u);
    EXPECT_EQ(groups[0].name(), "embedding");
    EXPECT_EQ(groups[0].size(), 1u);
    EXPECT_EQ(groups[1].size(), 3u);
    EXPECT_EQ(groups[1].bytes(), 12288u);
    EXPECT_EQ(groups[2].size(), 0u);  // a group without chunks needs no slots
    for (const SlotGroup& g : groups) {
      for (size_t i = 0; i < g.size(); i++) {
        EXPECT_NE(g[i].ptr, nullptr);
        EXPECT_EQ(g[i].chunk, -1);
        EXPECT_EQ(g[i].holds, 0u);
        EXPECT_TRUE(g[i].filled && g[i].drained);
        std::memset(g[i].ptr, 0x5a, g.bytes());  // the whole slot is usable (the CPU arena is host memory)
      }
    }
    EXPECT_NE(groups[1][0].ptr, groups[1][1].ptr);
    // 5000 rounds up to the arena's 256-byte blocks; 12288 already is a multiple.
    EXPECT_EQ(slot_groups_device_bytes(specs), 5120u + 3 * 12288u);
    EXPECT_EQ(backend->memory().in_use, slot_groups_device_bytes(specs));
    EXPECT_EQ(backend->memory().allocations, 4u);
  }
  EXPECT_EQ(backend->memory().in_use, 0u);  // the groups gave their slots back
}

TEST(SlotGroup, AMovedGroupKeepsItsSlotsAndReleasesThemOnce) {
  std::unique_ptr<Backend> backend = slot_test_backend(1u << 20);
  ASSERT_TRUE(backend);
  const std::vector<SlotGroupSpec> specs = {{"layers", 4096, 2}};
  auto carved = carve_slot_groups(*backend, "gradient", specs);
  ASSERT_TRUE(carved.is_ok()) << carved.status().to_string();
  SlotGroup moved = std::move((*carved)[0]);
  carved->clear();  // the moved-from group holds nothing to release
  EXPECT_EQ(moved.size(), 2u);
  EXPECT_EQ(backend->memory().allocations, 2u);
  moved = SlotGroup();
  EXPECT_EQ(backend->memory().in_use, 0u);
}

TEST(SlotGroup, AFailedCarveNamesTheSlotAndTheTotalAndLeavesNothing) {
  std::unique_ptr<Backend> backend = slot_test_backend(1u << 20);
  ASSERT_TRUE(backend);
  const std::vector<SlotGroupSpec> specs = {{"embedding", 256 << 10, 1}, {"layers", 512 << 10, 2}};
  auto carved = carve_slot_groups(*backend, "weights", specs);
  ASSERT_FALSE(carved.is_ok());
  EXPECT_EQ(carved.status().code(), Code::out_of_memory) << carved.status().to_string();
  EXPECT_NE(carved.status().message().find("weights slot (layers) 2/2"), std::string::npos) << carved.status().to_string();
  EXPECT_NE(carved.status().message().find("the device slots need 1.25 MiB in all"), std::string::npos)
      << carved.status().to_string();
  EXPECT_EQ(backend->memory().in_use, 0u);
}

TEST(SlotGroup, SpecsTakeEachGroupsLargestPaddedChunkAndDefaultNames) {
  const std::vector<uint64_t> bytes = {100, 5000, 4096, 8200, 7};
  const std::vector<uint32_t> group = {0, 1, 1, 1, 9};  // chunk 4's group is out of range: skipped
  const std::vector<uint32_t> slots = {1, 2, 1};
  const std::vector<SlotGroupSpec> padded = slot_group_specs(bytes, group, slots, {"", "layers"}, 4096);
  ASSERT_EQ(padded.size(), 3u);
  EXPECT_EQ(padded[0].name, "group 0");
  EXPECT_EQ(padded[1].name, "layers");
  EXPECT_EQ(padded[2].name, "group 2");
  EXPECT_EQ(padded[0].bytes, 4096u);
  EXPECT_EQ(padded[1].bytes, 12288u);
  EXPECT_EQ(padded[2].bytes, 0u);
  EXPECT_EQ(padded[1].slots, 2u);
  const std::vector<SlotGroupSpec> exact = slot_group_specs(bytes, group, slots, {}, 1);
  EXPECT_EQ(exact[0].bytes, 100u);
  EXPECT_EQ(exact[1].bytes, 8200u);
}

}  // namespace
}  // namespace strata
