// The offload config keys: defaults, ranges, DeepSpeed JSON aliases, and the IoEngineConfig read
// back from them.
#include "offload/config_keys.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

Config offload_config() {
  ConfigSchema schema;
  add_offload_config_keys(schema);
  return Config(schema);
}

TEST(OffloadConfigKeys, DefaultsGiveTheDefaultEngineShape) {
  Config c = offload_config();
  auto e = io_engine_config(c);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  EXPECT_EQ(e->kind, IoEngineKind::auto_select);
  EXPECT_EQ(e->shape.block_bytes, 1u << 20);
  EXPECT_EQ(e->shape.queue_depth, 32u);
  EXPECT_EQ(c.get_size("nvme_stripe_unit"), 8u << 20);
  EXPECT_TRUE(c.get_list("nvme_path").empty());
}

TEST(OffloadConfigKeys, DeepSpeedPathsAreAliases) {
  ConfigSchema schema;
  add_offload_config_keys(schema);
  ASSERT_NE(schema.find_by_file_path("aio.block_size"), nullptr);
  EXPECT_EQ(schema.find_by_file_path("aio.block_size")->name, "aio_block_size");
  EXPECT_EQ(schema.find_by_file_path("aio.queue_depth")->name, "aio_queue_depth");
  EXPECT_EQ(schema.find_by_file_path("zero_optimization.offload_optimizer.nvme_path")->name, "nvme_path");
  EXPECT_EQ(schema.find_by_file_path("zero_optimization.offload_param.nvme_path")->name, "nvme_path");
}

TEST(OffloadConfigKeys, ValuesAreCheckedAndRead) {
  Config c = offload_config();
  ASSERT_TRUE(c.set("io_engine", "posix", ConfigSource::flag, "--io-engine").is_ok());
  ASSERT_TRUE(c.set("aio_queue_depth", "8", ConfigSource::env, "STRATA_AIO_QUEUE_DEPTH").is_ok());
  ASSERT_TRUE(c.set("nvme_path", "/mnt/a,/mnt/b", ConfigSource::flag, "--nvme-path").is_ok());
  EXPECT_EQ(c.get_list("nvme_path").size(), 2u);
  auto e = io_engine_config(c);
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->kind, IoEngineKind::posix);
  EXPECT_EQ(e->shape.queue_depth, 8u);
  EXPECT_EQ(c.set("aio_queue_depth", "0", ConfigSource::flag, "--aio-queue-depth").code(), Code::out_of_range);
  EXPECT_FALSE(c.set("io_engine", "aio", ConfigSource::flag, "--io-engine").is_ok());
  ASSERT_TRUE(c.set("aio_block_size", "6000", ConfigSource::flag, "--aio-block-size").is_ok());
  auto odd = io_engine_config(c);
  EXPECT_EQ(odd.status().code(), Code::invalid_argument);
  EXPECT_NE(odd.status().message().find("not a multiple of 4 KiB"), std::string::npos) << odd.status().message();
}

TEST(IoEngineFactory, PosixWhenAskedAndKindsParse) {
  auto choice = make_io_engine(IoEngineConfig{IoEngineKind::posix, IoShape{}}, {});
  ASSERT_TRUE(choice.is_ok());
  EXPECT_EQ(choice->engine->name(), "posix");
  EXPECT_TRUE(choice->fallback_reason.empty());
  EXPECT_EQ(*parse_io_engine_kind("io_uring"), IoEngineKind::io_uring);
  EXPECT_EQ(parse_io_engine_kind("libaio").status().code(), Code::invalid_argument);
  // auto on a disk path takes io_uring where it works, else posix with a reason.
  auto autod = make_io_engine(IoEngineConfig{}, {STRATA_BINARY_DIR});
  ASSERT_TRUE(autod.is_ok()) << autod.status().to_string();
  if (autod->engine->name() == "posix") EXPECT_FALSE(autod->fallback_reason.empty());
  else EXPECT_EQ(autod->engine->name(), "io_uring");
}

}  // namespace
}  // namespace strata
