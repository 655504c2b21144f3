// SIGINT and SIGTERM during `strata train`: the first asks the run to stop after the step in
// progress (the training loop polls stop_signal(), writes a checkpoint when --checkpoint-dir is
// set and exits 128 + signal with the command that resumes; during the setup, from the offload
// tiers on, it stops at the end of the phase in progress, removing the swap directories, with
// nothing to save); a second one exits at once
// (128 + signal, no checkpoint). Not a general signal library: one process-wide flag, set from the
// handler with nothing but async-signal-safe calls (write, _exit).
#pragma once

#include <string>

namespace strata::model {

// Installs the handlers (SA_RESTART: system calls in progress resume). Idempotent.
void install_stop_signals();
// The first signal received since install_stop_signals(), or 0.
int stop_signal();
// "SIGINT", "SIGTERM", or "signal N".
std::string signal_name(int sig);

// This process's command line (/proc/self/cmdline) with "--resume DIR" set to `resume_dir`
// (replacing a --resume already there), quoted for a POSIX shell; the program name as invoked.
std::string resume_command(const std::string& resume_dir);

}  // namespace strata::model
