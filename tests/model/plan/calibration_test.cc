// The calibration cache (model/plan/calibration.h): a file round-trips every field; a corrupt file, one
// of another version or another format is refused naming the file and the reason; fingerprints
// match within their tolerance and name the first difference; a later measurement replaces the
// same slot only; and the rates chosen for a run are the ones of its backend, device, precision,
// moments and disks (an NVMe path now on another disk is passed over with a note, disks sum).
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "model/plan/calibration.h"
#include "tests/model/model_test_files.h"

namespace strata::model {
namespace {

using testing::expect_value;

MachineFingerprint box() {
  return {.cpu = "AMD EPYC 9654 96-Core Processor", .logical_cpus = 16, .ram_bytes = 128ull << 30,
          .gpus = {{"NVIDIA H100 80GB HBM3", 80ull << 30}}};
}

CalibrationRate rate(std::string name, double value) {
  CalibrationRate r;
  r.rate = std::move(name);
  r.value = value;
  r.measured_at = "2025-06-01T12:00:00Z";
  r.by = "strata bench test";
  r.how = "by hand";
  return r;
}

CalibrationRate nvme(std::string name, double value, std::string path, std::string disk) {
  CalibrationRate r = rate(std::move(name), value);
  r.path = std::move(path);
  r.disk = std::move(disk);
  r.filesystem = "ext4";
  return r;
}

CalibrationRate on_device(std::string name, double value, std::string backend, std::string device,
                          std::string precision = "") {
  CalibrationRate r = rate(std::move(name), value);
  r.backend = std::move(backend);
  r.device = std::move(device);
  r.precision = std::move(precision);
  return r;
}

CalibrationRate adam(double value, std::string states) {
  CalibrationRate r = rate("adam", value);
  r.states = std::move(states);
  r.threads = 16;
  return r;
}

TEST(CalibrationTest, AFileRoundTripsEveryField) {
  CalibrationCache cache;
  MachineFingerprint cpu_only = box();
  cpu_only.gpus.clear();
  cpu_only.cpu = "Intel Xeon";
  cache.machines = {{box(),
                     {nvme("nvme_read", 6.5e9, "/data", "nvme0n1"), on_device("pcie_h2d", 52e9, "cuda", "NVIDIA H100"),
                      on_device("flops", 6.1e14, "cuda", "NVIDIA H100", "bf16"), adam(1.6e9, "8bit")}},
                    {cpu_only, {adam(2e8, "fp32")}}};
  testing::TempDir dir;
  const std::string path = dir.path() + "/sub/calibration.json";
  ASSERT_TRUE(write_calibration(path, cache).is_ok());
  const std::optional<CalibrationCache> back = expect_value(read_calibration(path));
  ASSERT_TRUE(back.has_value());
  ASSERT_EQ(back->machines.size(), 2u);
  EXPECT_EQ(back->machines[0].machine.cpu, box().cpu);
  EXPECT_EQ(back->machines[0].machine.logical_cpus, 16);
  EXPECT_EQ(back->machines[0].machine.ram_bytes, 128ull << 30);
  ASSERT_EQ(back->machines[0].machine.gpus.size(), 1u);
  EXPECT_EQ(back->machines[0].machine.gpus[0].memory_bytes, 80ull << 30);
  EXPECT_TRUE(back->machines[1].machine.gpus.empty());
  ASSERT_EQ(back->machines[0].rates.size(), 4u);
  const CalibrationRate& d = back->machines[0].rates[0];
  EXPECT_EQ(d.rate, "nvme_read");
  EXPECT_EQ(d.value, 6.5e9);
  EXPECT_EQ(d.path, "/data");
  EXPECT_EQ(d.disk, "nvme0n1");
  EXPECT_EQ(d.filesystem, "ext4");
  EXPECT_EQ(d.measured_at, "2025-06-01T12:00:00Z");
  EXPECT_EQ(d.by, "strata bench test");
  EXPECT_EQ(d.how, "by hand");
  EXPECT_EQ(back->machines[0].rates[2].precision, "bf16");
  EXPECT_EQ(back->machines[0].rates[3].states, "8bit");
  EXPECT_EQ(back->machines[0].rates[3].threads, 16);
  EXPECT_EQ(calibration_json(*back), calibration_json(cache));
  // No temporary file is left beside it.
  size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() + "/sub")) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);
  EXPECT_FALSE(expect_value(read_calibration(dir.path() + "/none.json")).has_value()) << "a missing file is no cache";
}

TEST(CalibrationTest, BadFilesAreRefusedNamingTheFileAndTheReason) {
  struct Bad {
    std::string text;
    Code code;
    std::string says;
  };
  const std::string head = R"({"format": "strata calibration", "version": 1, "machines": [{"machine": )"
                           R"({"cpu": "x", "logical_cpus": 2, "ram_bytes": 1000, "gpus": []}, "rates": [)";
  for (const Bad& b : std::vector<Bad>{
           {"{\"format\": \"strata calibration\", \"vers", Code::corruption, "is not JSON"},
           {R"({"zero_optimization": {}})", Code::corruption, "is not a strata calibration file"},
           {R"({"format": "strata calibration", "version": 2, "machines": []})", Code::failed_precondition,
            "is version 2; this strata reads version 1"},
           {R"({"format": "strata calibration", "version": 1})", Code::corruption, "no \"machines\" list"},
           {head + R"({"rate": "warp_speed", "value": 1, "measured_at": "2025-06-01", "by": "me"}]}]})",
            Code::corruption, "unknown rate \"warp_speed\""},
           {head + R"({"rate": "adam", "value": -1, "states": "fp32", "measured_at": "2025-06-01", "by": "me"}]}]})",
            Code::corruption, "\"value\" must be a number above 0"},
           {head + R"({"rate": "adam", "value": 1e9, "states": "fp32"}]}]})", Code::corruption,
            "\"measured_at\" and \"by\""},
           {head + R"({"rate": "nvme_read", "value": 1e9, "measured_at": "2025-06-01", "by": "me"}]}]})",
            Code::corruption, "\"path\" is missing"},
       }) {
    const Status s = parse_calibration(b.text, "/cache/calibration.json").status();
    EXPECT_EQ(s.code(), b.code) << b.text << ": " << s.message();
    EXPECT_NE(s.message().find("/cache/calibration.json"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(b.says), std::string::npos) << s.message();
  }
}

TEST(CalibrationTest, FingerprintsMatchWithinTheirToleranceAndNameTheFirstDifference) {
  const MachineFingerprint here = box();
  MachineFingerprint same = here;
  same.ram_bytes -= 64ull << 20;  // MemTotal moves by a few MB between boots
  EXPECT_EQ(fingerprint_difference(here, same), "");
  MachineFingerprint cpu = here;
  cpu.cpu = "Intel Xeon Platinum 8480+";
  EXPECT_NE(fingerprint_difference(here, cpu).find("Intel Xeon Platinum 8480+"), std::string::npos);
  MachineFingerprint cores = here;
  cores.logical_cpus = 8;
  EXPECT_EQ(fingerprint_difference(here, cores), "16 CPUs here but 8 in the file");
  MachineFingerprint ram = here;
  ram.ram_bytes = 64ull << 30;
  EXPECT_NE(fingerprint_difference(here, ram).find("of RAM here"), std::string::npos);
  MachineFingerprint no_gpu = here;
  no_gpu.gpus.clear();
  EXPECT_EQ(fingerprint_difference(here, no_gpu), "1 GPU(s) here but 0 in the file");
  MachineFingerprint other_gpu = here;
  other_gpu.gpus[0].name = "NVIDIA H200";
  EXPECT_NE(fingerprint_difference(here, other_gpu).find("NVIDIA H200"), std::string::npos);
  EXPECT_EQ(describe_fingerprint(no_gpu), "AMD EPYC 9654 96-Core Processor, 16 CPUs, 128 GiB RAM, no GPU");
}

TEST(CalibrationTest, ThisMachineHasAFingerprint) {
  const MachineFingerprint m = expect_value(this_machine());
  EXPECT_GT(m.logical_cpus, 0);
  EXPECT_GT(m.ram_bytes, 1ull << 28);
  EXPECT_EQ(fingerprint_difference(m, expect_value(this_machine())), "");
}

TEST(CalibrationTest, ALaterMeasurementReplacesItsSlotOnly) {
  CalibrationCache cache;
  record_rates(cache, box(), {adam(1e9, "fp32"), adam(5e8, "8bit"), nvme("nvme_read", 3e9, "/a", "vda")});
  record_rates(cache, box(), {adam(2e9, "fp32"), nvme("nvme_read", 4e9, "/b", "vda")});
  MachineFingerprint other = box();
  other.logical_cpus = 4;
  record_rates(cache, other, {adam(3e8, "fp32")});
  ASSERT_EQ(cache.machines.size(), 2u);
  const MachineRates* mine = rates_of(cache, box());
  ASSERT_NE(mine, nullptr);
  ASSERT_EQ(mine->rates.size(), 4u);
  EXPECT_EQ(mine->rates[0].value, 2e9);  // adam fp32, replaced
  EXPECT_EQ(mine->rates[1].value, 5e8);  // adam 8bit, kept
  EXPECT_EQ(mine->rates[2].path, "/a");
  EXPECT_EQ(mine->rates[3].path, "/b");  // another path is another slot
  EXPECT_EQ(rates_of(cache, other)->rates.size(), 1u);
  MachineFingerprint stranger = box();
  stranger.cpu = "unknown";
  EXPECT_EQ(rates_of(cache, stranger), nullptr);
}

TEST(CalibrationTest, TheDefaultPathFollowsXdgThenHome) {
  EXPECT_EQ(default_calibration_path("/x/cache", "/home/u"), "/x/cache/strata/calibration.json");
  EXPECT_EQ(default_calibration_path("", "/home/u"), "/home/u/.cache/strata/calibration.json");
  EXPECT_EQ(default_calibration_path(nullptr, "/home/u"), "/home/u/.cache/strata/calibration.json");
  EXPECT_EQ(default_calibration_path(nullptr, nullptr), "");
  EXPECT_EQ(utc_timestamp().size(), 20u);  // 2025-06-01T12:00:00Z
}

TEST(CalibrationTest, TheRatesOfARunAreThoseOfItsBackendPrecisionMomentsAndDisks) {
  const std::vector<CalibrationRate> rates = {
      on_device("flops", 6e14, "cuda", "NVIDIA H100", "bf16"), on_device("flops", 5e13, "cuda", "NVIDIA H100", "fp32"),
      on_device("flops", 4e11, "cpu", "CPU (host memory)", "bf16"), on_device("pcie_h2d", 52e9, "cuda", "NVIDIA H100"),
      on_device("pcie_d2h", 48e9, "cuda", "NVIDIA H100"), adam(1.5e9, "fp32"), adam(1.1e9, "8bit"),
      nvme("nvme_read", 6e9, "/a", "nvme0n1"), nvme("nvme_write", 4e9, "/a", "nvme0n1"),
      nvme("nvme_read", 7e9, "/b", "nvme1n1"), nvme("nvme_write", 5e9, "/b", "nvme1n1")};
  RateQuery q{.backend = "cuda", .device = "NVIDIA H100", .precision = "bf16", .states = "fp32",
              .nvme = {{"/a", "nvme0n1", "ext4"}, {"/b", "nvme1n1", "ext4"}}};
  CachedRates c = cached_rates(rates, q);
  auto value = [&](PlanRateKind k) { return c.rates[size_t(k)] ? c.rates[size_t(k)]->value : 0.0; };
  EXPECT_EQ(value(PlanRateKind::flops), 6e14);
  EXPECT_EQ(value(PlanRateKind::pcie), 48e9);  // the slower way
  EXPECT_NE(c.rates[size_t(PlanRateKind::pcie)]->source.find("d2h"), std::string::npos);
  EXPECT_EQ(value(PlanRateKind::adam), 1.5e9);
  EXPECT_EQ(value(PlanRateKind::nvme_read), 13e9);  // two disks add
  EXPECT_EQ(value(PlanRateKind::nvme_write), 9e9);
  EXPECT_EQ(c.rates[size_t(PlanRateKind::flops)]->source, "measured 2025-06-01 by strata bench test");
  EXPECT_TRUE(c.notes.empty());

  // Another precision, moments and backend; a second directory on the first disk counts once.
  q = {.backend = "cpu", .precision = "fp16", .states = "8bit",
       .nvme = {{"/a", "nvme0n1", "ext4"}, {"/a/more", "nvme0n1", "ext4"}}};
  c = cached_rates(rates, q);
  EXPECT_FALSE(c.rates[size_t(PlanRateKind::flops)]) << "no fp16 measurement";
  EXPECT_FALSE(c.rates[size_t(PlanRateKind::pcie)]) << "no cpu-backend copies measured";
  EXPECT_EQ(value(PlanRateKind::adam), 1.1e9);
  EXPECT_EQ(value(PlanRateKind::nvme_read), 6e9);

  // A path now on another disk: passed over, saying so; a path never measured: no NVMe rate.
  q.nvme = {{"/a", "sdb", "ext4"}};
  c = cached_rates(rates, q);
  EXPECT_FALSE(c.rates[size_t(PlanRateKind::nvme_read)]);
  ASSERT_FALSE(c.notes.empty());
  EXPECT_NE(c.notes[0].find("nvme_read of /a was measured on nvme0n1 (ext4), and the path is on sdb (ext4) now"),
            std::string::npos)
      << c.notes[0];
  q.nvme = {{"/a", "nvme0n1", "ext4"}, {"/c", "sdc", "xfs"}};
  c = cached_rates(rates, q);
  EXPECT_FALSE(c.rates[size_t(PlanRateKind::nvme_write)]);
  bool named = false;
  for (const std::string& n : c.notes) named |= n.find("no nvme_write measured for /c") != std::string::npos;
  EXPECT_TRUE(named);
}

}  // namespace
}  // namespace strata::model
