// TrainingRun: one `strata train` run as a library object. setup() does the whole setup from a
// resolved Config -- preflight (paths, the checkpoint directory's lock and room, the model's size
// against the machine), the resume, the placement (flags' or planner's) and tiling, the data, the
// backend, the weight offload stack, the model, the trainer (which builds the gradient and
// optimizer offload itself), the metrics sinks -- and train() runs the steps, then the end-of-run
// lines. Not the CLI: no flags, no exit codes (RunOutcome says how it ended; tools/strata/cmd_train.cc
// maps it), no terminal detection (the caller passes the status line).
//
// Output: the run logs through spdlog as the CLI always has (the caller sets up logging), writes
// --metrics, TensorBoard and --trace files, and prints nothing else itself; an observer's
// (--bench) report goes where the observer puts it.
// Across ranks (launched by mpirun, runtime/communicator.h's detect_launch): every rank runs the
// same run on its own backend, micro-batch j x N + r of each step on rank r (RankBatches; --grad-accum
// is the step's micro-batches over all ranks and must be a multiple of the world size N), the
// gradient summed across ranks round by round, in rank order, into each rank's shard, the optimizer state partitioned (ZeRO: each
// rank updates its shard, the weights are all-gathered; Trainer's TrainerIo::comm), so the run is
// the bits of one rank with grad-accum N. Rank 0 alone writes checkpoints, --metrics,
// TensorBoard and --trace (one set of files whatever the world size); a stop signal is agreed by
// every rank at the next step's start.
// Thread-safety: one thread (the caller's) calls setup() and train(); SIGINT/SIGTERM are polled
// (model/train/train_signals.h), never handled here.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "model/ckpt/checkpoint.h"
#include "model/ckpt/checkpoint_store.h"
#include "model/data/batch_loader.h"
#include "model/data/rank_batches.h"
#include "model/data/run_data.h"
#include "model/hf/hf_weights.h"
#include "model/net/model_config.h"
#include "model/net/transformer.h"
#include "model/plan/train_placement.h"
#include "model/train/metrics_log.h"
#include "model/train/tensorboard_writer.h"
#include "model/train/train_device_rates.h"
#include "model/train/train_offload.h"
#include "model/train/train_options.h"
#include "model/train/setup_progress.h"
#include "model/train/train_progress.h"
#include "model/train/trainer.h"
#include "offload/trace.h"
#include "runtime/backend.h"
#include "runtime/communicator.h"
#include "runtime/config.h"
#include "runtime/dir_lock.h"
#include "runtime/pinned_pool.h"
#include "runtime/status.h"
#include "runtime/status_line.h"
#include "runtime/thread_pool.h"

namespace strata::model {

// How a run ended, for the caller's exit code.
enum class RunEnd : uint8_t {
  trained,  // every step, the last checkpoint and the end-of-run lines
  refused,  // before any step: flags, files, paths or sizes the user must change (status says which)
  failed,   // the run itself failed (I/O, memory, data, divergence); status says what and how to resume
  stopped,  // a stop signal (`signal`): checkpoint written when it could; status set only when it could not
};
struct RunOutcome {
  RunEnd end = RunEnd::trained;
  Status status;   // ok for trained, and for stopped with nothing to report
  int signal = 0;  // stopped: the signal number
  // Nothing ended the run (yet): a setup phase that lets it go on, or a run that trained.
  bool ok() const { return end == RunEnd::trained && status.is_ok(); }
};
inline RunOutcome refused(Status s) { return {RunEnd::refused, std::move(s)}; }
inline RunOutcome failed(Status s) { return {RunEnd::failed, std::move(s)}; }
// By the error's code: refused for what the user fixes with other flags or files (invalid_argument,
// not_found, out_of_range, permission_denied, no_space), failed otherwise.
RunOutcome outcome_of(Status s);

// An instrument bracketing every step (`strata train --bench`, tools/strata/train_bench.h): made
// after the offload stack, before the model; destroyed before the offload stack.
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual TraceRecorder* trace() = 0;  // where the model's compute spans go
  virtual void begin_step(const Trainer& trainer) = 0;
  virtual void end_step(const Trainer& trainer, uint64_t step) = 0;
  virtual void begin_final_update(const Trainer& trainer) = 0;
  virtual void end_final_update(const Trainer& trainer) = 0;
  // After the last step and the prediction lines, before the --metrics file's prediction line:
  // prints its report and may append to `metrics_path` ("" without --metrics).
  virtual Status finish(Trainer& trainer, const std::string& metrics_path) = 0;
};

// What the caller adds to a run; every field may be empty.
struct RunHooks {
  std::shared_ptr<StatusLine> live;  // the terminal's status line (null: plain progress lines)
  // --bench's observer (called only with --bench), made once the offload stack exists (which
  // outlives the observer).
  std::function<StatusOr<std::unique_ptr<StepObserver>>(const Config&, TrainOffload&)> make_observer;
  CheckpointHook checkpoint_hook;  // the kill tests' seam (CheckpointStore::save's points)
  bool signal_in_setup = false;    // the signal tests' seam: raise SIGTERM once the offload tiers exist
};

class TrainingRun {
 public:
  // Nothing is built yet. The run keeps its own copy of `config` (across ranks each rank's NVMe
  // paths replace --nvme-path's: place_rank).
  TrainingRun(const Config& config, RunHooks hooks) : config_(config), hooks_(std::move(hooks)) {}
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;
  // Destroys what setup() built in the reverse of the members' order below (the trainer first,
  // the backend last); the swap directories go with the offload stack. Report an outcome before.
  ~TrainingRun();

  // The whole setup, once. Not ok() when it ended the run: refused (before anything was allocated,
  // or a size check), failed, or stopped (a signal during the setup: nothing trained or saved).
  // Installs the stop-signal handlers (train_signals.h) once the pinned pool exists. Shows its
  // phase and what it has pinned and written as it goes (setup_progress.h), and logs one line of
  // its phases' seconds when it is done.
  RunOutcome setup();
  // After a setup() that was ok(), once: the steps from the resumed (or first) step to the last,
  // then the end-of-run lines.
  RunOutcome train();
  // The ranks of the run (1 without mpirun); known once setup() has begun.
  int world_size() const { return launch_.size; }

 private:
  // The setup, in order (run_setup.cc).
  RunOutcome preflight();
  RunOutcome place_rank();
  RunOutcome open_checkpoint_dir();
  RunOutcome check_host_memory(const TrainOptions& run) const;
  RunOutcome resume();
  RunOutcome place();
  RunOutcome join_world();
  RunOutcome check_checkpoint_dir_is_ours() const;
  RunOutcome build();
  RunOutcome build_model();
  RunOutcome open_sinks();

  // The step loop's parts (run.cc, beside train()).
  StepMetrics step_metrics(const StepResult& r, double step_s) const;
  RunOutcome evaluate(StepMetrics& m);
  Status record(StepMetrics& m);
  RunOutcome diverged(const StepMetrics& m) const;
  Status save();
  RunOutcome save_due(uint64_t step);
  RunOutcome stop_for_signal(int sig);
  StatusOr<int> world_stop_signal();
  void tally(const StepMetrics& m, uint64_t tokens, bool first);
  RunOutcome finish();
  std::string resume_advice() const;

  // Constant after setup() (the resolved options and model: the placement and tiling applied).
  Config config_;
  RunHooks hooks_;
  LaunchInfo launch_;  // this process's rank and the world's size
  CommKind comm_kind_ = CommKind::automatic;  // the key comm
  TrainOptions o_;
  ModelConfig mc_;
  uint64_t seed_ = 0;
  std::optional<TrainPlacement> placement_;
  std::optional<CheckpointState> resumed_;  // the checkpoint resumed from
  std::string resume_dir_;

  // Owned, in construction order (destroyed in reverse). Each built once in setup().
  std::optional<HfWeights> init_weights_;    // --init-from's mapped files, until the model has read them
  std::optional<DirLock> checkpoint_lock_;   // one writer per --checkpoint-dir, for the run's life
  std::optional<CheckpointStore> store_;     // --checkpoint-dir's rotation
  std::optional<DirLock> resume_lock_;       // a reader's lock on the resumed run, until it is read
  std::optional<RunData> data_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Communicator> comm_;       // across ranks (o_.across_ranks()), else null
  int32_t* stop_flags_ = nullptr;            // across ranks: each rank's stop signal (device, world size int32)
  double comm_timeout_ = 0;                  // across ranks: seconds (join_world sizes the default)
  std::unique_ptr<PinnedPool> pinned_;
  std::unique_ptr<TrainOffload> offload_;    // the weight offload stack (and the trace, the NVMe store)
  std::unique_ptr<StepObserver> observer_;   // --bench
  std::unique_ptr<ThreadPool> pool_;         // the CPU optimizer's workers
  std::unique_ptr<BatchLoader> train_loader_;
  std::optional<RankBatches> rank_batches_;  // across ranks: this rank's micro-batches of train_loader_
  std::unique_ptr<BatchLoader> val_loader_;  // null without evaluation
  std::unique_ptr<Transformer> net_;
  std::unique_ptr<Trainer> trainer_;
  std::optional<CheckpointRanks> checkpoint_ranks_;  // across ranks with --checkpoint-dir: over the trainer's gather
  std::optional<MetricsLog> metrics_;        // --metrics; closed before the end-of-run lines follow it
  std::optional<TensorBoardWriter> tensorboard_;
  std::optional<TrainDeviceRates> rates_;
  std::unique_ptr<SetupProgress> setup_progress_;  // while setup() runs; its ticker reads pinned_ and net_

  // State of train(): changes every step.
  std::optional<TrainProgress> progress_;
  RunSummary summary_;
  std::chrono::steady_clock::time_point start_;
  uint64_t first_step_ = 0;
  uint64_t saved_step_ = ~uint64_t{0};  // the step of the last checkpoint written (or resumed)
  uint64_t skipped_in_a_row_ = 0;
  double first_s_ = 0, steady_s_ = 0;  // the first step's seconds and the others' (the prediction's comparison)
};

}  // namespace strata::model
