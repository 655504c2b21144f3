// SplitGrads: the GradSink (chunk_source.h) of a split update (ZeRO-Offload++'s GPU/CPU split):
// the gradients of the chunks whose update runs on the device stay there in a DeviceGrads, the
// others stream to the host through a GradientOffloader; each call goes to the sink that owns its
// chunk (offload/chunk_route.h: each sink numbers its own chunks 0.. in the model's order).
// Both sinks follow the one definition of accumulation and of each chunk's norm partial
// (kernels/cpu/grad_accumulate.h), and finish_step sums the owners' partials over the model's
// chunks in chunk order from +0.0, so the norm is the bits either sink alone would give.
// Ownership: both sinks are borrowed and outlive this. Thread-safety: one driving thread
// (GradSink's contract). One rank (the DeviceGrads is not partitioned).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "offload/chunk_route.h"
#include "offload/chunk_source.h"
#include "offload/device_grads.h"
#include "offload/gradient_offloader.h"
#include "runtime/status.h"

namespace strata {

class SplitGrads final : public GradSink {
 public:
  // `on_device[c]`: chunk c's gradient goes to `device`, else to `host`. invalid_argument when a
  // sink's chunk count is not the count of chunks routed to it, or `device` is partitioned.
  static StatusOr<std::unique_ptr<SplitGrads>> create(const std::vector<bool>& on_device, DeviceGrads& device,
                                                      GradientOffloader& host);

  Status begin_step() override;
  StatusOr<std::byte*> acquire(size_t c) override;
  Status release(size_t c, bool last) override;
  void set_last_micro_batch(bool last) override;
  // Both sinks' finish_step (the first error is returned, after both ran), then the norm: each
  // chunk's partial from its owner, summed in the model's chunk order.
  StatusOr<double> finish_step() override;

  const ChunkRoute& route() const { return route_; }  // marked: on the device

 private:
  SplitGrads(ChunkRoute route, DeviceGrads& device, GradientOffloader& host)
      : route_(std::move(route)), device_(device), host_(host) {}
  Status check(size_t c, const char* what) const;

  const ChunkRoute route_;
  DeviceGrads& device_;
  GradientOffloader& host_;
};

}  // namespace strata
