// TrainingRun's setup (run.h): the checks before anything is allocated, the resume and the
// placement, then every part of the run in the order it is owned. The step loop is in run.cc.
#include <signal.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "model/plan/placement.h"
#include "model/plan/train_preflight.h"
#include "model/train/run.h"
#include "model/train/step_schedule.h"
#include "model/train/run_model.h"
#include "model/train/train_signals.h"
#include "runtime/rank_locality.h"
#include "runtime/topology.h"
#include "runtime/units.h"

namespace strata::model {
namespace {

template <typename... Args>
RunOutcome refuse(fmt::format_string<Args...> f, Args&&... args) {
  return refused(Status(Code::invalid_argument, fmt::format(f, std::forward<Args>(args)...)));
}

// A lock's error: unavailable (another run holds it) is the user's to fix.
RunOutcome lock_outcome(const Status& s) { return s.code() == Code::unavailable ? refused(s) : outcome_of(s); }

// Whether the flags chose the placement (so the planner will not): their host memory is checked
// before the placement, the planner's after it.
bool flags_placement(const Config& config) {
  const PlanFixed fixed = plan_fixed_choices(config);
  const bool explicit_auto =
      config.get_text("offload") == "auto" && config.source("offload") != ConfigSource::default_value;
  return !explicit_auto && (fixed.weights || fixed.optimizer || fixed.gradients);
}

// Whether `dir` (a checkpoint) is `run_dir` or one of its step-N/ checkpoints.
bool in_run_dir(const std::string& dir, const std::string& run_dir) {
  std::error_code ec;
  return std::filesystem::equivalent(dir, run_dir, ec) ||
         std::filesystem::equivalent(std::filesystem::path(dir).parent_path(), run_dir, ec);
}

// A signal during the setup: the run stops at the end of the phase in progress, nothing trained.
RunOutcome stopped_in_setup(std::string_view while_doing) {
  const int sig = stop_signal();
  if (sig == 0) return {};
  spdlog::warn("{}: stopped while {}, before the first step: nothing was trained or saved", signal_name(sig),
               while_doing);
  return {RunEnd::stopped, Status::ok(), sig};
}

}  // namespace

RunOutcome outcome_of(Status s) {
  switch (s.code()) {
    case Code::invalid_argument:
    case Code::not_found:
    case Code::out_of_range:
    case Code::permission_denied:
    case Code::no_space:
      return refused(std::move(s));
    default:
      return failed(std::move(s));
  }
}

TrainingRun::~TrainingRun() {
  trainer_.reset();  // its collectives are done before the buffers below go
  if (stop_flags_ != nullptr && backend_) (void)backend_->release(stop_flags_);
}

RunOutcome TrainingRun::setup() {
  setup_progress_ = std::make_unique<SetupProgress>(hooks_.live);
  setup_progress_->begin("checks");
  for (auto phase : {&TrainingRun::preflight, &TrainingRun::resume, &TrainingRun::place, &TrainingRun::join_world,
                     &TrainingRun::build}) {
    if (RunOutcome out = (this->*phase)(); !out.ok()) {
      setup_progress_.reset();  // its ticker stops, its line goes
      return out;
    }
  }
  std::string detail;
  if (pinned_) {
    const PinnedPoolStats p = pinned_->stats();
    detail = fmt::format("pinning {:.1f} s for {}", p.reserve_seconds, format_size(p.reserved));
    if (p.zeroed_bytes > 0) detail += fmt::format(", {} zeroed", format_size(p.zeroed_bytes));
  }
  spdlog::info("{}", setup_progress_->finish(detail));
  setup_progress_.reset();
  return {};
}

// Preflight: the options, the model, every path, the checkpoint directory's lock and the room for
// its rotation, the model's size against the machine, before data, memory or a step.
RunOutcome TrainingRun::preflight() {
  StatusOr<LaunchInfo> launch = detect_launch();
  if (!launch.is_ok()) return refused(launch.status());
  launch_ = *launch;
  if (launch_.launcher != Launcher::single)
    if (RunOutcome out = place_rank(); !out.ok()) return out;
  StatusOr<TrainOptions> parsed = train_options_from_config(config_);
  if (!parsed.is_ok()) return refused(parsed.status());
  o_ = std::move(*parsed);
  for (const std::string& w : o_.warnings) spdlog::warn("{}", w);
  StatusOr<CommKind> comm_kind = parse_comm_kind(config_.get_text("comm"));
  if (!comm_kind.is_ok()) return refused(comm_kind.status());
  comm_kind_ = *comm_kind;
  o_.solo_exchange = launch_.size == 1 && comm_kind_ != CommKind::automatic;
  if (Status s = check_trainer_options(o_); !s.is_ok()) return refused(s);
  StatusOr<ModelConfig> mc = resolve_run_model(config_, o_, init_weights_);
  if (!mc.is_ok()) return outcome_of(mc.status());
  mc_ = *mc;
  if (int64_t(o_.seq) > mc_.max_seq)
    return refuse("--seq {} is longer than {}'s {} positions; pass --seq {} or less", o_.seq, mc_.name, mc_.max_seq,
                  mc_.max_seq);
  seed_ = uint64_t(config_.get_int("seed"));
  if (Status s = check_nvme_paths(config_.get_list("nvme_path")); !s.is_ok()) return outcome_of(s);
  if (RunOutcome out = open_checkpoint_dir(); !out.ok()) return out;
  if (flags_placement(config_))
    if (RunOutcome out = check_host_memory(o_); !out.ok()) return out;
  if (Status s = check_size_fits_machine(config_, o_, mc_, MachineFor::train); !s.is_ok()) return refused(s);
  if (init_weights_)
    if (Status s = check_init_weights(mc_, *init_weights_); !s.is_ok()) return outcome_of(s);
  return {};
}

// Under a launcher: this rank's CPUs, NUMA node and NVMe paths on its node (runtime/rank_locality.h),
// the process bound to them before it starts a worker thread; the rank's paths replace --nvme-path's
// for the rest of the run.
RunOutcome TrainingRun::place_rank() {
  StatusOr<Topology> topology = Topology::discover();
  if (!topology.is_ok()) return outcome_of(topology.status());
  std::string why;
  const bool gpus = train_backend_kind(config_, &why) == BackendKind::cuda;
  std::vector<std::string> bus_ids;
  if (gpus)
    for (const DeviceDescription& d : list_cuda_devices()) bus_ids.push_back(d.pci_bus_id);
  const std::vector<std::string> paths = config_.get_list("nvme_path");
  StatusOr<LocalityMachine> machine = discover_locality_machine(*topology, bus_ids, paths);
  if (!machine.is_ok()) return outcome_of(machine.status());
  StatusOr<RankLocality> l = plan_rank_locality(*machine, launch_.local_rank, launch_.local_size, gpus);
  if (!l.is_ok()) return outcome_of(l.status());
  if (Status s = apply_rank_locality(*topology, *l); !s.is_ok()) return outcome_of(s);
  if (!l->warning.empty()) spdlog::warn("rank {}: {}", launch_.rank, l->warning);
  spdlog::info("rank {} of {} ({}, local rank {} of {}): {}{} CPU{} {} ({}){}", launch_.rank, launch_.size,
               launcher_name(launch_.launcher), launch_.local_rank, launch_.local_size,
               l->gpu >= 0 ? fmt::format("GPU {}, ", l->gpu) : std::string(), l->cpus.size(),
               l->cpus.size() == 1 ? "" : "s", format_cpu_list(l->cpus), l->cpus_why,
               paths.empty() ? std::string()
                             : fmt::format("; NVMe {} ({})", fmt::join(l->nvme_paths, ","), l->nvme_why));
  if (l->nvme_paths != paths) {
    const std::string origin = fmt::format("rank {}'s paths on NUMA node {}", launch_.rank, l->numa_node);
    if (Status s = config_.set("nvme_path", fmt::format("{}", fmt::join(l->nvme_paths, ",")),
                               config_.source("nvme_path"), origin);
        !s.is_ok())
      return outcome_of(s);
  }
  return {};
}

RunOutcome TrainingRun::open_checkpoint_dir() {
  if (o_.checkpoint_dir.empty() || launch_.rank != 0) return {};  // across ranks rank 0 creates and commits them
  StatusOr<std::optional<DirLock>> lock = lock_checkpoint_dir(o_.checkpoint_dir);
  if (!lock.is_ok()) return lock_outcome(lock.status());
  checkpoint_lock_ = std::move(*lock);
  StatusOr<CheckpointStore> st = CheckpointStore::open(
      o_.checkpoint_dir, {.keep = uint32_t(o_.keep_checkpoints), .hook = hooks_.checkpoint_hook});
  if (!st.is_ok()) return outcome_of(st.status());
  for (const std::string& r : st->removed()) spdlog::info("checkpoint: removed {}, left by a killed save", r);
  const CheckpointRotation rotation{.one = estimate_checkpoint_bytes(mc_, o_.adam_states),
                                    .keep = o_.keep_checkpoints,
                                    .present = list_checkpoints(o_.checkpoint_dir).size()};
  if (Status s = check_checkpoint_room(o_.checkpoint_dir, rotation, mc_.name); !s.is_ok()) return outcome_of(s);
  store_.emplace(std::move(*st));
  return {};
}

// The host memory `run`'s placement needs (closed-form, before any layout).
RunOutcome TrainingRun::check_host_memory(const TrainOptions& run) const {
  StatusOr<std::vector<std::string>> memory = model::check_host_memory(
      mc_, run.adam_states, run.optimizer_home == Tier::device,
      run.optimizer_home == Tier::nvme, config_.get_size_or_auto("cpu_mem").value_or(0));
  if (!memory.is_ok()) return refused(memory.status());
  for (const std::string& w : *memory) spdlog::warn("{}", w);
  return {};
}

// --resume: the checkpoint's state read under a reader's lock and checked against this run.
RunOutcome TrainingRun::resume() {
  if (o_.resume_path.empty()) return {};
  StatusOr<std::string> dir = resolve_checkpoint(o_.resume_path);
  if (!dir.is_ok()) return outcome_of(dir.status());
  resume_dir_ = *dir;
  std::error_code ec;
  const bool own_dir = !o_.checkpoint_dir.empty() &&
                       (std::filesystem::equivalent(o_.resume_path, o_.checkpoint_dir, ec) ||
                        std::filesystem::equivalent(std::filesystem::path(resume_dir_).parent_path(), o_.checkpoint_dir, ec));
  if (!own_dir) {  // this run's own directory is locked already
    StatusOr<std::optional<DirLock>> lock = lock_resume_source(o_.resume_path, resume_dir_);
    if (!lock.is_ok()) return lock_outcome(lock.status());
    resume_lock_ = std::move(*lock);
  }
  StatusOr<CheckpointState> st = read_checkpoint_state(resume_dir_, mc_.name);
  if (!st.is_ok() && st.status().code() == Code::corruption) {
    // Name the other checkpoints of the run, newest first, that a resume can use instead.
    std::string others;
    const auto all = list_checkpoints(std::filesystem::path(resume_dir_).parent_path().string());
    for (auto it = all.rbegin(); it != all.rend(); ++it)
      if (it->second != resume_dir_) others += (others.empty() ? "" : ", ") + it->second;
    if (!others.empty())
      return failed(Status(st.status().code(), fmt::format("{}; other checkpoints of this run (pass one to --resume): {}",
                                                           st.status().message(), others)));
  }
  if (!st.is_ok()) return outcome_of(st.status());
  if (st->step >= o_.steps)
    return refuse("{} has already trained {} steps; pass --steps above {} to continue", resume_dir_, st->step,
                  st->step);
  if (st->seed != seed_)
    spdlog::warn("{} was trained with --seed {}, this run has {}: the data order changes from here on", resume_dir_,
                 st->seed, seed_);
  const CheckpointState mine{.micro_batch = o_.micro_batch, .seq = o_.seq, .grad_accum = o_.grad_accum,
                             .dtype = std::string(dtype_name(o_.dtype))};
  StatusOr<std::vector<std::string>> warnings = check_resume_compatible(*st, mine, resume_dir_);
  if (!warnings.is_ok()) return outcome_of(warnings.status());
  for (const std::string& w : *warnings) spdlog::warn("{}", w);
  resumed_ = *st;
  saved_step_ = resumed_->step;
  if (o_.vocab_tile < 0 || o_.mlp_tiles < 0) {
    // Tiling auto on a resume: the checkpoint's (its moments are stored per chunk), whatever this
    // machine's budget would choose.
    if (o_.vocab_tile < 0) o_.vocab_tile = resumed_->vocab_tile;
    if (o_.mlp_tiles < 0) o_.mlp_tiles = resumed_->mlp_tiles > 1 ? resumed_->mlp_tiles : 0;
    spdlog::info("resume: tiled as the checkpoint was (--vocab-tile {} --mlp-tiles {})", o_.vocab_tile, o_.mlp_tiles);
  }
  return {};
}

// The placement: the flags', or the planner's (--offload auto; train_placement.h), refused here
// when nothing fits. From here o_ is the run's, with the placement it trains, and mc_ is chunked
// as that placement was planned (--vocab-tile, --mlp-tiles).
RunOutcome TrainingRun::place() {
  o_.ranks = launch_.size;  // the device estimate counts this rank's shards
  StatusOr<TrainPlacement> placement = choose_train_placement(config_, o_, mc_);
  if (!placement.is_ok()) return refused(placement.status());
  placement_ = std::move(*placement);
  o_ = placement_->options;
  mc_ = placement_->predicted.model;
  if (mc_.mlp_tiles > 1)
    spdlog::info("model: every layer's MLP in {} tiles per weight (--mlp-tiles {})", mc_.mlp_tiles,
                 o_.mlp_tiles < 0 ? "auto" : std::to_string(o_.mlp_tiles));
  if (mc_.vocab_tile > 0)
    spdlog::info("model: the {}x{} token table{} in {} tiles of {} rows (--vocab-tile {})", mc_.vocab, mc_.dim,
                 mc_.tied_head ? "" : " and the head", vocab_tiles(mc_), mc_.vocab_tile,
                 o_.vocab_tile < 0 ? "auto" : std::to_string(o_.vocab_tile));
  if (!flags_placement(config_))  // the planner's placement (the flags' was checked in the preflight)
    if (RunOutcome out = check_host_memory(o_); !out.ok()) return out;
  return check_checkpoint_dir_is_ours();
}

// Across ranks (or one rank with --comm local|nccl, the same path at N = 1): what this run can
// spread (checked before anything is allocated; the trainer checks the same again), and rank 0
// alone writes files: the other ranks drop --metrics, TensorBoard, --trace and --bench (they never
// open the checkpoint directory).
RunOutcome TrainingRun::join_world() {
  if (!o_.across_ranks()) return {};
  const int n = launch_.size;
  if (comm_kind_ == CommKind::local && n > 1)
    return refuse("--comm local is a world of one, but {} started {} ranks; pass --comm auto (MPI on the cpu "
                  "backend, NCCL on cuda)", launcher_name(launch_.launcher), n);
  if (std::string why; comm_kind_ == CommKind::nccl && train_backend_kind(config_, &why) != BackendKind::cuda)
    return refuse("--comm nccl needs the cuda backend, but this run computes on the cpu ({}); pass --comm local for "
                  "the across-ranks path on the cpu{}", why, n > 1 ? " (one rank), or --comm auto for MPI" : "");
  // DeepSpeed's gradient_accumulation_steps counts a GPU's micro-batches; strata's grad_accum the
  // step's over all ranks (so N ranks give one rank's bits at the same value): a config file's
  // value is kept, and the log says what it means here and what gives DeepSpeed's batch.
  if (config_.source("grad_accum") == ConfigSource::file)
    spdlog::warn("grad_accum {} ({}) is the step's micro-batches over all {} ranks, {} a rank; DeepSpeed's "
                 "gradient_accumulation_steps counts them per GPU: for its batch of the same file pass --grad-accum {}",
                 o_.grad_accum, config_.describe_source("grad_accum"), n, o_.grad_accum / uint64_t(n),
                 o_.grad_accum * uint64_t(n));
  if (o_.grad_accum % uint64_t(n) != 0) {
    const uint64_t up = (o_.grad_accum + uint64_t(n) - 1) / uint64_t(n) * uint64_t(n);
    return refuse("under {} with {} ranks each rank runs the same number of every step's micro-batches, so "
                  "--grad-accum (the step's micro-batches over all ranks, not per rank) must be a multiple of {}, "
                  "not {}; pass --grad-accum {} ({} per rank)",
                  launcher_name(launch_.launcher), n, n, o_.grad_accum, up, up / uint64_t(n));
  }
  if (o_.adam_states == AdamStates::q8) {
    const StatusOr<std::shared_ptr<const ParamLayout>> layout = shared_param_layout(mc_, dtype_size(o_.dtype));
    if (!layout.is_ok()) return outcome_of(layout.status());
    if (const std::optional<std::string> split = q8_block_split(**layout, n))
      return refuse("8-bit Adam moments across {} ranks: a rank's shard would cut an 8-bit block (256 elements) of {}; "
                    "pass --optimizer-type adamw, or run on one rank (a tensor starting at a multiple of 256 elements "
                    "of its chunk is never cut: a model width and key/value width that are multiples of 16 give that)", n, *split);
  }
  if (o_.split_update)
    return refuse("--optimizer-device split runs on one rank without a communicator (its device part is not "
                  "partitioned); {} pass --optimizer-device cpu or device", n > 1 ? fmt::format("across {} ranks", n)
                  : fmt::format("with --comm {}", comm_kind_name(comm_kind_)));
  if (o_.zero_stage == 3) {
    if (o_.optimizer_home == Tier::device)
      return refuse("--zero-stage 3 partitions the weights, but the optimizer on the device updates whole resident "
                    "weights in place; pass --optimizer-device cpu (or --zero-stage 2)");
    if (const std::optional<int64_t> kept = config_.get_int_or_auto("resident_layers"); kept && *kept > 0)
      return refuse("--zero-stage 3 gathers every chunk from the ranks' shards when the model needs it, so no layer "
                    "stays whole on a device; pass --resident-layers 0 (or --zero-stage 2)");
    o_.resident_layers = 0;
  }
  if (launch_.rank != 0) {
    o_.metrics_path.clear();
    o_.tensorboard = false;
    o_.trace_path.clear();
    o_.bench = false;
  }
  // The other ranks wait in the next collective while rank 0 writes a checkpoint (each rank writes
  // its shard, but rank 0 still writes the gathered masters of GPT-2's transposed tensors and
  // commits, and all of it where the ranks do not share the directory): the default
  // timeout grows to twice its write at a slow disk's rate, so a large model's save is not taken
  // for a dead rank (a rank that dies is still found at once: mpirun ends the job).
  comm_timeout_ = config_.get_real("comm_timeout");
  constexpr double kSlowDiskBytesPerSecond = 100e6;
  const double write_seconds = double(parameter_count(mc_)) * 12.0 / kSlowDiskBytesPerSecond;  // masters, m, v
  if (!o_.checkpoint_dir.empty() && config_.source("comm_timeout") == ConfigSource::default_value &&
      comm_timeout_ > 0 && 2 * write_seconds > comm_timeout_) {
    comm_timeout_ = std::ceil(2 * write_seconds);
    spdlog::info("comm timeout: {:.0f} s (the default {:.0f} s raised: rank 0 writes {} checkpoints, ~{:.0f} s at "
                 "100 MB/s, while the other ranks wait; pass --comm-timeout to set it)", comm_timeout_,
                 config_.get_real("comm_timeout"), format_size(parameter_count(mc_) * 12), write_seconds);
  }
  const uint64_t per_rank = o_.grad_accum / uint64_t(n);
  if (n == 1) {
    spdlog::info("world: one rank through the {} communicator (--comm {}): the across-ranks path at N = 1, the "
                 "gradient exchanged into a shard that is the whole chunk, the optimizer state {}{}; the same bits "
                 "as --comm auto", comm_kind_ == CommKind::nccl ? "NCCL" : "local", comm_kind_name(comm_kind_),
                 o_.optimizer_home == Tier::device ? "on the device" : "in host memory",
                 o_.zero_stage == 3 ? ", the weights gathered from their one shard (ZeRO-3)"
                                    : ", the updated weights gathered");
    return {};
  }
  spdlog::info("world: {} ranks ({}); {}; each rank homes 1/{} of every chunk's gradient sum and optimizer state {} "
               "({}); {}",
               n, launcher_name(launch_.launcher),
               per_rank == 1 ? std::string("micro-batch r of each step runs on rank r")
                             : fmt::format("{} micro-batches of each step run on each rank, in {} rounds of {} (round j: "
                                           "micro-batch j x {} + r on rank r)", per_rank, per_rank, n, n),
               n,
               o_.optimizer_home == Tier::device ? "on its device" : "in its host memory, updated by its CPU",
               o_.zero_stage == 3 ? "summed in rank order; ZeRO-3: its weights too, each chunk all-gathered for "
                                    "its use"
                                  : "summed in rank order, the updated weights all-gathered",
               "each rank writes its shard of a checkpoint, rank 0 commits it and logs");
  return {};
}

// A fresh run (or one resumed from elsewhere) must not mix its checkpoints with another run's.
RunOutcome TrainingRun::check_checkpoint_dir_is_ours() const {
  if (!store_) return {};
  const std::vector<std::pair<uint64_t, std::string>> held = list_checkpoints(o_.checkpoint_dir);
  const bool same_run = resumed_ && in_run_dir(resume_dir_, o_.checkpoint_dir);
  if (!held.empty() && !same_run)
    return refuse("--checkpoint-dir {} already holds checkpoints of another run (up to step {}); pass --resume {} to "
                  "continue that run, or another --checkpoint-dir",
                  o_.checkpoint_dir, held.back().first, o_.checkpoint_dir);
  if (resumed_ && !held.empty() && held.back().first > resumed_->step)
    spdlog::warn("{} also holds checkpoints after step {} (up to step {}); this run continues from step {} and "
                 "leaves them until you remove them",
                 o_.checkpoint_dir, resumed_->step, held.back().first, resumed_->step);
  return {};
}

// The data, the backend, the pinned pool and the weight offload stack, then the model and the
// trainer. From the offload tiers on, a stop signal ends the setup at the next phase's end;
// returning unwinds what was built, which removes the swap directories.
RunOutcome TrainingRun::build() {
  setup_progress_->begin("data and backend");
  StatusOr<RunData> data = open_run_data(o_, uint32_t(mc_.vocab), seed_);
  if (!data.is_ok()) return outcome_of(data.status());
  data_ = std::move(*data);
  BackendOptions bo;
  bo.tf32 = o_.tf32;
  bo.device_index = int(config_.get_int("gpu_index"));
  // Across ranks one GPU a rank: the node's local rank picks it, unless --gpu-index says otherwise.
  if (launch_.size > 1 && config_.source("gpu_index") == ConfigSource::default_value)
    bo.device_index = launch_.local_rank;
  bo.memory_budget = config_.get_size_or_auto("gpu_mem").value_or(0);
  std::string why;
  bo.kind = train_backend_kind(config_, &why);
  StatusOr<std::unique_ptr<Backend>> backend = make_backend(bo);
  if (!backend.is_ok()) return outcome_of(backend.status());
  backend_ = std::move(*backend);
  spdlog::info("device: {} backend, {} ({})", backend_kind_name(backend_->kind()), backend_->device().name, why);
  if (o_.across_ranks()) {
    StatusOr<std::unique_ptr<Communicator>> comm =
        make_communicator(*backend_, launch_, {.timeout_seconds = comm_timeout_,
                                               .kind = comm_kind_,
                                               .rendezvous_dir = config_.get_text("rendezvous_dir")});
    if (!comm.is_ok()) return outcome_of(comm.status());
    comm_ = std::move(*comm);
    StatusOr<void*> flags = backend_->allocate(sizeof(int32_t) * uint64_t(launch_.size), "run stop flags");
    if (!flags.is_ok()) return outcome_of(flags.status());
    stop_flags_ = static_cast<int32_t*>(*flags);
  }
  StatusOr<ScheduleChoice> schedule =
      choose_step_schedule(mc_, o_, launch_.size, backend_->memory().capacity);
  if (!schedule.is_ok()) return refused(schedule.status());
  o_.step_schedule = schedule->schedule;
  spdlog::info("schedule: {} ({})", step_schedule_name(o_.step_schedule), schedule->why);
  if (Status s = check_device_budget(mc_, o_, *backend_, placement_->machine.hardware.rates); !s.is_ok())
    return refused(s);
  StatusOr<std::unique_ptr<PinnedPool>> pinned = PinnedPool::create(
      {.capacity = config_.get_size_or_auto("cpu_mem").value_or(0), .allow_cuda = backend_->kind() == BackendKind::cuda});
  if (!pinned.is_ok()) return outcome_of(pinned.status());
  pinned_ = std::move(*pinned);
  setup_progress_->track({.name = "pinned",
                          .done = [pool = pinned_.get()] { return pool->reserved_bytes(); },
                          .total = placement_->predicted.bytes.tier(Tier::cpu)});
  install_stop_signals();
  setup_progress_->begin("weight homes");
  StatusOr<std::unique_ptr<TrainOffload>> offload =
      TrainOffload::create(config_, o_, mc_, *backend_, *pinned_, comm_.get());
  if (!offload.is_ok()) return outcome_of(offload.status());
  offload_ = std::move(*offload);
  if (hooks_.signal_in_setup) ::raise(SIGTERM);
  if (RunOutcome out = stopped_in_setup("creating the offload tiers"); !out.ok()) return out;
  if (o_.bench && hooks_.make_observer) {
    StatusOr<std::unique_ptr<StepObserver>> observer = hooks_.make_observer(config_, *offload_);
    if (!observer.is_ok()) return outcome_of(observer.status());
    observer_ = std::move(*observer);
  }
  StatusOr<std::unique_ptr<ThreadPool>> pool =
      ThreadPool::create({.threads = int(config_.get_int("threads")), .name = "adam"});
  if (!pool.is_ok()) return outcome_of(pool.status());
  pool_ = std::move(*pool);
  if (RunOutcome out = build_model(); !out.ok()) return out;
  return open_sinks();
}

// The batch loaders, the model (its weights initialized, loaded from --init-from or resumed) and
// the trainer (its optimizer state, resumed when the run is).
RunOutcome TrainingRun::build_model() {
  setup_progress_->begin("model");
  BatchLoaderOptions lo;
  lo.sampling = {.batch_size = uint32_t(o_.micro_batch), .seq_len = uint32_t(o_.seq), .shuffle = true, .seed = seed_};
  if (resumed_) lo.start = resumed_->loader;
  StatusOr<std::unique_ptr<BatchLoader>> train_loader = BatchLoader::create(data_->train, *pinned_, lo);
  if (!train_loader.is_ok()) return outcome_of(train_loader.status());
  train_loader_ = std::move(*train_loader);
  if (comm_) {
    StatusOr<RankBatches> mine = RankBatches::create(*train_loader_, launch_.rank, launch_.size,
                                                     o_.grad_accum / uint64_t(launch_.size));
    if (!mine.is_ok()) return outcome_of(mine.status());
    rank_batches_.emplace(std::move(*mine));
  }
  if (o_.evaluates() && data_->val) {
    lo.sampling.shuffle = false;
    lo.start = {};  // the checkpoint's position is the training loader's; evaluation always starts at batch 0
    StatusOr<std::unique_ptr<BatchLoader>> v = BatchLoader::create(*data_->val, *pinned_, lo);
    if (!v.is_ok()) return outcome_of(v.status());
    val_loader_ = std::move(*v);
  }
  StatusOr<std::unique_ptr<Transformer>> net = Transformer::create(
      *backend_, mc_,
      {.batch = int64_t(o_.micro_batch),
       .seq_len = int64_t(o_.seq),
       .checkpoint_layers = o_.activation_checkpointing,
       .dtype = o_.dtype,
       .micro_batches = o_.step_schedule == StepSchedule::layer_major ? int64_t(o_.rank_micro_batches()) : 1,
       // A CPU optimizer streams gradients to the host: no full set of them on the device.
       .device_grads = o_.optimizer_home == Tier::device},
      {.weights = offload_->weights(), .pinned = pinned_.get()});
  if (!net.is_ok()) return outcome_of(net.status());
  net_ = std::move(*net);
  net_->set_trace(observer_ ? observer_->trace() : offload_->trace());
  uint64_t elements = 0;
  for (const ChunkSpec& chunk : net_->master_layout().chunks) elements += chunk.bytes / sizeof(float);
  setup_progress_->track({.name = "weights",
                          .done = [net = net_.get()] { return net->elements_written(); },
                          .total = elements,
                          .bytes = false});
  // A fresh 16-bit model's weights are written as the trainer fills its masters from the same
  // values (Transformer::begin_init): each value is generated once.
  const bool with_masters = !resumed_ && !init_weights_ && o_.dtype != DType::f32;
  if (!with_masters) setup_progress_->begin("weights");
  if (resumed_ && init_weights_)
    spdlog::info("init-from: resuming from {}, so its weights are used; {} gave the model's configuration only",
                 resume_dir_, o_.init_from);
  if (Status s = resumed_       ? load_checkpoint_weights(resume_dir_, *net_)
                 : init_weights_ ? net_->load_hf_weights(*init_weights_)
                                 : net_->begin_init(seed_);
      !s.is_ok())
    return outcome_of(s);
  init_weights_.reset();  // unmap the Hugging Face files
  if (RunOutcome out = stopped_in_setup("writing the model's weights"); !out.ok()) return out;
  setup_progress_->begin(with_masters ? "optimizer state and weights" : "optimizer state");
  StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::create(*backend_, *net_, *pinned_, pool_.get(), o_,
                      {.trace = offload_->trace(),
                       .store = offload_->store(),
                       .comm = comm_.get(),
                       .resident_part = offload_->resident_layers()});
  if (!trainer.is_ok()) return outcome_of(trainer.status());
  trainer_ = std::move(*trainer);
  if (comm_ && !o_.checkpoint_dir.empty()) {  // the ranks write each checkpoint together (model/ckpt/checkpoint.h)
    if (trainer_->shard_gather() == nullptr)
      return outcome_of(error(Code::internal, "a trainer across {} ranks without its shard gather", launch_.size));
    checkpoint_ranks_.emplace(*trainer_->shard_gather(), launch_.rank, launch_.size);
  }
  if (Status s = net_->finish_init(); !s.is_ok()) return outcome_of(s);  // what the masters' fill did not write
  if (RunOutcome out = stopped_in_setup("writing the optimizer state"); !out.ok()) return out;
  if (resumed_) {
    if (Status s = load_checkpoint_optimizer(resume_dir_, *trainer_); !s.is_ok()) return outcome_of(s);
    spdlog::info("resumed from {} at step {}", resume_dir_, resumed_->step);
    resume_lock_.reset();  // read: its run may go on
  }
  return {};
}

// --metrics (a resumed run drops the lines after its checkpoint's step), TensorBoard, the model's
// line and the device rates (TFLOP/s, MFU).
RunOutcome TrainingRun::open_sinks() {
  setup_progress_->begin("sinks");
  if (!o_.metrics_path.empty()) {
    if (resumed_) {
      StatusOr<uint64_t> dropped = truncate_metrics_after(o_.metrics_path, resumed_->step);
      if (!dropped.is_ok()) return outcome_of(dropped.status());
      if (*dropped > 0)
        spdlog::info("metrics: dropped {} line(s) of {} after step {} (trained after the checkpoint, trained again now)",
                     *dropped, o_.metrics_path, resumed_->step);
    }
    StatusOr<MetricsLog> m =
        MetricsLog::open(o_.metrics_path, resumed_ ? MetricsLog::Mode::append : MetricsLog::Mode::truncate);
    if (!m.is_ok()) return outcome_of(m.status());
    metrics_.emplace(std::move(*m));
  }
  if (o_.tensorboard) {
    StatusOr<TensorBoardWriter> tb = TensorBoardWriter::open(o_.tensorboard_output_path, o_.tensorboard_job_name);
    if (!tb.is_ok()) return outcome_of(tb.status());
    tensorboard_.emplace(std::move(*tb));
  }
  spdlog::info("model: {} ({} parameters, {}{}), {} steps of {} x {} x {} tokens, {} lr {:.2e} ({})", mc_.name,
               parameter_count(mc_), dtype_name(o_.dtype), o_.dtype == DType::f32 && o_.tf32 ? " with TF32" : "",
               o_.steps, o_.grad_accum, o_.micro_batch, o_.seq, o_.optimizer, o_.lr_schedule.peak_lr,
               lr_decay_name(o_.lr_schedule.decay));
  rates_.emplace(*backend_, mc_, o_, config_.get_real("peak_tflops"));
  return {};
}

}  // namespace strata::model
