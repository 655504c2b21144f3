// The libFuzzer entry point every harness under tests/fuzz defines, and the rule each one checks:
// a malformed input is an error Status, never a crash, a hang or an exception. With STRATA_FUZZ
// (clang) the harnesses link libFuzzer; otherwise fuzz_replay_main.cc replays the committed corpus
// plus seeded mutations of it, bounded, as a CTest test. Not a test framework.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
