// The calibration cache through the CLI (model/plan/calibration.h, tools/strata/calibration_record.h):
// `strata bench adam` and `strata bench io` record their rates for this machine (not with
// --no-record), and `strata plan` then marks those rates "measured <day> by strata bench ..." and
// uses them, a --rate-* flag still winning; `strata plan --calibrate` measures and records in one
// go; the default file is under $XDG_CACHE_HOME; a corrupt file, one of another version and one of
// another machine are named in a warning with the reason, and the plan falls back to the assumed
// defaults (a corrupt file is moved aside when a bench records again); a described machine uses a
// file only when it is named, and then whatever machine recorded it.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tools/run_cli.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using test::CliResult;
using test::run_cli;
using test::temp_path;

class CalibrationCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_path("strata_calibration_cli." + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ + "/disk");
    file_ = dir_ + "/calibration.json";
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  nlohmann::json read_file() const {
    std::ifstream in(file_);
    return nlohmann::json::parse(in);
  }
  // A small real Adam bench (a fraction of a second).
  CliResult bench_adam(std::vector<std::string> extra = {}) const {
    std::vector<std::string> args = {"bench", "adam", "--params", "1M", "--tensors", "4", "--grad", "fp32",
                                     "--states", "fp32", "--repeat", "1", "--no-torch", "--calibration", file_};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  }
  // `strata plan` for this machine (the CPU memory and the disk detected) as JSON.
  CliResult plan(std::vector<std::string> extra = {}, std::vector<std::string> env = {}) const {
    std::vector<std::string> args = {"plan",      "--device",    "cpu",       "--gpu-mem", "1GiB",
                                     "--nvme-path", dir_ + "/disk", "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args, env);
  }
  std::string dir_, file_;
};

TEST_F(CalibrationCli, BenchesRecordAndThePlanUsesTheMeasuredRates) {
  const CliResult adam = bench_adam();
  ASSERT_EQ(adam.exit_code, 0) << adam.err;
  EXPECT_NE(adam.err.find("calibration: recorded in " + file_), std::string::npos) << adam.err;
  const CliResult io = run_cli({"bench", "io", "--path", dir_ + "/disk", "--size", "64MiB", "--block", "8MiB", "--qd",
                                "8", "--no-fio", "--csv", "", "--calibration", file_});
  ASSERT_EQ(io.exit_code, 0) << io.err;

  const nlohmann::json j = read_file();
  EXPECT_EQ(j.at("format"), "strata calibration");
  EXPECT_EQ(j.at("version"), 1);
  ASSERT_EQ(j.at("machines").size(), 1u);
  const nlohmann::json& machine = j.at("machines")[0];
  EXPECT_GT(machine.at("machine").at("logical_cpus").get<int>(), 0);
  EXPECT_GT(machine.at("machine").at("ram_bytes").get<uint64_t>(), 0u);
  std::map<std::string, nlohmann::json> rates;
  for (const nlohmann::json& r : machine.at("rates")) rates[r.at("rate")] = r;
  ASSERT_EQ(rates.size(), 3u) << j.dump(2);
  EXPECT_EQ(rates["adam"].at("states"), "fp32");
  EXPECT_EQ(rates["adam"].at("by"), "strata bench adam");
  EXPECT_GT(rates["adam"].at("value").get<double>(), 1e6);
  EXPECT_EQ(rates["nvme_read"].at("path"), dir_ + "/disk");
  EXPECT_EQ(rates["nvme_write"].at("by"), "strata bench io");
  EXPECT_GT(rates["nvme_write"].at("value").get<double>(), 1e6);
  EXPECT_EQ(rates["nvme_read"].at("measured_at").get<std::string>().size(), 20u);

  const CliResult p = plan({"--calibration", file_});
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_EQ(p.err.find("calibration:"), std::string::npos) << "no warning: " << p.err;
  const nlohmann::json pj = nlohmann::json::parse(p.out);
  const std::string day = rates["adam"].at("measured_at").get<std::string>().substr(0, 10);
  EXPECT_EQ(pj.at("rate_sources").at("adam"), "measured " + day + " by strata bench adam");
  EXPECT_EQ(pj.at("rate_sources").at("nvme_read"), "measured " + day + " by strata bench io");
  EXPECT_EQ(pj.at("rate_sources").at("flops"), "assumed default");
  EXPECT_EQ(pj.at("rates").at("adam").get<double>(), rates["adam"].at("value").get<double>());
  EXPECT_EQ(pj.at("rates").at("nvme_write").get<double>(), rates["nvme_write"].at("value").get<double>());
  EXPECT_EQ(pj.at("calibration"), file_);
  EXPECT_EQ(pj.at("assumed_rates").size(), 2u);  // flops and pcie: no GPU measured here
  // The text marks each rate by its source.
  const CliResult text = run_cli({"plan", "--device", "cpu", "--gpu-mem", "1GiB", "--nvme-path", dir_ + "/disk",
                                  "--calibration", file_});
  EXPECT_NE(text.out.find("(measured " + day + " by strata bench adam)"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("measured rates from " + file_), std::string::npos) << text.out;
  // A flag wins over a measurement.
  const CliResult given = plan({"--calibration", file_, "--rate-adam", "3"});
  ASSERT_EQ(given.exit_code, 0) << given.err;
  const nlohmann::json gj = nlohmann::json::parse(given.out);
  EXPECT_EQ(gj.at("rate_sources").at("adam"), "given");
  EXPECT_EQ(gj.at("rates").at("adam").get<double>(), 3e9);
  // train's end-of-run lines say the same.
  const CliResult train = run_cli({"train", "--device", "cpu", "--steps", "2", "--eval-every", "0", "--calibration",
                                   file_});
  ASSERT_EQ(train.exit_code, 0) << train.err;
  EXPECT_NE(train.err.find("cpu adam measured " + day + " by strata bench adam"), std::string::npos) << train.err;
}

TEST_F(CalibrationCli, NoRecordAndNoneLeaveTheFileAlone) {
  ASSERT_EQ(bench_adam({"--no-record"}).exit_code, 0);
  EXPECT_FALSE(fs::exists(file_));
  const CliResult none = run_cli({"bench", "adam", "--params", "1M", "--tensors", "4", "--grad", "fp32", "--states",
                                  "fp32", "--repeat", "1", "--no-torch"},
                                 {"STRATA_CALIBRATION=none", "XDG_CACHE_HOME=" + dir_});
  ASSERT_EQ(none.exit_code, 0) << none.err;
  EXPECT_FALSE(fs::exists(dir_ + "/strata/calibration.json"));
}

TEST_F(CalibrationCli, TheDefaultFileIsUnderTheXdgCacheDirectory) {
  const std::vector<std::string> env = {"STRATA_CALIBRATION=", "XDG_CACHE_HOME=" + dir_};
  const CliResult r = run_cli({"bench", "adam", "--params", "1M", "--tensors", "4", "--grad", "fp32", "--states",
                               "fp32", "--repeat", "1", "--no-torch"},
                              env);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_TRUE(fs::exists(dir_ + "/strata/calibration.json")) << r.err;
  const CliResult p = plan({}, env);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(nlohmann::json::parse(p.out).at("rate_sources").at("adam").get<std::string>().find("strata bench adam"),
            std::string::npos)
      << p.out;
}

TEST_F(CalibrationCli, PlanCalibrateMeasuresAndRecordsThisMachine) {
  const CliResult r = plan({"--calibration", file_, "--calibrate"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.err.find("calibrate: sequential O_DIRECT reads and writes on " + dir_ + "/disk"), std::string::npos)
      << r.err;
  // --device cpu: the CPU backend's copies (memcpy) and GEMMs, which a CPU-backend run computes with.
  EXPECT_NE(r.err.find("calibrate: host<->device copies and the model's GEMMs on the CPU backend (--device cpu)"),
            std::string::npos)
      << r.err;
  const nlohmann::json pj = nlohmann::json::parse(r.out);
  for (const char* rate : {"flops", "pcie", "adam", "nvme_read", "nvme_write"})
    EXPECT_NE(pj.at("rate_sources").at(rate).get<std::string>().find("by strata plan --calibrate"), std::string::npos)
        << rate << ": " << r.out;
  std::vector<std::string> recorded;
  const nlohmann::json file = read_file();
  for (const nlohmann::json& rate : file.at("machines")[0].at("rates"))
    if (rate.at("by") == "strata plan --calibrate") {
      recorded.push_back(rate.at("rate").get<std::string>());
      if (rate.contains("backend")) EXPECT_EQ(rate.at("backend"), "cpu") << rate.dump();
    }
  std::sort(recorded.begin(), recorded.end());
  EXPECT_EQ(recorded, (std::vector<std::string>{"adam", "flops", "nvme_read", "nvme_write", "pcie_d2h", "pcie_h2d"}));
  // The plan of a CPU-backend run adds its parts and says so.
  EXPECT_TRUE(pj.at("time").at("shared_cores").get<bool>());
  // Not for a described machine, nor without a file.
  const CliResult described = run_cli({"plan", "--gpu-mem", "8GiB", "--cpu-mem", "8GiB", "--nvme-mem", "1TB",
                                       "--calibrate", "--calibration", file_});
  EXPECT_EQ(described.exit_code, 2) << described.err;
  EXPECT_NE(described.err.find("--calibrate measures this machine"), std::string::npos) << described.err;
  const CliResult none = plan({"--calibrate"});
  EXPECT_EQ(none.exit_code, 2) << none.err;
  EXPECT_NE(none.err.find("pass --calibration FILE"), std::string::npos) << none.err;
}

// A file with one machine of rates whose fingerprint is `cpu` (not this machine's).
void write_other_machine(const std::string& path, int version = 1) {
  std::ofstream(path) << R"({"format": "strata calibration", "version": )" << version << R"(, "machines": [
    {"machine": {"cpu": "Imaginary CPU 9000", "logical_cpus": 512, "ram_bytes": 4398046511104, "gpus": []},
     "rates": [{"rate": "adam", "value": 7e9, "states": "fp32", "threads": 512,
                "measured_at": "2024-01-02T03:04:05Z", "by": "strata bench adam", "how": "by hand"}]}]})";
}

TEST_F(CalibrationCli, BadFilesAreNamedInAWarningAndTheDefaultsUsed) {
  struct Bad {
    std::string name;
    std::string says;
  };
  std::ofstream(dir_ + "/corrupt.json") << "{\"format\": \"strata calibration\", \"version\": 1, \"machi";
  write_other_machine(dir_ + "/version.json", 7);
  write_other_machine(dir_ + "/other.json");
  for (const Bad& b : std::vector<Bad>{
           {"corrupt.json", "corrupt.json is not JSON; its rates are not used"},
           {"version.json", "version.json is version 7; this strata reads version 1; its rates are not used"},
           {"other.json", "its rates were measured on another machine (the CPU is"},
       }) {
    SCOPED_TRACE(b.name);
    const CliResult r = plan({"--calibration", dir_ + "/" + b.name});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("calibration: " + dir_ + "/" + b.name), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(b.says), std::string::npos) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j.at("rate_sources").at("adam"), "assumed default");
    EXPECT_EQ(j.at("rates").at("adam").get<double>(), 1e9);
    EXPECT_EQ(j.at("calibration"), "");
  }
  // Recording again: a corrupt file is moved aside, another version replaced, another machine's kept.
  file_ = dir_ + "/corrupt.json";
  const CliResult corrupt = bench_adam();
  ASSERT_EQ(corrupt.exit_code, 0) << corrupt.err;
  EXPECT_NE(corrupt.err.find("moved it to " + file_ + ".corrupt"), std::string::npos) << corrupt.err;
  EXPECT_EQ(read_file().at("machines").size(), 1u);
  EXPECT_TRUE(fs::exists(file_ + ".corrupt"));
  file_ = dir_ + "/version.json";
  ASSERT_EQ(bench_adam().exit_code, 0);
  EXPECT_EQ(read_file().at("version"), 1);
  EXPECT_EQ(read_file().at("machines").size(), 1u);
  file_ = dir_ + "/other.json";
  ASSERT_EQ(bench_adam().exit_code, 0);
  EXPECT_EQ(read_file().at("machines").size(), 2u) << "the other machine's rates stay";
  const CliResult mine = plan({"--calibration", file_});
  EXPECT_NE(nlohmann::json::parse(mine.out).at("rates").at("adam").get<double>(), 7e9) << "this machine's, not the other's";
}

TEST_F(CalibrationCli, ADescribedMachineTakesOnlyAFileItIsGiven) {
  write_other_machine(file_);
  const std::vector<std::string> described = {"plan", "--preset", "gpt2-124m", "--gpu-mem", "8GiB", "--cpu-mem",
                                              "8GiB", "--nvme-mem", "1TB", "--json"};
  // The default cache (under XDG_CACHE_HOME) is this machine's: not read for another.
  fs::create_directories(dir_ + "/strata");
  fs::copy_file(file_, dir_ + "/strata/calibration.json");
  const CliResult by_default = run_cli(described, {"STRATA_CALIBRATION=", "XDG_CACHE_HOME=" + dir_});
  ASSERT_EQ(by_default.exit_code, 0) << by_default.err;
  EXPECT_EQ(nlohmann::json::parse(by_default.out).at("rate_sources").at("adam"), "assumed default");
  EXPECT_EQ(by_default.err.find("calibration:"), std::string::npos) << by_default.err;
  // Named: its one machine's rates, whatever machine that is, said so.
  std::vector<std::string> named = described;
  named.insert(named.end(), {"--calibration", file_});
  const CliResult r = run_cli(named);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("rates").at("adam").get<double>(), 7e9);
  EXPECT_EQ(j.at("rate_sources").at("adam"),
            "measured 2024-01-02 by strata bench adam on Imaginary CPU 9000, 512 CPUs, 4 TiB RAM, no GPU");
}

}  // namespace
}  // namespace strata
