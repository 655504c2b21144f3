// TensorBoard event files (model/train/tensorboard_writer.h): TFRecord's masked CRC-32C on known vectors
// (the values TensorBoard's own reader computes), the framing byte for byte, and a written file
// read back record by record -- both CRCs checked, each Event parsed with the same messages -- the
// file version first, then each step's scalars under DeepSpeed's tags at the samples trained.
#include "model/train/tensorboard_writer.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>

#include "tensorboard_event.pb.h"

namespace strata::model {
namespace {

namespace fs = std::filesystem;

TEST(TensorBoardWriterTest, MaskedCrcMatchesTensorBoards) {
  EXPECT_EQ(tfrecord_masked_crc("", 0), 0xa282ead8u);
  EXPECT_EQ(tfrecord_masked_crc("123456789", 9), 0xc78ab0e5u);
}

TEST(TensorBoardWriterTest, FrameIsLengthCrcPayloadCrc) {
  const std::string framed = tfrecord_frame("123456789");
  ASSERT_EQ(framed.size(), 8u + 4u + 9u + 4u);
  const std::string length("\x09\0\0\0\0\0\0\0", 8);
  EXPECT_EQ(framed.substr(0, 8), length);
  uint32_t length_crc = 0, payload_crc = 0;
  std::memcpy(&length_crc, framed.data() + 8, 4);
  std::memcpy(&payload_crc, framed.data() + 21, 4);
  EXPECT_EQ(length_crc, 0x3971f937u);  // TensorBoard's masked_crc32c(struct.pack("<Q", 9))
  EXPECT_EQ(framed.substr(12, 9), "123456789");
  EXPECT_EQ(payload_crc, 0xc78ab0e5u);
}

// Every record of an event file, each CRC checked.
std::vector<tensorboard::Event> read_events(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  std::vector<tensorboard::Event> events;
  for (size_t at = 0; at < bytes.size();) {
    EXPECT_LE(at + 12, bytes.size());
    uint64_t length = 0;
    uint32_t crc = 0;
    std::memcpy(&length, bytes.data() + at, 8);
    std::memcpy(&crc, bytes.data() + at + 8, 4);
    EXPECT_EQ(crc, tfrecord_masked_crc(bytes.data() + at, 8));
    const std::string payload = bytes.substr(at + 12, length);
    std::memcpy(&crc, bytes.data() + at + 12 + length, 4);
    EXPECT_EQ(crc, tfrecord_masked_crc(payload.data(), payload.size()));
    tensorboard::Event e;
    EXPECT_TRUE(e.ParseFromString(payload));
    events.push_back(e);
    at += 12 + length + 4;
  }
  return events;
}

TEST(TensorBoardWriterTest, StepsAreScalarsAtTheSamplesTrained) {
  const fs::path out = fs::path(::testing::TempDir()) / "strata_tb_writer";
  fs::remove_all(out);
  StatusOr<TensorBoardWriter> w = TensorBoardWriter::open(out.string(), "job-a");
  ASSERT_TRUE(w.is_ok()) << w.status().to_string();
  EXPECT_EQ(w->log_dir(), (out / "job-a").string());
  EXPECT_EQ(fs::path(w->path()).parent_path(), out / "job-a");
  EXPECT_EQ(fs::path(w->path()).filename().string().rfind("events.out.tfevents.", 0), 0u) << w->path();

  StepMetrics m;
  m.step = 3;
  m.loss = 2.5;
  m.lr = 6e-4;
  m.tokens_per_s = 1234;
  m.val_loss = 2.75;
  m.grad_norm = std::nan("");  // left out: TensorBoard cannot draw it
  m.peak_bytes = {.gpu = 64ull << 20, .cpu = 0, .nvme = 0};
  ASSERT_TRUE(w->write_step(m, 32).is_ok());
  const std::string path = w->path();
  TensorBoardWriter moved = std::move(*w);
  EXPECT_EQ(w->write_step(m, 32).code(), Code::failed_precondition);  // NOLINT(bugprone-use-after-move)

  const std::vector<tensorboard::Event> events = read_events(path);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  EXPECT_GT(events[0].wall_time(), 1.5e9);
  EXPECT_EQ(events[1].step(), 3 * 32);
  std::map<std::string, float> values;
  for (const auto& v : events[1].summary().value()) values[v.tag()] = v.simple_value();
  const std::map<std::string, float> expected = {{"Train/Samples/train_loss", 2.5f},
                                                 {"Train/Samples/lr", 6e-4f},
                                                 {"Train/Samples/val_loss", 2.75f},
                                                 {"Train/Samples/tokens_per_s", 1234.0f},
                                                 {"Train/Samples/device_peak_mib", 64.0f}};
  EXPECT_EQ(values, expected);
  fs::remove_all(out);
}

TEST(TensorBoardWriterTest, AnUncreatableDirectoryIsAnErrorNamingIt) {
  const fs::path file = fs::path(::testing::TempDir()) / "strata_tb_not_a_dir";
  std::ofstream(file) << "x";
  StatusOr<TensorBoardWriter> w = TensorBoardWriter::open(file.string(), "job");
  ASSERT_FALSE(w.is_ok());
  EXPECT_NE(w.status().message().find("cannot create the TensorBoard directory " + (file / "job").string()),
            std::string::npos)
      << w.status().message();
  fs::remove(file);
}

}  // namespace
}  // namespace strata::model
