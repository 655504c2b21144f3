// Training checkpoints of the resident fp32 trainer: a directory holding model.safetensors (the
// weights under their Hugging Face names and layouts -- GPT-2 Conv1D weights as (in, out) -- so
// HF tools and load_hf_safetensors read it) and optimizer.safetensors (Adam m and v per layout
// chunk, with the step, the data loader position, the seed and the precision in the metadata).
// Each file is written atomically (temporary file, fsync, rename); the optimizer file is written
// last and both carry the step, so an interrupted save is detected on load. Not a sharded or
// streaming format for offloaded models, and not the loss scaler's (fp32 has none).
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

// Writes `dir` (created if missing) from the model's weights and the trainer's moments. The step
// stored is trainer.steps_done() (state.step is not read); loader, seed and preset come from
// `state`. Errors: the filesystem's (errno_status naming the path).
Status save_checkpoint(const std::string& dir, Transformer& model, const Trainer& trainer,
                       const CheckpointState& state);

// Reads optimizer.safetensors' metadata and checks model.safetensors is from the same step.
// not_found naming a missing file; corruption for missing metadata or a step mismatch (an
// interrupted save); invalid_argument when the preset is not `preset`.
StatusOr<CheckpointState> read_checkpoint_state(const std::string& dir, std::string_view preset);

// Loads the weights into `model` (before Trainer::create, which reads them as masters).
Status load_checkpoint_weights(const std::string& dir, Transformer& model);

// Restores the moments and the step into `trainer` (created on the checkpoint's weights).
// corruption when a moment tensor is missing; the trainer's invalid_argument for a size mismatch.
Status load_checkpoint_optimizer(const std::string& dir, Trainer& trainer);

}  // namespace strata::model
