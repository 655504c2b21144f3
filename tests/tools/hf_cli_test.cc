// `strata train --init-from` and `strata export --hf` (model/train/run_model.h, tools/strata/cmd_export.cc)
// on the built binary: a checkpoint directory holds config.json; export writes the checkpoint's
// fp32 weights bit for bit (sharded with an index below the shard size) or rounded once to bf16;
// training starts from the export through the flag, the environment and a config file; flags that
// contradict config.json, --preset beside it, a missing path, an unsupported architecture and a
// non-empty export directory are refused with exit 2 and a message that says what to do.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "kernels/cpu/half.h"
#include "model/ckpt/checkpoint.h"
#include "model/hf/hf_config.h"
#include "model/hf/hf_weights.h"
#include "model/hf/safetensors.h"
#include "tests/model/model_test_files.h"
#include "tools/run_cli.h"

namespace strata {
namespace {

using model::testing::expect_value;
using model::testing::TempDir;
using model::testing::write_text;
using test::CliResult;
using test::run_cli;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// One llama-tiny run of 2 steps with a checkpoint, shared by the tests below (built once).
class HfCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const CliResult r = run_cli({"train", "--device", "cpu", "--preset", "llama-tiny", "--steps", "2", "--seq", "32",
                                 "--micro-batch", "2", "--checkpoint-dir", dir_->file("run")});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string run_dir() { return dir_->file("run"); }
  static std::string step_dir() { return dir_->file("run/step-000002"); }
  static TempDir* dir_;
};
TempDir* HfCli::dir_ = nullptr;

TEST_F(HfCli, CheckpointHoldsAConfigOfItsModel) {
  const model::HfModelConfig hf = expect_value(model::read_hf_config(step_dir() + "/config.json"));
  EXPECT_EQ(hf.model_type, "llama");
  EXPECT_EQ(hf.config.name, "llama-tiny");
  EXPECT_EQ(hf.config.n_kv_head, 2);
  EXPECT_FALSE(hf.config.tied_head);
  // The checkpoint directory itself is a Hugging Face directory.
  const model::HfWeights w = expect_value(model::HfWeights::open(step_dir()));
  const auto layout = expect_value(model::build_param_layout(hf.config, 4));
  EXPECT_TRUE(w.check_layout(layout, hf.config.name).is_ok());
}

TEST_F(HfCli, ExportWritesTheCheckpointWeightsBitForBitAndShards) {
  TempDir out;
  const std::string hf = out.file("hf");
  const CliResult r = run_cli({"export", "--hf", hf, "--from", run_dir(), "--shard-size", "8KB"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "exported " + step_dir())) << r.out;
  EXPECT_TRUE(std::filesystem::exists(hf + "/model.safetensors.index.json"));
  const model::HfWeights w = expect_value(model::HfWeights::open(hf));
  EXPECT_GT(w.files().size(), 3u);
  const model::SafetensorsFile ckpt = expect_value(model::SafetensorsFile::open(step_dir() + "/model.safetensors"));
  EXPECT_EQ(w.tensor_count(), ckpt.tensors().size());
  for (const model::SafetensorsTensor& t : ckpt.tensors()) {
    const model::HfTensorRef ref = w.find(t.name);
    ASSERT_NE(ref.tensor, nullptr) << t.name;
    EXPECT_EQ(ref.tensor->dtype, model::SafeDType::f32);
    EXPECT_EQ(ref.tensor->shape, t.shape);
    const auto a = ckpt.data(t);
    const auto b = ref.file->data(*ref.tensor);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0) << t.name;
  }

  const std::string half = out.file("bf16");
  TempDir tokenizer;
  write_text(tokenizer.file("tokenizer.json"), "{\"model\": {}}");
  write_text(tokenizer.file("generation_config.json"), "{}");
  ASSERT_EQ(
      run_cli({"export", "--hf", half, "--from", step_dir(), "--dtype", "bf16", "--tokenizer-from", tokenizer.path()})
          .exit_code,
      0);
  EXPECT_TRUE(std::filesystem::exists(half + "/tokenizer.json"));
  EXPECT_TRUE(std::filesystem::exists(half + "/generation_config.json"));
  const CliResult no_tokenizer =
      run_cli({"export", "--hf", out.file("x"), "--from", step_dir(), "--tokenizer-from", out.file("hf")});
  EXPECT_EQ(no_tokenizer.exit_code, 2);
  EXPECT_TRUE(has(no_tokenizer.err, "holds no tokenizer file")) << no_tokenizer.err;
  EXPECT_FALSE(std::filesystem::exists(out.file("x")));               // nothing half-written left behind
  EXPECT_TRUE(std::filesystem::exists(half + "/model.safetensors"));  // far below 5GB: one file
  EXPECT_TRUE(has(expect_value(model::read_hf_config(half + "/config.json")).config.name, "llama-tiny"));
  const model::HfWeights hw = expect_value(model::HfWeights::open(half));
  const model::SafetensorsTensor& t = *ckpt.find("model.norm.weight");
  const std::vector<float> got = expect_value(model::hf_tensor_as_f32(hw.find(t.name)));
  for (size_t i = 0; i < got.size(); ++i) {
    float want;
    std::memcpy(&want, ckpt.data(t).data() + 4 * i, 4);
    ASSERT_EQ(got[i], kernels::bf16_to_float(kernels::float_to_bf16(want))) << i;
  }

  const CliResult again = run_cli({"export", "--hf", hf, "--from", run_dir()});
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_TRUE(has(again.err, "already exists and is not an empty directory")) << again.err;
}

TEST_F(HfCli, TrainStartsFromAnExportByFlagEnvironmentAndConfigFile) {
  TempDir out;
  const std::string hf = out.file("hf");
  ASSERT_EQ(run_cli({"export", "--hf", hf, "--from", run_dir(), "--shard-size", "8KB"}).exit_code, 0);
  const std::vector<std::string> common = {"train", "--device", "cpu",           "--steps", "1",
                                           "--seq", "32",       "--micro-batch", "2"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const CliResult flag = run_cli(with({"--init-from", hf, "--n-layer", "2"}));  // an agreeing flag is fine
  ASSERT_EQ(flag.exit_code, 0) << flag.err;
  EXPECT_TRUE(has(flag.err + flag.out, "init-from: " + hf + " (llama): 2 layers, dim 48")) << flag.err;
  EXPECT_TRUE(has(flag.err + flag.out, "--n-layer 2 agrees")) << flag.err;
  EXPECT_TRUE(has(flag.err + flag.out, "model: llama-tiny")) << flag.err;
  const CliResult env = run_cli(common, {"STRATA_INIT_FROM=" + hf});
  ASSERT_EQ(env.exit_code, 0) << env.err;
  EXPECT_TRUE(has(env.err + env.out, "init-from: " + hf)) << env.err;
  write_text(out.file("train.json"), "{\"init_from\": \"" + hf + "\"}");
  const CliResult file = run_cli(with({"--config", out.file("train.json")}));
  ASSERT_EQ(file.exit_code, 0) << file.err;
  EXPECT_TRUE(has(file.err + file.out, "init-from: " + hf)) << file.err;
  // A run started from --init-from resumes without it: the checkpoint's config.json is the model.
  const CliResult started = run_cli(with({"--init-from", hf, "--checkpoint-dir", out.file("ft")}));
  ASSERT_EQ(started.exit_code, 0) << started.err;
  const CliResult resumed = run_cli({"train", "--device", "cpu", "--steps", "2", "--seq", "32", "--micro-batch", "2",
                                     "--checkpoint-dir", out.file("ft"), "--resume", out.file("ft")});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_TRUE(has(resumed.err + resumed.out, "resumed from " + out.file("ft") + "/step-000001 at step 1"))
      << resumed.err;
  // A single .safetensors file finds the config.json beside it.
  const CliResult single = run_cli(with({"--init-from", step_dir() + "/model.safetensors"}));
  ASSERT_EQ(single.exit_code, 0) << single.err;
  EXPECT_TRUE(has(single.err + single.out, "model: llama-tiny")) << single.err;
}

TEST_F(HfCli, ContradictionsAndBadInputAreRefusedBeforeTraining) {
  const std::vector<std::string> base = {"train", "--device", "cpu", "--steps", "1", "--init-from", step_dir()};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  };
  const CliResult layers = with({"--n-layer", "3"});
  EXPECT_EQ(layers.exit_code, 2);
  EXPECT_TRUE(has(layers.err, "--n-layer 3 contradicts " + step_dir() + "/config.json's num_hidden_layers 2"))
      << layers.err;
  const CliResult arch = with({"--arch", "gpt2"});
  EXPECT_EQ(arch.exit_code, 2);
  EXPECT_TRUE(has(arch.err, "--arch gpt2 contradicts")) << arch.err;
  const CliResult preset = with({"--preset", "gpt2-tiny"});
  EXPECT_EQ(preset.exit_code, 2);
  EXPECT_TRUE(has(preset.err, "drop --preset")) << preset.err;

  const CliResult missing = run_cli({"train", "--device", "cpu", "--init-from", "/nonexistent/model"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_TRUE(has(missing.err, "/nonexistent/model does not exist")) << missing.err;
  TempDir bert;
  write_text(bert.file("config.json"), R"({"model_type": "bert", "architectures": ["BertForMaskedLM"]})");
  std::filesystem::copy_file(step_dir() + "/model.safetensors", bert.file("model.safetensors"));
  const CliResult unsupported = run_cli({"train", "--device", "cpu", "--init-from", bert.path()});
  EXPECT_EQ(unsupported.exit_code, 2);
  EXPECT_TRUE(has(unsupported.err, "model_type 'bert'")) << unsupported.err;
  EXPECT_TRUE(has(unsupported.err, "strata trains gpt2, llama, mistral, qwen2")) << unsupported.err;
  const CliResult bad_dtype = run_cli({"export", "--hf", bert.file("out"), "--from", run_dir(), "--dtype", "int8"});
  EXPECT_EQ(bad_dtype.exit_code, 2);
  EXPECT_TRUE(has(bad_dtype.err, "--dtype 'int8' is not f32, bf16 or f16")) << bad_dtype.err;
}

}  // namespace
}  // namespace strata
