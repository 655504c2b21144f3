// Config: precedence defaults < file < env < flags with sources, DeepSpeed-style file aliases,
// typed getters, and every error path (unknown keys with did-you-mean, wrong JSON types,
// malformed JSON, missing file, an endless or huge file, ranges, units, choices).
#include "runtime/config.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/config_keys.h"

namespace strata {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr uint64_t MiB = 1024 * 1024, GiB = 1024 * MiB;

// The runtime keys plus offload-like keys with DeepSpeed aliases, as later layers will add them.
ConfigSchema test_schema() {
  ConfigSchema s;
  add_runtime_config_keys(s);
  s.add({.name = "aio_block_size", .type = ValueType::size, .default_text = "1MiB", .help = "I/O size",
         .min = 4096, .max = 64.0 * MiB, .file_aliases = {"aio.block_size"}});
  s.add({.name = "aio_queue_depth", .type = ValueType::integer, .default_text = "32", .help = "queue depth",
         .min = 1, .max = 4096, .file_aliases = {"aio.queue_depth"}});
  s.add({.name = "offload_optimizer", .type = ValueType::choice, .default_text = "cpu", .help = "optimizer home",
         .choices = {"none", "cpu", "nvme"}, .file_aliases = {"zero_optimization.offload_optimizer.device"}});
  s.add({.name = "nvme_path", .type = ValueType::path_list, .help = "swap directories",
         .file_aliases = {"zero_optimization.offload_optimizer.nvme_path"}});
  s.add({.name = "pin_memory", .type = ValueType::boolean, .default_text = "false", .help = "pin host buffers",
         .file_aliases = {"zero_optimization.offload_optimizer.pin_memory"}});
  s.add({.name = "lr", .type = ValueType::real, .default_text = "0.0003", .help = "learning rate", .min = 0,
         .max = 1});
  return s;
}

// A nullptr-terminated NAME=VALUE array, as `environ`.
class Env {
 public:
  Env(std::initializer_list<std::string> vars) : vars_(vars) {
    for (std::string& v : vars_) ptrs_.push_back(v.data());
    ptrs_.push_back(nullptr);
  }
  char** get() { return ptrs_.data(); }

 private:
  std::vector<std::string> vars_;
  std::vector<char*> ptrs_;
};

class ConfigTest : public ::testing::Test {
 protected:
  // Writes `text` to a fresh file in the test's temporary directory and returns its path.
  std::string write_file(const std::string& name, const std::string& text) {
    const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "strata_config_test";
    std::filesystem::create_directories(dir);
    const std::string path = (dir / name).string();
    std::ofstream(path) << text;
    return path;
  }
  void expect_error(const Status& s, Code code, std::initializer_list<std::string_view> words) {
    ASSERT_FALSE(s.is_ok());
    EXPECT_EQ(s.code(), code) << s.to_string();
    for (std::string_view w : words) EXPECT_NE(s.message().find(w), std::string::npos) << "'" << w << "' not in: " << s.message();
  }

  ConfigSchema schema_ = test_schema();
};

TEST_F(ConfigTest, DefaultsAreTypedAndReportedAsDefault) {
  Config c(schema_);
  EXPECT_EQ(c.get_text("log_level"), "info");
  EXPECT_EQ(c.get_text("device"), "auto");
  EXPECT_EQ(c.get_int("gpu_index"), 0);
  EXPECT_EQ(c.get_size_or_auto("gpu_mem"), std::nullopt);
  EXPECT_EQ(c.get_int("seed"), 1234);
  EXPECT_EQ(c.get_size("aio_block_size"), MiB);
  EXPECT_EQ(c.get_int_or_auto("aio_queue_depth"), 32);
  EXPECT_FALSE(c.get_bool("pin_memory"));
  EXPECT_DOUBLE_EQ(c.get_real("lr"), 0.0003);
  EXPECT_TRUE(c.get_list("nvme_path").empty());
  EXPECT_EQ(c.get_text("config"), "");
  for (const ConfigKey& k : schema_.keys()) {
    EXPECT_EQ(c.source(k.name), ConfigSource::default_value) << k.name;
    EXPECT_EQ(c.origin(k.name), "") << k.name;
    EXPECT_EQ(c.describe_source(k.name), "default") << k.name;
  }
}

TEST_F(ConfigTest, EachLayerOverridesTheOneBelow) {
  const std::string file = write_file("layers.json", R"({"gpu_mem": "1GiB", "seed": 7})");
  Env env{"STRATA_GPU_MEM=2GiB", "STRATA_CONFIG=" + file};

  StatusOr<Config> flag = resolve_config(schema_, {{"--gpu-mem", "3GiB"}}, env.get());
  ASSERT_TRUE(flag.is_ok()) << flag.status().to_string();
  EXPECT_EQ(flag->get_size("gpu_mem"), 3 * GiB);
  EXPECT_EQ(flag->source("gpu_mem"), ConfigSource::flag);
  EXPECT_EQ(flag->origin("gpu_mem"), "--gpu-mem");
  EXPECT_EQ(flag->describe_source("gpu_mem"), "flag --gpu-mem");
  EXPECT_EQ(flag->text("gpu_mem"), "3GiB");
  EXPECT_EQ(flag->get_int("seed"), 7);  // only the file sets seed
  EXPECT_EQ(flag->describe_source("seed"), "file " + file);

  StatusOr<Config> from_env = resolve_config(schema_, {}, env.get());
  ASSERT_TRUE(from_env.is_ok()) << from_env.status().to_string();
  EXPECT_EQ(from_env->get_size("gpu_mem"), 2 * GiB);
  EXPECT_EQ(from_env->describe_source("gpu_mem"), "env STRATA_GPU_MEM");
  EXPECT_EQ(from_env->get_text("config"), file);
  EXPECT_EQ(from_env->describe_source("config"), "env STRATA_CONFIG");

  Env file_only{"STRATA_CONFIG=" + file};
  StatusOr<Config> from_file = resolve_config(schema_, {}, file_only.get());
  ASSERT_TRUE(from_file.is_ok()) << from_file.status().to_string();
  EXPECT_EQ(from_file->get_size("gpu_mem"), GiB);
  EXPECT_EQ(from_file->source("gpu_mem"), ConfigSource::file);
  EXPECT_EQ(from_file->origin("gpu_mem"), file);

  StatusOr<Config> defaults = resolve_config(schema_, {}, Env{}.get());
  ASSERT_TRUE(defaults.is_ok());
  EXPECT_EQ(defaults->get_size_or_auto("gpu_mem"), std::nullopt);
  EXPECT_EQ(defaults->source("gpu_mem"), ConfigSource::default_value);
}

TEST_F(ConfigTest, ConfigFlagWinsOverStrataConfig) {
  const std::string a = write_file("a.json", R"({"seed": 1})");
  const std::string b = write_file("b.json", R"({"seed": 2})");
  Env env{"STRATA_CONFIG=" + a};
  StatusOr<Config> c = resolve_config(schema_, {{"--config", b}}, env.get());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->get_int("seed"), 2);
  EXPECT_EQ(c->get_text("config"), b);
  EXPECT_EQ(c->describe_source("config"), "flag --config");
}

// An endless or huge file is refused after a bounded read, not read to its end or parsed.
TEST_F(ConfigTest, EndlessOrHugeConfigFileIsRefusedQuickly) {
  for (const std::string& path : {std::string("/dev/zero"), write_file("huge.json", "{\"seed\": \"" +
                                                                                       std::string(50u << 20, 'x') +
                                                                                       "\"}")}) {
    const auto t0 = std::chrono::steady_clock::now();
    StatusOr<Config> c = resolve_config(schema_, {{"--config", path}}, Env{}.get());
    ASSERT_FALSE(c.is_ok()) << path;
    EXPECT_EQ(c.status().code(), Code::invalid_argument);
    EXPECT_NE(c.status().message().find("larger than 4 MiB"), std::string::npos) << c.status().message();
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.0) << path;
  }
}

// A number past double's range makes nlohmann throw out_of_range, not parse_error (found by
// tests/fuzz/fuzz_config.cc): an error naming the file, not an uncaught exception.
TEST_F(ConfigTest, NumberPastDoubleRangeIsAnError) {
  const std::string file = write_file("overflow.json", R"({"lr": 1e808})");
  StatusOr<Config> c = resolve_config(schema_, {{"--config", file}}, Env{}.get());
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), Code::invalid_argument);
  EXPECT_NE(c.status().message().find("number overflow"), std::string::npos) << c.status().message();
}

TEST_F(ConfigTest, StrataConfigNamesTheFileEvenWithoutAConfigKey) {
  ConfigSchema bare;
  bare.add({.name = "seed", .type = ValueType::integer, .default_text = "1", .help = "seed"});
  const std::string file = write_file("bare.json", R"({"seed": 5})");
  Env env{"STRATA_CONFIG=" + file};
  StatusOr<Config> c = resolve_config(bare, {}, env.get());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->get_int("seed"), 5);
  StatusOr<Config> by_flag = resolve_config(bare, {{"--config", file}}, Env{}.get());
  ASSERT_TRUE(by_flag.is_ok()) << by_flag.status().to_string();
  EXPECT_EQ(by_flag->get_int("seed"), 5);
}

TEST_F(ConfigTest, DeepSpeedAliasesMapToTheirKeys) {
  const std::string file = write_file("ds.json", R"({
    "aio": {"block_size": 1048576, "queue_depth": 64},
    "zero_optimization": {"offload_optimizer": {"device": "nvme", "nvme_path": "/x", "pin_memory": true}}
  })");
  Config c(schema_);
  ASSERT_TRUE(c.load_file(file).is_ok());
  EXPECT_EQ(c.get_size("aio_block_size"), MiB);
  EXPECT_EQ(c.get_int("aio_queue_depth"), 64);
  EXPECT_EQ(c.get_text("offload_optimizer"), "nvme");
  EXPECT_EQ(c.get_list("nvme_path"), std::vector<std::string>{"/x"});
  EXPECT_TRUE(c.get_bool("pin_memory"));
  EXPECT_EQ(c.source("aio_queue_depth"), ConfigSource::file);
  EXPECT_EQ(c.origin("nvme_path"), file);
}

TEST_F(ConfigTest, DottedKeysAndTopLevelNamesWorkInFiles) {
  const std::string file = write_file("dotted.json", R"({"aio.block_size": "4KiB", "aio_queue_depth": 8})");
  Config c(schema_);
  ASSERT_TRUE(c.load_file(file).is_ok());
  EXPECT_EQ(c.get_size("aio_block_size"), 4096u);
  EXPECT_EQ(c.get_int("aio_queue_depth"), 8);
}

TEST_F(ConfigTest, PathListsFromCommasAndJsonArrays) {
  Config c(schema_);
  Env env{"STRATA_NVME_PATH=/mnt/a, /mnt/b"};
  ASSERT_TRUE(c.load_env(env.get()).is_ok());
  EXPECT_EQ(c.get_list("nvme_path"), (std::vector<std::string>{"/mnt/a", "/mnt/b"}));
  EXPECT_EQ(c.text("nvme_path"), "/mnt/a,/mnt/b");

  const std::string arr = write_file("arr.json", R"({"nvme_path": ["/mnt/c", "/mnt/d"]})");
  ASSERT_TRUE(c.load_file(arr).is_ok());
  EXPECT_EQ(c.get_list("nvme_path"), (std::vector<std::string>{"/mnt/c", "/mnt/d"}));

  const std::string str = write_file("str.json", R"({"nvme_path": "/mnt/e,/mnt/f"})");
  ASSERT_TRUE(c.load_file(str).is_ok());
  EXPECT_EQ(c.get_list("nvme_path"), (std::vector<std::string>{"/mnt/e", "/mnt/f"}));

  expect_error(c.set("nvme_path", "/a,,/b", ConfigSource::flag, "--nvme-path"), Code::invalid_argument,
               {"--nvme-path /a,,/b", "nvme_path must be a comma-separated list of paths", "empty"});
  const std::string bad = write_file("badarr.json", R"({"nvme_path": ["/mnt/c", 3]})");
  expect_error(c.load_file(bad), Code::invalid_argument, {bad, "nvme_path", "an array of strings", "[\"/mnt/c\",3]"});
}

// Keys declared with indexed file aliases take their values from the elements of one JSON array.
TEST_F(ConfigTest, ArrayElementsSetTheirIndexedKeys) {
  schema_.add({.name = "beta1", .type = ValueType::real, .default_text = "0.9", .help = "first moment decay",
               .min = 0, .max = 0.999999, .file_aliases = {"optimizer.params.beta1", "optimizer.params.betas[0]"}});
  schema_.add({.name = "beta2", .type = ValueType::real, .default_text = "0.999", .help = "second moment decay",
               .min = 0, .max = 0.999999, .file_aliases = {"optimizer.params.betas[1]"}});
  Config c(schema_);
  const std::string file = write_file("betas.json", R"({"optimizer": {"params": {"betas": [0.8, 0.95]}}})");
  ASSERT_TRUE(c.load_file(file).is_ok());
  EXPECT_DOUBLE_EQ(c.get_real("beta1"), 0.8);
  EXPECT_DOUBLE_EQ(c.get_real("beta2"), 0.95);
  EXPECT_EQ(c.source("beta2"), ConfigSource::file);

  const std::string shorter = write_file("betas_short.json", R"({"optimizer": {"params": {"betas": [0.7]}}})");
  ASSERT_TRUE(c.load_file(shorter).is_ok());
  EXPECT_DOUBLE_EQ(c.get_real("beta1"), 0.7);
  EXPECT_DOUBLE_EQ(c.get_real("beta2"), 0.95);  // kept from the file before

  const std::string longer = write_file("betas_long.json", R"({"optimizer": {"params": {"betas": [0.8, 0.9, 0.99]}}})");
  expect_error(c.load_file(longer), Code::invalid_argument,
               {longer, "optimizer.params.betas has 3 elements but only 2 are known", "index 2 has no key"});
  const std::string text = write_file("betas_text.json", R"({"optimizer": {"params": {"betas": [0.8, "fast"]}}})");
  expect_error(c.load_file(text), Code::invalid_argument, {text, "optimizer.params.betas[1]", "fast"});
  const std::string nested = write_file("betas_nested.json", R"({"optimizer": {"params": {"betas": [[0.8], 0.9]}}})");
  expect_error(c.load_file(nested), Code::invalid_argument,
               {nested, "optimizer.params.betas[0] must be a number", "not an array ([0.8])"});
  const std::string range = write_file("betas_range.json", R"({"optimizer": {"params": {"betas": [0.8, 1.5]}}})");
  expect_error(c.load_file(range), Code::out_of_range, {range, "optimizer.params.betas[1]=1.5"});
  const std::string twice =
      write_file("betas_twice.json", R"({"optimizer": {"params": {"beta1": 0.5, "betas": [0.8, 0.9]}}})");
  expect_error(c.load_file(twice), Code::invalid_argument,
               {"beta1 is set twice", "'optimizer.params.beta1'", "'optimizer.params.betas[0]'"});
  EXPECT_DOUBLE_EQ(c.get_real("beta1"), 0.7);  // the failed files changed nothing

  const std::string unknown = write_file("gammas.json", R"({"optimizer": {"params": {"gammas": [0.8]}}})");
  expect_error(c.load_file(unknown), Code::invalid_argument, {"unknown key 'optimizer.params.gammas'"});
}

TEST_F(ConfigTest, UnknownFileKeySuggestsTheKnownOne) {
  const std::string file = write_file("typo.json", R"({"gpu_mme": "1GiB"})");
  Config c(schema_);
  expect_error(c.load_file(file), Code::invalid_argument, {file, "unknown key 'gpu_mme'", "did you mean 'gpu_mem'?"});
}

TEST_F(ConfigTest, UnknownNestedFileKeySuggestsTheFullPath) {
  const std::string file = write_file("nested.json", R"({"aio": {"block_sise": 4096}})");
  Config c(schema_);
  expect_error(c.load_file(file), Code::invalid_argument,
               {file, "unknown key 'aio.block_sise'", "did you mean 'aio.block_size'?"});
  const std::string section = write_file("section.json", R"({"zero_optimizaton": {"stage": 3}})");
  expect_error(c.load_file(section), Code::invalid_argument,
               {"unknown key 'zero_optimizaton'", "did you mean"});
}

TEST_F(ConfigTest, UnknownEnvVariableIsAWarningThatSuggestsTheKnownOne) {
  Config c(schema_);
  Env env{"HOME=/root", "STRATA_GPU_MME=1GiB", "STRATA_SEED=9", "STRATA_SOMETHING_ELSE=1"};
  ASSERT_TRUE(c.load_env(env.get()).is_ok());
  EXPECT_EQ(c.get_int("seed"), 9);  // the known variable still applies
  EXPECT_EQ(c.source("gpu_mem"), ConfigSource::default_value);
  ASSERT_EQ(c.unknown_env_warnings().size(), 2u);
  EXPECT_THAT(c.unknown_env_warnings()[0], HasSubstr("environment variable STRATA_GPU_MME is not a strata setting"));
  EXPECT_THAT(c.unknown_env_warnings()[0], HasSubstr("did you mean STRATA_GPU_MEM?"));
  EXPECT_THAT(c.unknown_env_warnings()[1], HasSubstr("STRATA_SOMETHING_ELSE is not a strata setting"));
  EXPECT_THAT(c.unknown_env_warnings()[1], Not(HasSubstr("did you mean")));
  // A bad value of a known variable is still an error.
  Env bad{"STRATA_SEED=x"};
  EXPECT_FALSE(Config(schema_).load_env(bad.get()).is_ok());
}

TEST_F(ConfigTest, IgnoredEnvVariablesAreSkipped) {
  schema_.ignore_env("STRATA_CMAKE_ARGS");
  Config c(schema_);
  Env env{"STRATA_CMAKE_ARGS=-DSTRATA_CUDA=OFF", "STRATA_SEED=9"};
  ASSERT_TRUE(c.load_env(env.get()).is_ok());
  EXPECT_EQ(c.get_int("seed"), 9);
  EXPECT_EQ(c.describe_source("seed"), "env STRATA_SEED");
}

TEST_F(ConfigTest, UnknownFlagSuggestsTheKnownOne) {
  StatusOr<Config> c = resolve_config(schema_, {{"--gpu-mme", "1"}}, Env{}.get());
  ASSERT_FALSE(c.is_ok());
  expect_error(c.status(), Code::invalid_argument, {"unknown flag --gpu-mme", "did you mean --gpu-mem?"});
}

TEST_F(ConfigTest, UnknownKeyInSetSuggests) {
  Config c(schema_);
  expect_error(c.set("treads", "4", ConfigSource::flag, "--treads"), Code::invalid_argument,
               {"unknown config key 'treads'", "did you mean 'threads'?"});
}

TEST_F(ConfigTest, WrongJsonTypesNameKeyValueAndRange) {
  Config c(schema_);
  const std::string b = write_file("bool.json", R"({"threads": true})");
  expect_error(c.load_file(b), Code::invalid_argument,
               {b, "threads must be an integer in [0, 4096]", "a number or a string", "not a boolean (true)"});
  const std::string o = write_file("obj.json", R"({"gpu_mem": {"size": 1}})");
  expect_error(c.load_file(o), Code::invalid_argument, {o, "gpu_mem must be a size", "not an object"});
  const std::string n = write_file("num.json", R"({"config": 3})");
  expect_error(c.load_file(n), Code::invalid_argument, {"'config' cannot be set inside a config file"});
  const std::string t = write_file("text.json", R"({"nvme_path": 5})");
  expect_error(c.load_file(t), Code::invalid_argument, {"nvme_path", "not a number (5)"});
  const std::string z = write_file("null.json", R"({"seed": null})");
  expect_error(c.load_file(z), Code::invalid_argument, {"seed", "not null"});
  const std::string top = write_file("top.json", R"([1, 2])");
  expect_error(c.load_file(top), Code::invalid_argument, {top, "must hold a JSON object", "not an array"});
}

TEST_F(ConfigTest, JsonNumbersBecomeTheirValues) {
  Config c(schema_);
  const std::string f = write_file("numbers.json", R"({"seed": 1e3, "lr": 0.5, "gpu_mem": 17179869184})");
  ASSERT_TRUE(c.load_file(f).is_ok());
  EXPECT_EQ(c.get_int("seed"), 1000);
  EXPECT_DOUBLE_EQ(c.get_real("lr"), 0.5);
  EXPECT_EQ(c.get_size("gpu_mem"), 16 * GiB);
  const std::string frac = write_file("frac.json", R"({"seed": 1.5})");
  expect_error(c.load_file(frac), Code::invalid_argument, {frac, "seed=1.5", "seed must be an integer"});
}

TEST_F(ConfigTest, MalformedJsonNamesLineAndColumn) {
  const std::string file = write_file("broken.json", "{\n  \"gpu_mem\": \"1GiB\",\n  \"seed\": ,\n}\n");
  Config c(schema_);
  expect_error(c.load_file(file), Code::invalid_argument, {file, "not valid JSON", "line 3, column 11"});
}

TEST_F(ConfigTest, MissingFileNamesThePath) {
  Config c(schema_);
  const std::string path = "/nonexistent/strata/cfg.json";
  expect_error(c.load_file(path), Code::not_found, {path, "No such file"});
  StatusOr<Config> r = resolve_config(schema_, {{"--config", path}}, Env{}.get());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::not_found);
}

TEST_F(ConfigTest, AFailedFileChangesNothing) {
  const std::string file = write_file("half.json", R"({"seed": 7, "threads": -1})");
  Config c(schema_);
  expect_error(c.load_file(file), Code::out_of_range, {file, "threads=-1", "threads must be an integer in [0, 4096]"});
  EXPECT_EQ(c.get_int("seed"), 1234);
  EXPECT_EQ(c.source("seed"), ConfigSource::default_value);
}

TEST_F(ConfigTest, KeySetTwiceInOneFileIsAnError) {
  const std::string file = write_file("twice.json", R"({"aio_block_size": 4096, "aio": {"block_size": 8192}})");
  Config c(schema_);
  expect_error(c.load_file(file), Code::invalid_argument,
               {"aio_block_size is set twice, to different values", "'aio_block_size'=4096", "'aio.block_size'=8192"});
}

// DeepSpeed files name one setting in two places (offload_optimizer.nvme_path and
// offload_param.nvme_path): the same value twice is one setting.
TEST_F(ConfigTest, KeySetTwiceToTheSameValueIsKept) {
  schema_ = ConfigSchema();
  schema_.add({.name = "nvme_path", .type = ValueType::path_list, .help = "swap directories",
               .file_aliases = {"zero_optimization.offload_optimizer.nvme_path",
                                "zero_optimization.offload_param.nvme_path"}});
  schema_.add({.name = "lr", .type = ValueType::real, .default_text = "0.1", .help = "learning rate",
               .file_aliases = {"optimizer.params.lr", "scheduler.params.warmup_max_lr"}});
  const std::string file = write_file("same.json", R"({
    "optimizer": {"params": {"lr": 1e-3}}, "scheduler": {"params": {"warmup_max_lr": 0.001}},
    "zero_optimization": {"offload_optimizer": {"nvme_path": "/nvme"}, "offload_param": {"nvme_path": ["/nvme"]}}
  })");
  Config c(schema_);
  ASSERT_TRUE(c.load_file(file).is_ok());
  EXPECT_DOUBLE_EQ(c.get_real("lr"), 0.001);
  EXPECT_EQ(c.get_list("nvme_path"), std::vector<std::string>{"/nvme"});
  EXPECT_EQ(c.describe_source("nvme_path"), "file " + file);
  const std::string differ = write_file("differ.json", R"({"zero_optimization": {
    "offload_optimizer": {"nvme_path": "/nvme0"}, "offload_param": {"nvme_path": "/nvme1"}}})");
  expect_error(c.load_file(differ), Code::invalid_argument,
               {"nvme_path is set twice, to different values",
                "'zero_optimization.offload_optimizer.nvme_path'=\"/nvme0\"",
                "'zero_optimization.offload_param.nvme_path'=\"/nvme1\""});
  const std::string bad_second = write_file("bad_second.json", R"({"lr": 0.5, "optimizer": {"params": {"lr": "x"}}})");
  expect_error(c.load_file(bad_second), Code::invalid_argument, {"optimizer.params.lr=\"x\"", "lr must be a number"});
}

// Ignored file paths: accepted, recorded with the file and reason, not applied, and reported once
// per reason.
TEST_F(ConfigTest, IgnoredFilePathsAreRecordedAndGroupedByReason) {
  schema_.ignore_file_paths({"zero_optimization.stage"}, "one GPU partitions nothing");
  schema_.ignore_file_paths({"zero_optimization.overlap_comm", "zero_optimization.reduce_bucket_size"},
                            "no collectives on one GPU");
  schema_.ignore_file_paths({"zero_optimization.offload_param.device"}, "placement is strata's");
  EXPECT_NE(schema_.ignored_file_path_reason("zero_optimization.stage"), nullptr);
  EXPECT_EQ(schema_.ignored_file_path_reason("zero_optimization.stages"), nullptr);
  const std::string file = write_file("ignored.json", R"({
    "seed": 9,
    "zero_optimization": {"stage": 3, "overlap_comm": true, "reduce_bucket_size": "auto",
                          "offload_param": {"device": "nvme"}}
  })");
  Config c(schema_);
  ASSERT_TRUE(c.load_file(file).is_ok());
  EXPECT_EQ(c.get_int("seed"), 9);
  ASSERT_EQ(c.ignored_file_settings().size(), 4u);
  EXPECT_EQ(c.ignored_file_settings()[0].path, "zero_optimization.stage");
  EXPECT_EQ(c.ignored_file_settings()[0].value, "3");
  EXPECT_EQ(c.ignored_file_settings()[0].file, file);
  EXPECT_EQ(c.ignored_file_settings()[3].value, "\"nvme\"");
  const std::vector<std::string> warnings = c.ignored_file_warnings();
  ASSERT_EQ(warnings.size(), 3u);
  EXPECT_EQ(warnings[0],
            "config file " + file + ": zero_optimization.stage=3 has no effect: one GPU partitions nothing");
  EXPECT_EQ(warnings[1], "config file " + file +
                             ": zero_optimization.overlap_comm=true, zero_optimization.reduce_bucket_size=\"auto\" "
                             "have no effect: no collectives on one GPU");
  EXPECT_EQ(warnings[2], "config file " + file +
                             ": zero_optimization.offload_param.device=\"nvme\" has no effect: placement is strata's");
  EXPECT_TRUE(Config(schema_).ignored_file_warnings().empty());

  // A typo next to an ignored path gets the ignored path as its suggestion; ignored paths are
  // file-only.
  const std::string typo = write_file("ignored_typo.json", R"({"zero_optimization": {"stagee": 3}})");
  expect_error(c.load_file(typo), Code::invalid_argument,
               {"unknown key 'zero_optimization.stagee'", "did you mean 'zero_optimization.stage'?"});
  Env env{"STRATA_ZERO_OPTIMIZATION_STAGE=3"};
  ASSERT_TRUE(c.load_env(env.get()).is_ok());
  ASSERT_EQ(c.unknown_env_warnings().size(), 1u);
  EXPECT_THAT(c.unknown_env_warnings()[0], HasSubstr("STRATA_ZERO_OPTIMIZATION_STAGE is not a strata setting"));
}

TEST_F(ConfigTest, IgnoredFilePathMustHoldOneValue) {
  schema_.ignore_file_paths({"zero_optimization.stage"}, "one GPU partitions nothing");
  const std::string file =
      write_file("ignored_object.json", R"({"seed": 2, "zero_optimization": {"stage": {"x": 1}}})");
  Config c(schema_);
  expect_error(c.load_file(file), Code::invalid_argument,
               {file, "zero_optimization.stage must be a single value (a number, string or boolean)",
                "not an object ({\"x\":1})"});
  EXPECT_EQ(c.get_int("seed"), 1234);  // nothing kept
  EXPECT_TRUE(c.ignored_file_settings().empty());
  const std::string arr = write_file("ignored_array.json", R"({"zero_optimization": {"stage": [3]}})");
  expect_error(c.load_file(arr), Code::invalid_argument,
               {"zero_optimization.stage must be a single value", "an array"});
}

TEST_F(ConfigTest, IgnoredFilePathsCannotShadowKeys) {
  EXPECT_THROW(schema_.ignore_file_paths({"aio.block_size"}, "taken by aio_block_size"), std::logic_error);
  EXPECT_THROW(schema_.ignore_file_paths({"seed"}, "a key's name"), std::logic_error);
  schema_.ignore_file_paths({"aio.thread_count"}, "libaio only");
  EXPECT_THROW(schema_.ignore_file_paths({"aio.thread_count"}, "twice"), std::logic_error);
  EXPECT_THROW(schema_.add({.name = "aio_threads", .type = ValueType::integer, .default_text = "1", .help = "threads",
                            .file_aliases = {"aio.thread_count"}}),
               std::logic_error);
}

TEST_F(ConfigTest, OutOfRangeIntegerNamesSourceKeyValueAndRange) {
  Config c(schema_);
  Env env{"STRATA_AIO_QUEUE_DEPTH=0"};
  const Status s = c.load_env(env.get());
  expect_error(s, Code::out_of_range, {});
  EXPECT_EQ(s.message(), "STRATA_AIO_QUEUE_DEPTH=0: aio_queue_depth must be an integer in [1, 4096]");
  expect_error(c.set("gpu_index", "64", ConfigSource::flag, "--gpu-index"), Code::out_of_range,
               {"--gpu-index 64: gpu_index must be an integer in [0, 63]"});
  expect_error(c.set("seed", "99999999999999999999", ConfigSource::flag, "--seed"), Code::out_of_range, {"seed"});
  expect_error(c.set("seed", "12abc", ConfigSource::flag, "--seed"), Code::invalid_argument,
               {"--seed 12abc: seed must be an integer"});
  expect_error(c.set("lr", "2", ConfigSource::flag, "--lr"), Code::out_of_range, {"lr must be a number in [0, 1]"});
  expect_error(c.set("lr", "fast", ConfigSource::flag, "--lr"), Code::invalid_argument, {"lr must be a number"});
  EXPECT_EQ(c.get_int("aio_queue_depth"), 32);  // failed sets change nothing
}

TEST_F(ConfigTest, SizesAcceptUnitsAndRejectBadOnes) {
  Config c(schema_);
  ASSERT_TRUE(c.set("gpu_mem", "24GB", ConfigSource::flag, "--gpu-mem").is_ok());
  EXPECT_EQ(c.get_size_or_auto("gpu_mem"), 24'000'000'000u);
  ASSERT_TRUE(c.set("gpu_mem", "AUTO", ConfigSource::flag, "--gpu-mem").is_ok());
  EXPECT_EQ(c.get_size_or_auto("gpu_mem"), std::nullopt);
  EXPECT_EQ(c.text("gpu_mem"), "auto");
  expect_error(c.set("gpu_mem", "12XB", ConfigSource::flag, "--gpu-mem"), Code::invalid_argument,
               {"--gpu-mem 12XB: gpu_mem must be a size >= 16 MiB", "or auto", "unknown unit 'XB'"});
  expect_error(c.set("gpu_mem", "1MiB", ConfigSource::env, "STRATA_GPU_MEM"), Code::out_of_range,
               {"STRATA_GPU_MEM=1MiB: gpu_mem must be a size >= 16 MiB"});
  expect_error(c.set("aio_block_size", "1GiB", ConfigSource::flag, "--aio-block-size"), Code::out_of_range,
               {"aio_block_size must be a size in [4 KiB, 64 MiB]"});
  expect_error(c.set("aio_block_size", "auto", ConfigSource::flag, "--aio-block-size"), Code::invalid_argument,
               {"aio_block_size must be a size"});
}

TEST_F(ConfigTest, ChoicesAreCaseInsensitiveAndListedOnError) {
  Config c(schema_);
  ASSERT_TRUE(c.set("log_level", "DEBUG", ConfigSource::flag, "--log-level").is_ok());
  EXPECT_EQ(c.get_text("log_level"), "debug");
  expect_error(c.set("log_level", "verbose", ConfigSource::flag, "--log-level"), Code::invalid_argument,
               {"--log-level verbose: log_level must be one of trace, debug, info, warn, error, off"});
  expect_error(c.set("simd", "sse", ConfigSource::env, "STRATA_SIMD"), Code::invalid_argument,
               {"STRATA_SIMD=sse", "one of auto, scalar, avx2, avx512"});
}

TEST_F(ConfigTest, BooleansAcceptCommonSpellings) {
  Config c(schema_);
  for (const char* yes : {"true", "1", "yes", "ON"}) {
    ASSERT_TRUE(c.set("pin_memory", yes, ConfigSource::flag, "--pin-memory").is_ok()) << yes;
    EXPECT_TRUE(c.get_bool("pin_memory")) << yes;
  }
  for (const char* no : {"false", "0", "no", "off"}) {
    ASSERT_TRUE(c.set("pin_memory", no, ConfigSource::flag, "--pin-memory").is_ok()) << no;
    EXPECT_FALSE(c.get_bool("pin_memory")) << no;
  }
  expect_error(c.set("pin_memory", "maybe", ConfigSource::flag, "--pin-memory"), Code::invalid_argument,
               {"pin_memory must be true or false"});
}

TEST_F(ConfigTest, GetterMisuseIsALogicError) {
  Config c(schema_);
  EXPECT_THROW(c.get_int("gpu_mem"), std::logic_error);   // a size
  EXPECT_THROW(c.get_size("gpu_mem"), std::logic_error);  // auto: use get_size_or_auto
  EXPECT_THROW(c.get_text("nope"), std::logic_error);
  EXPECT_THROW(c.source("nope"), std::logic_error);
  EXPECT_THROW(c.get_list("config"), std::logic_error);
  try {
    c.get_bool("seed");
    FAIL() << "no throw";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("seed"), std::string::npos) << e.what();
  }
}

TEST(ConfigSchema, RejectsDuplicatesAndBadDefaults) {
  ConfigSchema s;
  s.add({.name = "seed", .type = ValueType::integer, .default_text = "1", .help = "seed"});
  EXPECT_THROW(s.add({.name = "seed", .type = ValueType::integer, .default_text = "1"}), std::logic_error);
  EXPECT_THROW(s.add({.name = "depth", .type = ValueType::integer, .default_text = "0", .min = 1}), std::logic_error);
  EXPECT_THROW(s.add({.name = "mode", .type = ValueType::choice, .default_text = "a"}), std::logic_error);
  EXPECT_THROW(s.add({.name = "other", .type = ValueType::text, .file_aliases = {"seed"}}), std::logic_error);
  EXPECT_EQ(s.keys().size(), 1u);
}

TEST(ConfigSchema, NamesForFlagsEnvAndFiles) {
  ConfigSchema s = test_schema();
  EXPECT_EQ(ConfigSchema::flag_name("gpu_mem"), "--gpu-mem");
  EXPECT_EQ(ConfigSchema::env_name("gpu_mem"), "STRATA_GPU_MEM");
  ASSERT_NE(s.find_by_flag("--aio-queue-depth"), nullptr);
  EXPECT_EQ(s.find_by_flag("--aio-queue-depth")->name, "aio_queue_depth");
  EXPECT_EQ(s.find_by_flag("--aio_queue_depth"), nullptr);
  ASSERT_NE(s.find_by_env("STRATA_AIO_QUEUE_DEPTH"), nullptr);
  EXPECT_EQ(s.find_by_env("STRATA_aio_queue_depth"), nullptr);
  EXPECT_EQ(s.find_by_env("AIO_QUEUE_DEPTH"), nullptr);
  ASSERT_NE(s.find_by_file_path("zero_optimization.offload_optimizer.nvme_path"), nullptr);
  EXPECT_EQ(s.find_by_file_path("zero_optimization.offload_optimizer.nvme_path")->name, "nvme_path");
}

TEST_F(ConfigTest, TableAndJsonShowValuesAndSources) {
  Config c(schema_);
  ASSERT_TRUE(c.set("gpu_mem", "8GiB", ConfigSource::flag, "--gpu-mem").is_ok());
  ASSERT_TRUE(c.set("nvme_path", "/a,/b", ConfigSource::env, "STRATA_NVME_PATH").is_ok());
  const std::string table = c.render_table();
  EXPECT_NE(table.find("gpu_mem"), std::string::npos);
  EXPECT_NE(table.find("8GiB"), std::string::npos);
  EXPECT_NE(table.find("flag --gpu-mem"), std::string::npos);
  EXPECT_NE(table.find("env STRATA_NVME_PATH"), std::string::npos);
  // Aligned: every row puts its value at the same column as the header's "value".
  const size_t value_col = table.find("value");
  const size_t row = table.find("\ngpu_mem ");
  ASSERT_NE(row, std::string::npos);
  EXPECT_EQ(table.substr(row + 1 + value_col, 4), "8GiB");

  const nlohmann::json j = c.to_json();
  EXPECT_EQ(j["gpu_mem"]["value"], 8 * GiB);
  EXPECT_EQ(j["gpu_mem"]["source"], "flag");
  EXPECT_EQ(j["gpu_mem"]["origin"], "--gpu-mem");
  EXPECT_EQ(j["cpu_mem"]["value"], "auto");
  EXPECT_EQ(j["seed"]["value"], 1234);
  EXPECT_EQ(j["seed"]["source"], "default");
  EXPECT_EQ(j["pin_memory"]["value"], false);
  EXPECT_EQ(j["nvme_path"]["value"], (nlohmann::json{"/a", "/b"}));
  EXPECT_EQ(j.size(), schema_.keys().size());
}

}  // namespace
}  // namespace strata
