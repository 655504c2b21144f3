// The run directory of checkpoints (model/ckpt/checkpoint_store.h) and checkpoint verification
// (model/ckpt/checkpoint.h): saves make step-N/ directories and a `latest` pointer, keep the newest K
// and leave no temporary files; an ENOSPC injected between the two files (the fault seam every
// save goes through) leaves the previous checkpoint and `latest` intact; leftovers of killed
// saves are removed at open (a set-aside same-step checkpoint restored), a live process's and a
// user's files kept; resolve_checkpoint falls back past a damaged `latest`; a flipped byte and a
// NaN weight fail verification naming the tensor; 400 seeded mutations of a checkpoint's files
// (byte flips anywhere, truncations, garbage headers) are each an error or a clean pass, never a
// crash, and every flip in tensor data is caught; a resume with another batch shape is refused
// and one with another precision warned; truncate_metrics_after drops the steps after a resume
// point and a torn last line.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kernels/cpu/crc32c.h"
#include "model/ckpt/checkpoint.h"
#include "model/ckpt/checkpoint_store.h"
#include "model/train/metrics_log.h"
#include "tests/model/trainer_fixture.h"

namespace strata::model {
namespace {

namespace fs = std::filesystem;
using testing::expect_value;
using testing::Golden;
using testing::golden_rule;
using testing::make_run;
using testing::open_golden;
using testing::rows_of;
using testing::TempDir;
using testing::TrainRun;

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

class CheckpointStoreTest : public ::testing::Test {
 protected:
  CheckpointStoreTest() : g_(open_golden("gpt2-tiny")), run_(make_run("gpt2-tiny", g_, golden_rule(), 7)) {}

  // One training step, then a save of it through `store`.
  StatusOr<std::string> step_and_save(CheckpointStore& store) {
    EXPECT_TRUE(run_.trainer->step([this]() -> StatusOr<BatchView> { return rows_of(g_, 0, g_.B); }).is_ok());
    return store.save(*run_.model, *run_.trainer,
                      {.seed = 7, .preset = "gpt2-tiny", .micro_batch = 2, .seq = 8, .grad_accum = 1, .dtype = "fp32"});
  }

  Golden g_;
  TrainRun run_;
  TempDir tmp_;
};

// Above the shard size the weights are Hugging Face shards with an index; verification checks
// every shard's step and checksums, resume loads them, and a damaged shard is named.
TEST_F(CheckpointStoreTest, WeightsAboveTheShardSizeAreShardedAndStillVerifyAndLoad) {
  const std::string run = tmp_.file("run");
  CheckpointStore store = expect_value(CheckpointStore::open(run, {.keep = 2, .shard_bytes = 16384}));
  const std::string dir = expect_value(step_and_save(store));
  const std::vector<std::string> names = names_in(dir);
  EXPECT_EQ(std::count(names.begin(), names.end(), "model.safetensors"), 0);
  EXPECT_EQ(std::count(names.begin(), names.end(), "model.safetensors.index.json"), 1);
  const auto shards =
      std::count_if(names.begin(), names.end(), [](const std::string& n) { return n.starts_with("model-0"); });
  EXPECT_GT(shards, 3);
  EXPECT_EQ(expect_value(resolve_checkpoint(run)), dir);
  const CheckpointReport report = expect_value(verify_checkpoint(dir));
  EXPECT_TRUE(report.checksummed);
  EXPECT_EQ(report.state.step, 1u);
  size_t weights = 0;
  for (const CheckpointTensorInfo& t : report.tensors) weights += t.file.starts_with("model-0");
  EXPECT_EQ(weights, run_.model->master_layout().params.size());

  TrainRun other = make_run("gpt2-tiny", g_, golden_rule(), 99);
  ASSERT_TRUE(load_checkpoint_weights(dir, *other.model).is_ok());
  for (const ParamSpec& p : run_.model->layout().params) {
    const std::vector<float> a = expect_value(run_.model->copy_parameter_to_host(p.name, ParamState::weights));
    const std::vector<float> b = expect_value(other.model->copy_parameter_to_host(p.name, ParamState::weights));
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << p.name;
  }

  // Flip one byte at the end of the last shard (tensor data): verification names that shard.
  std::string last;
  for (const std::string& n : names)
    if (n.starts_with("model-0")) last = n;
  {
    std::fstream f(dir + "/" + last, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    const char c = char(f.get() ^ 0x40);
    f.seekp(-1, std::ios::end);
    f.put(c);
  }
  const Status damaged = verify_checkpoint(dir).status();
  EXPECT_EQ(damaged.code(), Code::corruption);
  EXPECT_NE(damaged.message().find(last), std::string::npos) << damaged.message();
}

TEST_F(CheckpointStoreTest, SavesStepDirectoriesPointLatestAtTheNewestAndKeepTwo) {
  const std::string run = tmp_.file("run");
  CheckpointStore store = expect_value(CheckpointStore::open(run, {.keep = 2}));
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(step_and_save(store).is_ok());
  EXPECT_EQ(names_in(run), (std::vector<std::string>{"latest", "step-000003", "step-000004"}));
  EXPECT_EQ(read_text(run + "/latest"), "step-000004\n");
  // config.json beside the weights: transformers' from_pretrained loads a checkpoint directory.
  EXPECT_EQ(names_in(run + "/step-000004"),
            (std::vector<std::string>{"config.json", "model.safetensors", "optimizer.safetensors"}));
  EXPECT_EQ(expect_value(resolve_checkpoint(run)), run + "/step-000004");
  EXPECT_EQ(expect_value(resolve_checkpoint(run + "/step-000003")), run + "/step-000003");
  const CheckpointReport r = expect_value(verify_checkpoint(run + "/step-000004"));
  EXPECT_EQ(r.state.step, 4u);
  EXPECT_EQ(r.state.micro_batch, 2u);
  EXPECT_EQ(r.state.seq, 8u);
  EXPECT_EQ(r.state.dtype, "fp32");
  EXPECT_TRUE(r.checksummed);
  // Each recorded checksum is the CRC-32C of the tensor's bytes in the file.
  const SafetensorsFile f = expect_value(SafetensorsFile::open(run + "/step-000004/model.safetensors"));
  const SafetensorsTensor& t = f.tensors().front();
  const auto bytes = f.data(t);
  const auto crcs = nlohmann::json::parse(f.metadata().at(std::string(kCrcMetadataKey)));
  char hex[9];
  std::snprintf(hex, sizeof(hex), "%08x", kernels::crc32c(0, bytes.data(), bytes.size()));
  EXPECT_EQ(crcs.at(t.name).get<std::string>(), hex);
}

TEST_F(CheckpointStoreTest, EnospcBetweenTheFilesLeavesThePreviousCheckpointAndLatest) {
  const std::string run = tmp_.file("run");
  int saves = 0;
  CheckpointHook hook = [&saves](std::string_view point) -> Status {
    if (point == "begin") ++saves;
    if (point == "model_written" && saves == 2) return errno_status(ENOSPC, "injected");
    return Status::ok();
  };
  CheckpointStore store = expect_value(CheckpointStore::open(run, {.keep = 2, .hook = hook}));
  ASSERT_TRUE(step_and_save(store).is_ok());
  const StatusOr<std::string> second = step_and_save(store);
  ASSERT_FALSE(second.is_ok());
  EXPECT_EQ(second.status().code(), Code::no_space);
  EXPECT_NE(second.status().message().find("step 2"), std::string::npos) << second.status().message();
  EXPECT_NE(second.status().message().find("previous checkpoints are intact"), std::string::npos);
  EXPECT_EQ(names_in(run), (std::vector<std::string>{"latest", "step-000001"}));  // no temporary left
  EXPECT_EQ(expect_value(resolve_checkpoint(run)), run + "/step-000001");
  EXPECT_EQ(expect_value(verify_checkpoint(run + "/step-000001")).state.step, 1u);
  // The disk has room again: the next save succeeds.
  ASSERT_TRUE(step_and_save(store).is_ok());
  EXPECT_EQ(names_in(run), (std::vector<std::string>{"latest", "step-000001", "step-000003"}));
}

TEST_F(CheckpointStoreTest, OpenRemovesLeftoversOfKilledSavesOnly) {
  const std::string run = tmp_.file("run");
  {
    CheckpointStore store = expect_value(CheckpointStore::open(run, {.keep = 3}));
    ASSERT_TRUE(step_and_save(store).is_ok());
  }
  constexpr const char* kDeadPid = "99999999";  // above any pid_max: no such process
  fs::create_directory(run + "/.tmp-step-000002." + kDeadPid);
  std::ofstream(run + "/.tmp-step-000002." + std::string(kDeadPid) + "/model.safetensors") << "half";
  std::ofstream(run + "/latest.tmp." + std::string(kDeadPid)) << "step-000002";
  std::ofstream(run + "/model.safetensors.tmp." + std::string(kDeadPid)) << "old layout";
  // A same-step checkpoint set aside by a save killed before its successor was renamed in.
  fs::rename(run + "/step-000001", run + "/.replaced-step-000001." + kDeadPid);
  const std::string live = run + "/.tmp-step-000009." + std::to_string(getppid());  // a live process's
  fs::create_directory(live);
  std::ofstream(run + "/notes.tmp.txt") << "the user's";

  CheckpointStore store = expect_value(CheckpointStore::open(run, {.keep = 3}));
  EXPECT_EQ(store.removed().size(), 3u);
  EXPECT_EQ(names_in(run), (std::vector<std::string>{".tmp-step-000009." + std::to_string(getppid()), "latest",
                                                     "notes.tmp.txt", "step-000001"}));
  EXPECT_EQ(expect_value(verify_checkpoint(run + "/step-000001")).state.step, 1u);
}

TEST_F(CheckpointStoreTest, ResolveFallsBackToTheNewestCompleteCheckpointWhenLatestIsBad) {
  const std::string run = tmp_.file("run");
  CheckpointStore store = expect_value(CheckpointStore::open(run, {.keep = 3}));
  ASSERT_TRUE(step_and_save(store).is_ok());
  ASSERT_TRUE(step_and_save(store).is_ok());
  std::ofstream(run + "/latest") << "step-000007\n";  // names one that is not there
  EXPECT_EQ(expect_value(resolve_checkpoint(run)), run + "/step-000002");
  fs::remove(run + "/latest");  // killed after the rename, before `latest`
  EXPECT_EQ(expect_value(resolve_checkpoint(run)), run + "/step-000002");

  const auto missing = resolve_checkpoint(tmp_.file("nothing"));
  EXPECT_EQ(missing.status().code(), Code::not_found);
  fs::create_directory(tmp_.file("empty"));
  const auto empty = resolve_checkpoint(tmp_.file("empty"));
  EXPECT_EQ(empty.status().code(), Code::not_found);
  EXPECT_NE(empty.status().message().find("holds no checkpoint"), std::string::npos) << empty.status().message();
}

TEST_F(CheckpointStoreTest, UnwritableOrFileRunDirectoryIsRefusedAtOpen) {
  std::ofstream(tmp_.file("a-file")) << "x";
  const auto under_file = CheckpointStore::open(tmp_.file("a-file") + "/run", {});
  ASSERT_FALSE(under_file.is_ok());
  EXPECT_NE(under_file.status().message().find("pass a writable --checkpoint-dir"), std::string::npos)
      << under_file.status().message();
  const auto file = CheckpointStore::open(tmp_.file("a-file"), {});
  ASSERT_FALSE(file.is_ok());
  EXPECT_NE(file.status().message().find("not a directory"), std::string::npos) << file.status().message();
  EXPECT_EQ(CheckpointStore::open(tmp_.file("run"), {.keep = 0}).status().code(), Code::invalid_argument);
}

// Rewrites `path` with tensor `name`'s first float set to `value`, checksums recomputed (a file
// that is consistent but holds a diverged weight), or left as they were (`keep_crc`).
void rewrite_first_float(const std::string& path, const std::string& name, float value, bool keep_crc) {
  std::vector<std::vector<std::byte>> bytes;
  std::vector<SafetensorsBlob> blobs;
  std::map<std::string, std::string> metadata;
  nlohmann::json crcs = nlohmann::json::object();
  {
    const SafetensorsFile f = expect_value(SafetensorsFile::open(path));
    metadata = f.metadata();
    for (const SafetensorsTensor& t : f.tensors()) {
      const auto d = f.data(t);
      bytes.emplace_back(d.begin(), d.end());
      if (t.name == name) std::memcpy(bytes.back().data(), &value, 4);
      char hex[9];
      std::snprintf(hex, sizeof(hex), "%08x", kernels::crc32c(0, bytes.back().data(), bytes.back().size()));
      crcs[t.name] = hex;
    }
    for (size_t i = 0; i < f.tensors().size(); ++i)
      blobs.push_back({.spec = {.name = f.tensors()[i].name, .dtype = f.tensors()[i].dtype, .shape = f.tensors()[i].shape},
                       .bytes = bytes[i]});
  }
  if (!keep_crc) metadata[std::string(kCrcMetadataKey)] = crcs.dump();
  ASSERT_TRUE(write_safetensors(path, blobs, metadata).is_ok());
}

TEST_F(CheckpointStoreTest, FlippedBytesAndNonFiniteWeightsFailVerificationNamingTheTensor) {
  const std::string run = tmp_.file("run");
  CheckpointStore store = expect_value(CheckpointStore::open(run, {}));
  const std::string dir = expect_value(step_and_save(store));
  const std::string weights = dir + "/model.safetensors";
  const std::string tensor = "transformer.wte.weight";

  rewrite_first_float(weights, tensor, 0.125f, /*keep_crc=*/true);
  const auto flipped = verify_checkpoint(dir);
  ASSERT_FALSE(flipped.is_ok());
  EXPECT_EQ(flipped.status().code(), Code::corruption);
  EXPECT_NE(flipped.status().message().find("'" + tensor + "'"), std::string::npos) << flipped.status().message();
  EXPECT_NE(flipped.status().message().find("CRC-32C"), std::string::npos) << flipped.status().message();
  EXPECT_FALSE(read_checkpoint_state(dir, "gpt2-tiny").is_ok());

  rewrite_first_float(weights, tensor, std::nanf(""), /*keep_crc=*/false);
  const auto nan = verify_checkpoint(dir);
  ASSERT_FALSE(nan.is_ok());
  EXPECT_EQ(nan.status().code(), Code::corruption);
  EXPECT_NE(nan.status().message().find("'" + tensor + "' element 0 is nan"), std::string::npos)
      << nan.status().message();
}

std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), std::streamsize(bytes.size()));
}

TEST_F(CheckpointStoreTest, MutatedFilesAreErrorsNeverCrashesAndEveryDataFlipIsCaught) {
  CheckpointStore store = expect_value(CheckpointStore::open(tmp_.file("run"), {}));
  const std::string dir = expect_value(step_and_save(store));
  const std::string files[2] = {"model.safetensors", "optimizer.safetensors"};
  const std::vector<char> original[2] = {read_bytes(dir + "/" + files[0]), read_bytes(dir + "/" + files[1])};
  std::mt19937_64 rng(13);
  int data_flips = 0, errors = 0;
  for (int i = 0; i < 400; ++i) {
    const int which = int(rng() % 2);
    std::vector<char> bytes = original[which];
    uint64_t header_len = 0;
    std::memcpy(&header_len, bytes.data(), 8);
    const uint64_t data_start = 8 + header_len;
    bool data_flip = false;
    switch (rng() % 3) {
      case 0: {  // one flipped bit anywhere
        const uint64_t at = rng() % bytes.size();
        bytes[at] = char(bytes[at] ^ char(1u << (rng() % 8)));
        data_flip = at >= data_start;
        break;
      }
      case 1:  // cut short
        bytes.resize(rng() % bytes.size());
        break;
      default:  // garbage over part of the header
        for (int k = 0; k < 16; ++k) bytes[rng() % std::min<uint64_t>(data_start, bytes.size())] = char(rng());
    }
    write_bytes(dir + "/" + files[which], bytes);
    const StatusOr<CheckpointReport> r = verify_checkpoint(dir);
    errors += !r.is_ok();
    if (data_flip) {
      ++data_flips;
      ASSERT_FALSE(r.is_ok()) << "a flipped bit in the tensor data of " << files[which] << " passed";
      EXPECT_EQ(r.status().code(), Code::corruption) << r.status().message();
    }
    write_bytes(dir + "/" + files[which], original[which]);
  }
  EXPECT_GT(data_flips, 50);
  EXPECT_GT(errors, 300);
  EXPECT_TRUE(verify_checkpoint(dir).is_ok());
}

TEST(CheckpointResume, OtherBatchShapeIsRefusedOtherPrecisionOrAccumulationWarned) {
  const CheckpointState saved{.loader = {.epoch = 0, .batch = 20}, .micro_batch = 16, .seq = 64, .grad_accum = 1,
                              .dtype = "fp32"};
  const auto refused =
      check_resume_compatible(saved, {.micro_batch = 8, .seq = 64, .grad_accum = 1, .dtype = "fp32"}, "rp/step-000020");
  ASSERT_FALSE(refused.is_ok());
  EXPECT_EQ(refused.status().code(), Code::invalid_argument);
  EXPECT_NE(refused.status().message().find("pass --micro-batch 16 --seq 64"), std::string::npos)
      << refused.status().message();
  EXPECT_FALSE(check_resume_compatible(saved, {.micro_batch = 16, .seq = 32, .grad_accum = 1, .dtype = "fp32"}, "c")
                   .is_ok());
  const auto warned =
      expect_value(check_resume_compatible(saved, {.micro_batch = 16, .seq = 64, .grad_accum = 2, .dtype = "bf16"}, "c"));
  ASSERT_EQ(warned.size(), 2u);
  EXPECT_NE(warned[0].find("--grad-accum 1"), std::string::npos) << warned[0];
  EXPECT_NE(warned[1].find("trained in fp32, this run computes in bf16"), std::string::npos) << warned[1];
  EXPECT_TRUE(expect_value(check_resume_compatible(saved, {.micro_batch = 16, .seq = 64, .grad_accum = 1,
                                                           .dtype = "fp32"}, "c")).empty());
  // Checkpoints from before the shape was recorded are not compared.
  EXPECT_TRUE(expect_value(check_resume_compatible({}, {.micro_batch = 8, .seq = 8, .grad_accum = 4, .dtype = "fp16"},
                                                   "c")).empty());
}

TEST(MetricsTruncation, DropsStepsAfterTheResumePointAndATornLine) {
  TempDir tmp;
  const std::string path = tmp.file("m.jsonl");
  std::ofstream(path) << "{\"step\":1,\"loss\":5}\n{\"step\":2,\"loss\":4}\n{\"step\":3,\"loss\":3}\n{\"step\":4,\"lo";
  EXPECT_EQ(expect_value(truncate_metrics_after(path, 2)), 2u);
  EXPECT_EQ(read_text(path), "{\"step\":1,\"loss\":5}\n{\"step\":2,\"loss\":4}\n");
  EXPECT_EQ(expect_value(truncate_metrics_after(path, 2)), 0u);  // nothing to drop: untouched
  EXPECT_EQ(expect_value(truncate_metrics_after(tmp.file("none.jsonl"), 2)), 0u);
  EXPECT_FALSE(fs::exists(tmp.file("none.jsonl")));
}

}  // namespace
}  // namespace strata::model
