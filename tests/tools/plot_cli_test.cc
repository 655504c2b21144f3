// `strata plot`: a real run's --metrics file drawn to a PNG of the asked size (checked in the PNG's
// header) at the asked or the default path; a truncated last line (a killed run) still plots; a
// missing file, a file that is not JSON lines and one without step rows exit 1 saying so; a bad
// --size or no file exits 2.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "tools/run_cli.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using test::CliResult;
using test::run_cli;

bool have_gnuplot() { return std::system("gnuplot --version > /dev/null 2>&1") == 0; }

// The width and height a PNG file's IHDR chunk gives, or {0, 0} when it is not a PNG.
std::pair<uint32_t, uint32_t> png_size(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char h[24] = {};
  in.read(reinterpret_cast<char*>(h), sizeof(h));
  const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (!in || !std::equal(signature, signature + 8, h) || std::string(reinterpret_cast<char*>(h) + 12, 4) != "IHDR")
    return {0, 0};
  const auto be32 = [&](int at) { return uint32_t(h[at]) << 24 | uint32_t(h[at + 1]) << 16 | uint32_t(h[at + 2]) << 8 | h[at + 3]; };
  return {be32(16), be32(20)};
}

class PlotCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // CTest runs each test in its own process, in parallel: a directory per process.
    dir_ = fs::path(test::temp_path("strata_plot_cli_" + std::to_string(::getpid())));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    metrics_ = (dir_ / "run.jsonl").string();
    const CliResult r = run_cli({"train", "--device", "cpu", "--steps", "12", "--eval-every", "4", "--eval-batches",
                                 "1", "--metrics", metrics_});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  void SetUp() override {
    if (!have_gnuplot()) GTEST_SKIP() << "gnuplot is not installed (apt-get install gnuplot-nox)";
  }

  static inline fs::path dir_;
  static inline std::string metrics_;
};

TEST_F(PlotCli, DrawsARunAtTheAskedSizeAndPath) {
  const std::string png = (dir_ / "picture.png").string();
  CliResult r = run_cli({"plot", metrics_, "-o", png, "--size", "640x480", "--title", "tiny run"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(png_size(png), (std::pair<uint32_t, uint32_t>{640, 480}));
  EXPECT_NE(r.out.find("plot: 12 steps of " + metrics_ + " drawn to " + png + " (640x480"), std::string::npos) << r.out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_))  // no script or data file left behind
    EXPECT_TRUE(e.path().extension() == ".png" || e.path().extension() == ".jsonl") << e.path();
}

TEST_F(PlotCli, DefaultOutputIsTheMetricsFileAsPng) {
  CliResult r = run_cli({"plot", metrics_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(png_size((dir_ / "run.png").string()), (std::pair<uint32_t, uint32_t>{1200, 900}));
}

TEST_F(PlotCli, ALastLineCutShortStillPlots) {
  const std::string cut = (dir_ / "cut.jsonl").string();
  fs::copy_file(metrics_, cut, fs::copy_options::overwrite_existing);
  std::ofstream(cut, std::ios::app) << "{\"step\": 13, \"loss\": 2.";
  const std::string png = (dir_ / "cut.png").string();
  CliResult r = run_cli({"plot", cut, "-o", png});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("plot: 12 steps of "), std::string::npos) << r.out;
  EXPECT_EQ(png_size(png).first, 1200u);
}

TEST_F(PlotCli, BadFilesExitOneSayingWhatIsWrong) {
  const std::string missing = (dir_ / "absent.jsonl").string();
  CliResult r = run_cli({"plot", missing});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("cannot read metrics file " + missing), std::string::npos) << r.err;

  const std::string text = (dir_ / "notes.txt").string();
  std::ofstream(text) << "loss went down\nthen up\n";
  r = run_cli({"plot", text});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(text + " line 1 is not a JSON object: not a `strata train --metrics` file?"),
            std::string::npos)
      << r.err;

  const std::string other = (dir_ / "other.jsonl").string();
  std::ofstream(other) << "{\"name\": \"x\"}\n{\"name\": \"y\"}\n";
  r = run_cli({"plot", other});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(other + " has no step rows"), std::string::npos) << r.err;

  const std::string wrong = (dir_ / "wrong.jsonl").string();
  std::ofstream(wrong) << "{\"step\": 1, \"loss\": \"low\"}\n";
  r = run_cli({"plot", wrong});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find(wrong + " line 1: a step row needs step, loss, lr"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "wrong.png"));
}

TEST_F(PlotCli, BadFlagsExitTwo) {
  CliResult r = run_cli({"plot", metrics_, "--size", "10x10"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--size 10x10: expected WIDTHxHEIGHT in pixels, each 200 to 10000"), std::string::npos)
      << r.err;
  r = run_cli({"plot", metrics_, "--size", "big"});
  EXPECT_EQ(r.exit_code, 2);
  r = run_cli({"plot"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("metrics"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace strata
