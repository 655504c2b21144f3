// Transformer::step_layer_major (transformer.h): one step's K micro-batches in the layer-major
// ("vertical", GreedySnake's) schedule, made of the same pieces as forward() and backward()
// (transformer.cc), so each micro-batch's arithmetic is theirs op for op. What differs is the loop
// order: chunk outside, micro-batch inside, so a paged chunk is acquired once per pass for all K.
// Not a trainer: the caller uploads the K batches, zeroes the gradient (hooks.before_backward) and
// collects the losses (hooks.loss_ready).
#include <fmt/format.h>

#include "model/net/transformer.h"

namespace strata::model {

void Transformer::use_micro_batch(const MicroBatch& mb, size_t k) {
  carve_activations(mb.B, mb.T);  // micro-batch 0's residual stream and d residual: the block's own
  if (k > 0) {
    acts_.residual = mb_residual_[k - 1];
    dacts_.dres = mb_dres_[k - 1];
  }
  inputs_ = mb.inputs;
  targets_ = mb.targets;
}

Status Transformer::step_layer_major(std::span<const MicroBatch> batches, float grad_scale,
                                     const LayerMajorHooks& hooks) {
  const size_t K = batches.size();
  if (K == 0 || int64_t(K) > options_.micro_batches)
    return error(Code::invalid_argument, "transformer '{}': a layer-major step of {} micro-batches, but it was created "
                 "for 1 to {} (TransformerOptions::micro_batches)", config_.name, K, options_.micro_batches);
  if (grad_sink_ == nullptr)
    return error(Code::failed_precondition, "transformer '{}': a layer-major step without a gradient sink",
                 config_.name);
  for (size_t k = 0; k < K; ++k) {
    const MicroBatch& mb = batches[k];
    if (mb.B < 1 || mb.T < 1 || mb.B > options_.batch || mb.T > options_.seq_len)
      return error(Code::invalid_argument, "transformer '{}': micro-batch {} is B={} T={} but buffers were sized for "
                   "B<={} T<={}", config_.name, k, mb.B, mb.T, options_.batch, options_.seq_len);
    if (mb.counted_targets < 0 || mb.counted_targets > mb.B * mb.T)
      return error(Code::invalid_argument, "transformer '{}': micro-batch {}'s counted_targets {} outside [0, B*T = "
                   "{}]", config_.name, k, mb.counted_targets, mb.B * mb.T);
  }
  GradSink& sink = *grad_sink_;
  const auto each = [&](const std::function<Status(size_t)>& work) -> Status {
    for (size_t k = 0; k < K; ++k) {
      use_micro_batch(batches[k], k);
      STRATA_RETURN_IF_ERROR(work(k));
    }
    return Status::ok();
  };

  // ---- forward: the embedding, then each layer, for every micro-batch ----
  STRATA_RETURN_IF_ERROR(for_embedding_tiles([&](size_t t, const GlobalParams& emb, const GlobalParams& first) {
    return each([&](size_t) { return embedding_forward_tile(t, emb, first); });
  }));
  for (int l = 0; l < config_.n_layer; ++l) {
    if (layer_chunks_ > 1) {  // MLP tiles: the layer's tiles pass once per micro-batch
      STRATA_RETURN_IF_ERROR(each([&](size_t) { return tiled_layer_forward(l); }));
      continue;
    }
    STRATA_ASSIGN_OR_RETURN(std::byte* w, acquire_chunk(layer_chunk(l)));
    STRATA_RETURN_IF_ERROR(each([&](size_t) {
      return traced("forward layer", l, [&] { return layer_forward(bind_layer(l, w), l); });
    }));
    STRATA_RETURN_IF_ERROR(weights_->release(layer_chunk(l)));
  }
  if (hooks.before_backward) STRATA_RETURN_IF_ERROR(hooks.before_backward());

  // ---- the head, micro-batch by micro-batch: forward, loss, backward into its d residual ----
  // The head chunk (and an untiled table) is held through all K; a tied table's gradient of
  // micro-batch k >= 1 goes to its stash (see transformer.h).
  const bool tiled_table = vocab_tiles(config_) > 1;
  const size_t tiles = size_t(vocab_tiles(config_));
  STRATA_ASSIGN_OR_RETURN(std::byte* head, acquire_chunk(head_chunk()));
  std::byte* table_hold = nullptr;
  if (!tiled_table && config_.tied_head) {
    STRATA_ASSIGN_OR_RETURN(table_hold, acquire_chunk(head_table_chunk(0)));
  }
  STRATA_RETURN_IF_ERROR(each([&](size_t k) -> Status {
    sink.set_last_micro_batch(k + 1 == K);
    // The loss and its gradient over the logits in one pass (head_backward starts from them).
    const float dloss = dloss_of(batches[k].counted_targets, grad_scale);
    STRATA_RETURN_IF_ERROR(head_forward(head, dloss));
    if (hooks.loss_ready) STRATA_RETURN_IF_ERROR(hooks.loss_ready(k));
    std::byte* const* stash = config_.tied_head && k > 0 ? &tied_stash_[(k - 1) * tiles] : nullptr;
    return head_backward(head, dloss, sink, stash);
  }));
  if (table_hold != nullptr) STRATA_RETURN_IF_ERROR(weights_->release(head_table_chunk(0)));
  STRATA_RETURN_IF_ERROR(weights_->release(head_chunk()));

  // ---- backward: each layer, last first, for every micro-batch; then the embedding ----
  // Every layer is recomputed (the shared internals hold the last micro-batch's last layer only
  // until the first micro-batch's recomputation): the same bits, one layer's forward more a step.
  for (int l = config_.n_layer - 1; l >= 0; --l) {
    if (layer_chunks_ > 1) {
      STRATA_RETURN_IF_ERROR(each([&](size_t k) {
        sink.set_last_micro_batch(k + 1 == K);
        return tiled_layer_backward(l, sink, /*recompute=*/true);
      }));
      continue;
    }
    STRATA_ASSIGN_OR_RETURN(std::byte* w, acquire_chunk(layer_chunk(l)));
    STRATA_RETURN_IF_ERROR(each([&](size_t k) {
      sink.set_last_micro_batch(k + 1 == K);
      return layer_backward_step(l, w, sink, /*recompute=*/true);
    }));
    STRATA_RETURN_IF_ERROR(weights_->release(layer_chunk(l)));
  }
  return each([&](size_t k) -> Status {
    sink.set_last_micro_batch(k + 1 == K);
    if (config_.tied_head && k > 0) {  // the head's contribution of micro-batch k, after the embedding's of k - 1
      for (size_t t = 0; t < tiles; ++t) {
        const size_t c = head_table_chunk(t);
        STRATA_ASSIGN_OR_RETURN(std::byte* g, sink.acquire(c));
        STRATA_RETURN_IF_ERROR(backend_.copy_on_device(g, tied_stash_[(k - 1) * tiles + t], layout_.chunks[c].bytes));
        STRATA_RETURN_IF_ERROR(sink.release(c, /*last=*/false));
      }
    }
    return embedding_backward_tiles(sink);
  });
}

}  // namespace strata::model
