// Training checkpoints of the resident trainer: a directory holding model.safetensors (the fp32
// master weights under their Hugging Face names and layouts -- GPT-2 Conv1D weights as (in, out) --
// so HF tools and load_hf_safetensors read it, whatever the working precision) and
// optimizer.safetensors (the trainer's OptimizerBuffers: fp32 or 8-bit Adam moments per chunk,
// with the step, the applied updates, the data loader position, the seed, the precision, the
// moment format and, for fp16, the loss scaler's state in the metadata). Each file is written
// atomically (temporary file, fsync, rename); the optimizer file is written last and both carry
// the step, so an interrupted save is detected on load. Not a sharded or streaming format for
// offloaded models.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "model/trainer.h"
#include "model/transformer.h"
#include "model/window_sampler.h"
#include "runtime/status.h"

namespace strata::model {

inline constexpr std::string_view kCheckpointModelFile = "model.safetensors";
inline constexpr std::string_view kCheckpointOptimizerFile = "optimizer.safetensors";

// What a run needs besides weights and moments to continue bit-identically. The data order is a
// pure function of (seed, loader position) and the LR schedule of the step, so this is all the
// random state there is.
struct CheckpointState {
  uint64_t step = 0;        // optimizer steps done
  LoaderPosition loader;    // the batch the next step reads first
  uint64_t seed = 0;
  std::string preset;       // the model preset, checked on load
};

// Writes `dir` (created if missing) from the trainer's masters and moments. The step
// stored is trainer.steps_done() (state.step is not read); loader, seed and preset come from
// `state`. Errors: the filesystem's (errno_status naming the path).
Status save_checkpoint(const std::string& dir, const Transformer& model, Trainer& trainer,
                       const CheckpointState& state);

// Reads optimizer.safetensors' metadata and checks model.safetensors is from the same step.
// not_found naming a missing file; corruption for missing metadata or a step mismatch (an
// interrupted save); invalid_argument when the preset is not `preset`.
StatusOr<CheckpointState> read_checkpoint_state(const std::string& dir, std::string_view preset);

// Loads the weights into `model` (before Trainer::create, which reads them as masters).
Status load_checkpoint_weights(const std::string& dir, Transformer& model);

// Restores the moments, the step and the loss scale into `trainer` (created on the checkpoint's
// weights). invalid_argument when the checkpoint's moment format (fp32 / 8-bit) is not the
// trainer's or a tensor's size differs; corruption when a moment tensor is missing.
Status load_checkpoint_optimizer(const std::string& dir, Trainer& trainer);

}  // namespace strata::model
