// The Optimizer interface (offload/optimizer.h) as the model and the trainer use it: the model calls
// prepare(c) just before each acquire of chunk c, in every pass; its zero_grad refuses while an
// update is pending; the factory (model/train/optimizer_factory.h) chooses the CPU or the device
// optimizer from the options, refusing the device one over weights that are not resident; the
// CPU optimizer's prepare(c) lands chunks c and c + 1 and no further, and an overlapped update
// lands the same bits as one applied at once.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/train/optimizer_factory.h"
#include "tests/model/trainer_fixture.h"

namespace strata::model {
namespace {

using testing::expect_value;
using testing::Golden;
using testing::golden_rule;
using testing::make_run;
using testing::open_golden;
using testing::rows_of;
using testing::TrainRun;

// One event of a pass: "prepare c", "acquire c", "commit c".
using CallLog = std::vector<std::string>;

// An optimizer that only records its calls; pending() as the test sets it.
class RecordingOptimizer final : public Optimizer {
 public:
  explicit RecordingOptimizer(CallLog& log) : log_(log) {}
  std::string_view where() const override { return "test"; }
  Status begin_update(const UpdateStep&) override { return Status::ok(); }
  Status prepare(size_t c) override {
    log_.push_back("prepare " + std::to_string(c));
    return Status::ok();
  }
  Status finish_update() override {
    pending_ = false;
    return Status::ok();
  }
  bool pending() const override { return pending_; }
  Status state_to_host() override { return Status::ok(); }
  Status state_from_host() override { return Status::ok(); }
  void set_pending() { pending_ = true; }

 private:
  CallLog& log_;
  bool pending_ = false;
};

// A weight source that records acquires and commits and hands everything else to `inner`.
class RecordingWeights final : public WeightSource {
 public:
  RecordingWeights(WeightSource& inner, CallLog& log) : inner_(inner), log_(log) {}
  size_t chunk_count() const override { return inner_.chunk_count(); }
  uint64_t chunk_bytes(size_t c) const override { return inner_.chunk_bytes(c); }
  Status begin_sequence(std::string_view name) override { return inner_.begin_sequence(name); }
  Status end_sequence() override { return inner_.end_sequence(); }
  StatusOr<std::byte*> acquire(size_t c) override {
    log_.push_back("acquire " + std::to_string(c));
    return inner_.acquire(c);
  }
  Status release(size_t c) override { return inner_.release(c); }
  StatusOr<std::byte*> update_buffer(size_t c) override { return inner_.update_buffer(c); }
  Status commit_update(size_t c) override {
    log_.push_back("commit " + std::to_string(c));
    return inner_.commit_update(c);
  }
  Status flush() override { return inner_.flush(); }
  Status read(size_t c, std::byte* host) override { return inner_.read(c, host); }

 private:
  WeightSource& inner_;
  CallLog& log_;
};

// A golden-weight gpt2-tiny whose chunks come from a ResidentWeights the test owns, through a
// RecordingWeights: a model with a given (not its own) weight source.
struct RecordedModel {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<PinnedPool> pinned;
  std::unique_ptr<ResidentWeights> resident;
  CallLog log;
  std::unique_ptr<RecordingWeights> weights;
  std::unique_ptr<Transformer> model;
};

RecordedModel recorded_model(const Golden& g, bool device_grads = true) {
  RecordedModel m;
  m.backend = expect_value(make_backend(testing::test_backend(BackendKind::cpu)));
  m.pinned = expect_value(PinnedPool::create(PinnedPoolOptions{.slab_bytes = 8ull << 20}));
  const ModelConfig config = expect_value(model_preset("gpt2-tiny"));
  const ParamLayout layout = expect_value(build_param_layout(config));
  std::vector<uint64_t> bytes;
  std::vector<std::string> names;
  for (const ChunkSpec& c : layout.chunks) {
    bytes.push_back(c.bytes);
    names.push_back(c.name);
  }
  m.resident = expect_value(ResidentWeights::create(*m.backend, *m.pinned, bytes, names, "test"));
  m.weights = std::make_unique<RecordingWeights>(*m.resident, m.log);
  m.model = expect_value(Transformer::create(*m.backend, config,
                                             TransformerOptions{.batch = g.B, .seq_len = g.T, .device_grads = device_grads},
                                             ChunkSources{.weights = m.weights.get(), .pinned = m.pinned.get()}));
  EXPECT_TRUE(m.model->load_hf_safetensors(g.file).is_ok());
  return m;
}

// Device copies of the golden batch's rows, ready for forward().
struct GoldenOnDevice {
  int32_t* inputs = nullptr;
  int32_t* targets = nullptr;
};

GoldenOnDevice upload_golden(Backend& backend, const Golden& g) {
  const uint64_t bytes = uint64_t(g.B * g.T) * sizeof(int32_t);
  GoldenOnDevice d;
  d.inputs = static_cast<int32_t*>(expect_value(backend.allocate(bytes, "test inputs")));
  d.targets = static_cast<int32_t*>(expect_value(backend.allocate(bytes, "test targets")));
  EXPECT_TRUE(backend.copy_to_device(d.inputs, g.tokens.data(), bytes, Stream::h2d).is_ok());
  EXPECT_TRUE(backend.copy_to_device(d.targets, g.targets.data(), bytes, Stream::h2d).is_ok());
  EXPECT_TRUE(backend.synchronize(Stream::h2d).is_ok());
  return d;
}

TEST(OptimizerContract, TheModelPreparesEachChunkJustBeforeEveryAcquire) {
  const Golden g = open_golden("gpt2-tiny");
  RecordedModel m = recorded_model(g);
  RecordingOptimizer optimizer(m.log);
  m.model->set_optimizer(&optimizer);
  const GoldenOnDevice d = upload_golden(*m.backend, g);
  m.log.clear();  // the load's commits
  ASSERT_TRUE(m.model->forward(d.inputs, d.targets, g.B, g.T).is_ok());
  ASSERT_TRUE(m.model->zero_grad().is_ok());
  ASSERT_TRUE(m.model->backward().is_ok());
  m.model->set_optimizer(nullptr);
  // Every acquire, forward and backward, right after the prepare of the same chunk.
  const size_t chunks = m.model->layout().chunks.size();
  ASSERT_GE(m.log.size(), 4 * chunks) << "a forward and a backward acquire every chunk";
  ASSERT_EQ(m.log.size() % 2, 0u);
  std::vector<size_t> forward_order;
  for (size_t i = 0; i < m.log.size(); i += 2) {
    ASSERT_EQ(m.log[i].rfind("prepare ", 0), 0u) << "event " << i << ": " << m.log[i];
    EXPECT_EQ(m.log[i + 1], "acquire " + m.log[i].substr(8)) << "event " << i + 1;
    if (forward_order.size() < chunks) forward_order.push_back(std::stoul(m.log[i].substr(8)));
  }
  // The forward prepares the chunks in order, so a lazy update lands chunk by chunk ahead of them.
  for (size_t c = 0; c < chunks; ++c) EXPECT_EQ(forward_order[c], c) << "forward acquire " << c;
  ASSERT_TRUE(m.backend->release(d.inputs).is_ok());
  ASSERT_TRUE(m.backend->release(d.targets).is_ok());
}

TEST(OptimizerContract, ZeroGradRefusesWhileAnUpdateIsPending) {
  const Golden g = open_golden("gpt2-tiny");
  RecordedModel m = recorded_model(g);
  RecordingOptimizer optimizer(m.log);
  m.model->set_optimizer(&optimizer);
  optimizer.set_pending();
  const Status refused = m.model->zero_grad();
  EXPECT_EQ(refused.code(), Code::failed_precondition);
  EXPECT_NE(refused.message().find("finish_update"), std::string::npos) << refused.message();
  ASSERT_TRUE(optimizer.finish_update().is_ok());
  EXPECT_TRUE(m.model->zero_grad().is_ok());
  m.model->set_optimizer(nullptr);
}

TEST(OptimizerFactory, ChoosesTheOptimizerTheOptionsName) {
  const Golden g = open_golden("gpt2-tiny");
  TrainRun cpu = make_run("gpt2-tiny", g, golden_rule());
  EXPECT_EQ(cpu.trainer->optimizer().where(), "cpu");
  EXPECT_NE(cpu.trainer->gradients(), nullptr);
  EXPECT_EQ(cpu.model->grad_sink(), cpu.trainer->gradients()) << "the CPU optimizer's gradients go to the host";
  EXPECT_EQ(cpu.model->optimizer(), &cpu.trainer->optimizer());
  TrainOptions on_device = golden_rule();
  on_device.optimizer_home = Tier::device;
  TrainRun device = make_run("gpt2-tiny", g, on_device);
  EXPECT_EQ(device.trainer->optimizer().where(), "device");
  EXPECT_EQ(device.trainer->gradients(), nullptr);
  EXPECT_EQ(device.model->grad_sink(), device.model->device_grads());
  device.trainer.reset();
  EXPECT_EQ(device.model->optimizer(), nullptr) << "the trainer unsets its optimizer when destroyed";
}

TEST(OptimizerFactory, RefusesTheDeviceOptimizerOverWeightsThatAreNotTheModelsResidentOnes) {
  const Golden g = open_golden("gpt2-tiny");
  RecordedModel m = recorded_model(g);
  EXPECT_EQ(m.model->resident_weights(), nullptr);
  TrainOptions options = golden_rule();
  options.optimizer_home = Tier::device;
  const StatusOr<OptimizerParts> parts = make_optimizer(*m.backend, *m.model, *m.pinned, nullptr, options, nullptr, nullptr);
  ASSERT_FALSE(parts.is_ok());
  EXPECT_EQ(parts.status().code(), Code::invalid_argument);
  EXPECT_NE(parts.status().message().find("--optimizer-device cpu"), std::string::npos) << parts.status().message();
}

// A step's overlapped CPU update: pending after the step, prepare(c) commits chunks up to c + 1 in
// order and no further, finish_update commits the rest; and the weights after it are the bits of
// an update applied inside the step.
TEST(CpuOptimizer, PrepareLandsChunksInOrderThroughTheNext) {
  const Golden g = open_golden("gpt2-tiny");
  const NextBatch batch = [&]() -> StatusOr<BatchView> { return rows_of(g, 0, g.B); };
  RecordedModel m = recorded_model(g, /*device_grads=*/false);
  TrainOptions overlapped = golden_rule();
  overlapped.overlap_optimizer = true;
  std::unique_ptr<Trainer> trainer =
      expect_value(Trainer::create(*m.backend, *m.model, *m.pinned, nullptr, overlapped));
  expect_value(trainer->step(batch));
  Optimizer& optimizer = *m.model->optimizer();
  ASSERT_TRUE(optimizer.pending());
  m.log.clear();
  ASSERT_TRUE(optimizer.prepare(1).is_ok());
  EXPECT_EQ(m.log, (CallLog{"commit 0", "commit 1", "commit 2"}));
  EXPECT_TRUE(optimizer.pending());
  ASSERT_TRUE(optimizer.prepare(0).is_ok());
  EXPECT_EQ(m.log.size(), 3u) << "prepare never goes back";
  ASSERT_TRUE(trainer->finish_update().is_ok());
  EXPECT_FALSE(optimizer.pending());
  const size_t chunks = m.model->layout().chunks.size();
  ASSERT_EQ(m.log.size(), chunks);
  for (size_t c = 0; c < chunks; ++c) EXPECT_EQ(m.log[c], "commit " + std::to_string(c));

  TrainRun at_once = make_run("gpt2-tiny", g, golden_rule());
  expect_value(at_once.trainer->step(batch));
  for (const ParamSpec& p : m.model->master_layout().params)
    EXPECT_EQ(expect_value(trainer->master(p)), expect_value(at_once.trainer->master(p))) << p.name;
}

}  // namespace
}  // namespace strata::model
