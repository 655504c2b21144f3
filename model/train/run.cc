// TrainingRun's step loop (run.h): train() reads like llm.c's -- stop?, step, metrics, evaluate,
// record, diverged?, checkpoint -- and each of those is a small function below it. The setup is
// in run_setup.cc.
#include "model/train/run.h"

#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "model/train/train_signals.h"

namespace strata::model {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

template <typename... Args>
RunOutcome fail(fmt::format_string<Args...> f, Args&&... args) {
  return failed(Status(Code::internal, fmt::format(f, std::forward<Args>(args)...)));
}

TierBytes tier_bytes(const Backend& backend, const PinnedPool& pinned, bool peak) {
  const ArenaStats a = backend.memory();
  const PinnedPoolStats p = pinned.stats();
  return TierBytes{.gpu = peak ? a.peak : a.in_use, .cpu = peak ? p.peak : p.in_use, .nvme = 0};
}

// The run's last lines: where its pictures are (a --metrics file for `strata plot`, TensorBoard's
// event file), or, when none was asked for, how to get them (the trace: train_offload.h says so).
std::vector<std::string> where_to_look(const TrainOptions& o, const std::string& tensorboard_file) {
  std::vector<std::string> lines;
  if (!o.metrics_path.empty())
    lines.push_back(fmt::format("metrics: {} (draw it: strata plot {} -o run.png)", o.metrics_path, o.metrics_path));
  if (!tensorboard_file.empty())
    lines.push_back(fmt::format("tensorboard: {} (view it: tensorboard --logdir {})", tensorboard_file,
                                o.tensorboard_output_path.empty() ? "." : o.tensorboard_output_path));
  if (lines.empty() && o.trace_path.empty())
    lines.push_back("to look at a run: --metrics FILE, then `strata plot FILE -o run.png`; --tensorboard-enabled "
                    "for TensorBoard; --trace FILE for a timeline of its compute and transfers "
                    "(https://ui.perfetto.dev)");
  return lines;
}

}  // namespace

RunOutcome TrainingRun::train() {
  const NextBatch next_batch = [this]() { return rank_batches_ ? rank_batches_->next() : train_loader_->next(); };
  summary_.device_label = backend_->kind() == BackendKind::cpu ? kCpuBackendTierLabel : kGpuTierLabel;
  progress_.emplace(TrainProgress::Options{.total_steps = o_.steps, .log_every = o_.log_every,
                                           .device_label = summary_.device_label},
                    hooks_.live);
  start_ = Clock::now();
  first_step_ = trainer_->steps_done();
  for (uint64_t i = first_step_; i < o_.steps; ++i) {
    StatusOr<int> sig = world_stop_signal();
    if (!sig.is_ok()) return fail("before step {}: {}; {}", i + 1, sig.status().message(), resume_advice());
    if (*sig != 0) return stop_for_signal(*sig);
    const auto t0 = Clock::now();
    if (observer_) observer_->begin_step(*trainer_);
    StatusOr<StepResult> r = trainer_->step(next_batch);  // forward, backward, update of every chunk
    if (!r.is_ok()) return fail("step {}: {}; {}", i + 1, r.status().message(), resume_advice());
    if (observer_) observer_->end_step(*trainer_, r->step);
    StepMetrics m = step_metrics(*r, seconds_since(t0));
    if (RunOutcome out = evaluate(m); !out.ok()) return out;
    if (Status s = record(m); !s.is_ok()) return outcome_of(s);
    skipped_in_a_row_ = r->skipped ? skipped_in_a_row_ + 1 : 0;
    if (RunOutcome out = diverged(m); !out.ok()) return out;
    if (RunOutcome out = save_due(m.step); !out.ok()) return out;
    tally(m, r->tokens, i == first_step_);
  }
  return finish();
}

// The step's metrics as the progress line, --metrics and TensorBoard show them.
StepMetrics TrainingRun::step_metrics(const StepResult& r, double step_s) const {
  StepMetrics m;
  m.step = r.step;
  m.loss = r.loss;
  m.lr = r.lr;
  m.step_s = step_s;
  m.tokens_per_s = step_s > 0 ? double(r.tokens) / step_s : 0.0;
  m.grad_norm = r.grad_norm;
  m.loss_scale = r.loss_scale;
  m.skipped = r.skipped;
  rates_->fill(m, step_s);
  return m;
}

// The validation loss every eval_every steps and after the last, over the same batches each time.
RunOutcome TrainingRun::evaluate(StepMetrics& m) {
  if (!val_loader_ || (m.step % o_.eval_every != 0 && m.step != o_.steps)) return {};
  if (Status s = val_loader_->seek({}); !s.is_ok()) return outcome_of(s);
  StatusOr<double> val = trainer_->evaluate([this]() { return val_loader_->next(); }, o_.eval_batches);
  if (!val.is_ok()) return fail("evaluation at step {}: {}; {}", m.step, val.status().message(), resume_advice());
  m.val_loss = *val;
  summary_.last_val_loss = *val;
  summary_.last_val_step = m.step;
  return {};
}

// The step's transfers and memory, then every sink: --metrics, TensorBoard, the progress line.
Status TrainingRun::record(StepMetrics& m) {
  m.transfers = offload_->step_transfers(*trainer_, m.step_s);
  m.bytes = tier_bytes(*backend_, *pinned_, false);
  m.peak_bytes = tier_bytes(*backend_, *pinned_, true);
  m.bytes.nvme = m.peak_bytes.nvme = offload_->nvme_bytes();
  if (metrics_) STRATA_RETURN_IF_ERROR(metrics_->write(m));
  if (tensorboard_) STRATA_RETURN_IF_ERROR(tensorboard_->write_step(m, o_.micro_batch * o_.grad_accum));
  progress_->step(m);
  return Status::ok();
}

// max_skipped_steps updates in a row skipped for Inf/NaN gradients: the run has diverged.
RunOutcome TrainingRun::diverged(const StepMetrics& m) const {
  if (o_.max_skipped_steps == 0 || skipped_in_a_row_ < o_.max_skipped_steps) return {};
  return fail("step {}: {} steps in a row were skipped for Inf/NaN gradients (loss {:.4f}): the weights "
              "or the data have diverged (fp16: or a fixed --loss-scale is too high), so no checkpoint is "
              "written; resume from an earlier checkpoint with a lower --lr (or raise --max-skipped-steps)",
              m.step, skipped_in_a_row_, m.loss);
}

// Writes the checkpoint of the steps done so far (once per step).
// Across ranks every rank calls it: with a partitioned optimizer state each writes its shard into
// rank 0's files (save_checkpoint_shard), and every rank ends with the same outcome: the save's
// error on any rank fails it on all, named.
Status TrainingRun::save() {
  const uint64_t step = trainer_->steps_done();
  if (o_.checkpoint_dir.empty() || saved_step_ == step) return Status::ok();
  if (comm_) STRATA_RETURN_IF_ERROR(trainer_->sync_host_state());
  Status saved;
  std::string dir;
  if (launch_.rank != 0) {
    saved = save_checkpoint_shard(*net_, *trainer_, *checkpoint_ranks_, hooks_.checkpoint_hook);
  } else {
    StatusOr<LoaderPosition> loader = rank_batches_ ? rank_batches_->step_position() : train_loader_->position();
    const CheckpointState state{.step = step,
                                .loader = loader.is_ok() ? *loader : LoaderPosition{},
                                .seed = seed_,
                                .preset = mc_.name,
                                .micro_batch = o_.micro_batch,
                                .seq = o_.seq,
                                .grad_accum = o_.grad_accum,
                                .dtype = std::string(dtype_name(o_.dtype))};
    if (checkpoint_ranks_) checkpoint_ranks_->begin_save();
    StatusOr<std::string> written =
        loader.is_ok() ? store_->save(*net_, *trainer_, state, checkpoint_ranks_ ? &*checkpoint_ranks_ : nullptr)
                       : StatusOr<std::string>(loader.status());
    saved = written.status();
    if (written.is_ok()) dir = *written;
    // A save that failed before its files existed: the ranks waiting for their list learn it.
    if (checkpoint_ranks_ && trainer_->state_partitioned() && !checkpoint_ranks_->files_sent())
      STRATA_RETURN_IF_ERROR(checkpoint_ranks_->send_failure(saved));
  }
  if (checkpoint_ranks_) {  // every rank leaves with the same outcome
    Status agreed;
    STRATA_RETURN_IF_ERROR(checkpoint_ranks_->agree(saved, agreed));
    saved = agreed;
  }
  STRATA_RETURN_IF_ERROR(saved);
  saved_step_ = step;
  if (launch_.rank == 0) spdlog::info("checkpoint: step {} written to {}", step, dir);
  return Status::ok();
}

// The checkpoint every checkpoint_every steps and after the last.
RunOutcome TrainingRun::save_due(uint64_t step) {
  if (o_.checkpoint_dir.empty() || (step != o_.steps && (o_.checkpoint_every == 0 || step % o_.checkpoint_every != 0)))
    return {};
  if (Status s = save(); !s.is_ok())
    return fail("checkpoint at step {}: {}; {}{}", step, s.message(),
                s.code() == Code::no_space ? "free space there, then: " : "", resume_advice());
  return {};
}

// The stop signal this rank got (0: none); across ranks the first rank's that got one, agreed by
// every rank before the step so they stop together.
StatusOr<int> TrainingRun::world_stop_signal() {
  const int32_t mine = stop_signal();
  if (!comm_) return mine;
  std::vector<int32_t> all(size_t(launch_.size), 0);
  int32_t* slot = stop_flags_ + launch_.rank;
  STRATA_RETURN_IF_ERROR(backend_->copy_to_device(slot, &mine, sizeof(mine), Stream::compute));
  STRATA_RETURN_IF_ERROR(comm_->all_gather(slot, stop_flags_, sizeof(mine), Stream::compute));
  STRATA_RETURN_IF_ERROR(comm_->synchronize(Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_->copy_to_host(all.data(), stop_flags_, all.size() * sizeof(int32_t), Stream::compute));
  STRATA_RETURN_IF_ERROR(backend_->synchronize(Stream::compute));
  for (int32_t s : all)
    if (s != 0) return int(s);
  return 0;
}

// A stop signal: the checkpoint, then the command that resumes.
RunOutcome TrainingRun::stop_for_signal(int sig) {
  const uint64_t step = trainer_->steps_done();
  if (launch_.rank != 0) {  // it takes part in the save; rank 0 says what happened
    Status s = save();
    return {RunEnd::stopped, s, sig};
  }
  if (!store_) {
    spdlog::warn("{}: stopped after step {} of {}; no --checkpoint-dir was set, so this run cannot be resumed",
                 signal_name(sig), step, o_.steps);
    return {RunEnd::stopped, Status::ok(), sig};
  }
  if (Status s = save(); !s.is_ok())
    return {RunEnd::stopped,
            Status(s.code(), fmt::format("{}: stopped after step {}, but {}", signal_name(sig), step, s.message())),
            sig};
  spdlog::warn("{}: stopped after step {} of {}; resume with:\n  {}", signal_name(sig), step, o_.steps,
               resume_command(o_.checkpoint_dir));
  return {RunEnd::stopped, Status::ok(), sig};
}

// The run's summary after each step.
void TrainingRun::tally(const StepMetrics& m, uint64_t tokens, bool first) {
  if (first) summary_.first_loss = m.loss;
  (first ? first_s_ : steady_s_) += m.step_s;
  summary_.last_loss = m.loss;
  summary_.steps = m.step - first_step_;
  summary_.tokens += tokens;
  summary_.skipped_steps += m.skipped;
  summary_.peak_bytes = m.peak_bytes;
}

// The last step's update (overlapped updates wait for a next forward that never comes), then the
// end-of-run lines: the summary, the offload's, the prediction against the measurement, the
// observer's report, the --metrics file's prediction line, the trace, where to look.
RunOutcome TrainingRun::finish() {
  if (observer_) observer_->begin_final_update(*trainer_);
  if (Status s = trainer_->finish_update(); !s.is_ok())
    return fail("the update of step {}: {}; {}", o_.steps, s.message(), resume_advice());
  if (observer_) observer_->end_final_update(*trainer_);
  progress_->finish();
  summary_.seconds = seconds_since(start_);
  summary_.mean_mfu = rates_->run_mfu(summary_.steps, summary_.seconds);
  spdlog::info("{}", format_run_summary(summary_));
  for (const std::string& line : offload_->summary(summary_.seconds)) spdlog::info("{}", line);
  const RunMeasured measured{.first_step = first_step_ + 1,
                             .steps = summary_.steps,
                             .mean_step_s = summary_.steps > 1 ? steady_s_ / double(summary_.steps - 1) : first_s_,
                             .gpu_peak = summary_.peak_bytes.gpu,
                             .cpu_peak = summary_.peak_bytes.cpu};
  for (const std::string& line : prediction_lines(*placement_, measured)) spdlog::info("{}", line);
  metrics_.reset();  // closed after its last step line; the observer's and the prediction lines follow it
  if (observer_)
    if (Status s = observer_->finish(*trainer_, o_.metrics_path); !s.is_ok()) return outcome_of(s);
  if (!o_.metrics_path.empty())
    if (Status s = append_line(o_.metrics_path, prediction_json_line(*placement_, measured)); !s.is_ok())
      return outcome_of(s);
  if (Status s = offload_->write_trace(o_.trace_path); !s.is_ok()) return outcome_of(s);
  for (const std::string& line : where_to_look(o_, tensorboard_ ? tensorboard_->path() : "")) spdlog::info("{}", line);
  return {};
}

// What a run stopped by a failure (a corrupt swap file, an I/O error) can do: resume from the
// last checkpoint of --checkpoint-dir, named with its command, or say there is none.
std::string TrainingRun::resume_advice() const {
  if (o_.checkpoint_dir.empty()) return "no --checkpoint-dir was set, so this run left no checkpoint to resume from";
  const auto all = list_checkpoints(o_.checkpoint_dir);
  if (all.empty()) return fmt::format("{} holds no earlier checkpoint to resume from", o_.checkpoint_dir);
  return fmt::format("the last checkpoint is {} (step {}); resume from it with:\n  {}", all.back().second,
                     all.back().first, resume_command(o_.checkpoint_dir));
}

}  // namespace strata::model
