// Fuzz harness: the safetensors reader and checkpoint verification (model/hf/safetensors.h,
// model/ckpt/checkpoint.h). The input is written as both files of a checkpoint directory, then opened
// and verified: header parsing, layout checks, metadata, per-tensor checksums, finite values.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "model/ckpt/checkpoint.h"
#include "model/hf/safetensors.h"
#include "tests/fuzz/fuzz_target.h"

namespace {

// One scratch directory per process, on tmpfs when there is one, removed at exit. The name is
// never destroyed: the atexit handler, registered inside the initializer, runs after a static
// string's destructor (registered when the initializer returns), so it read freed memory (found
// by ASan when libFuzzer exits).
const std::string& scratch_dir() {
  static const std::string& dir = *[] {
    const std::filesystem::path base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    auto* d = new std::string((base / ("strata-fuzz-safetensors-" + std::to_string(getpid()))).string());
    std::filesystem::create_directories(*d);
    std::atexit([] { std::error_code ec; std::filesystem::remove_all(scratch_dir(), ec); });
    return d;
  }();
  return dir;
}

void write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), std::streamsize(size));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = scratch_dir();
  const std::string model = dir + "/" + std::string(strata::model::kCheckpointModelFile);
  write_file(model, data, size);
  write_file(dir + "/" + std::string(strata::model::kCheckpointOptimizerFile), data, size);
  strata::StatusOr<strata::model::SafetensorsFile> f = strata::model::SafetensorsFile::open(model);
  if (f.is_ok()) {
    uint64_t sum = 0;
    for (const strata::model::SafetensorsTensor& t : f->tensors()) {
      const auto bytes = f->data(t);
      if (!bytes.empty()) sum += uint64_t(bytes.front()) + uint64_t(bytes.back());
    }
    (void)sum;
  }
  (void)strata::model::verify_checkpoint(dir);
  return 0;
}
