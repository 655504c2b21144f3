// SplitGrads (split_grads.h): each chunk's gradient to the sink that owns it.
#include "offload/split_grads.h"

#include <utility>

namespace strata {

StatusOr<std::unique_ptr<SplitGrads>> SplitGrads::create(const std::vector<bool>& on_device, DeviceGrads& device,
                                                         GradientOffloader& host) {
  ChunkRoute route(on_device);
  if (route.count(true) != device.chunk_count() || route.count(false) != host.chunk_count())
    return error(Code::invalid_argument,
                 "split gradients: {} chunks routed to the device and {} to the host, but the sinks hold {} and {}",
                 route.count(true), route.count(false), device.chunk_count(), host.chunk_count());
  if (device.partitioned())
    return error(Code::invalid_argument, "split gradients: the device gradients are partitioned across ranks; a "
                 "split update runs on one rank");
  return std::unique_ptr<SplitGrads>(new SplitGrads(std::move(route), device, host));
}

Status SplitGrads::check(size_t c, const char* what) const {
  if (c >= route_.size())
    return error(Code::out_of_range, "split gradients: {} of chunk {} but there are {} chunks", what, c, route_.size());
  return Status::ok();
}

Status SplitGrads::begin_step() {
  STRATA_RETURN_IF_ERROR(device_.begin_step());
  return host_.begin_step();
}

StatusOr<std::byte*> SplitGrads::acquire(size_t c) {
  STRATA_RETURN_IF_ERROR(check(c, "acquire"));
  return route_.marked(c) ? device_.acquire(route_.index(c)) : host_.acquire(route_.index(c));
}

Status SplitGrads::release(size_t c, bool last) {
  STRATA_RETURN_IF_ERROR(check(c, "release"));
  return route_.marked(c) ? device_.release(route_.index(c), last) : host_.release(route_.index(c), last);
}

void SplitGrads::set_last_micro_batch(bool last) {
  device_.set_last_micro_batch(last);
  host_.set_last_micro_batch(last);
}

StatusOr<double> SplitGrads::finish_step() {
  const StatusOr<double> device = device_.finish_step();
  const StatusOr<double> host = host_.finish_step();
  if (!device.is_ok()) return device.status();
  if (!host.is_ok()) return host.status();
  double total = 0.0;
  for (size_t c = 0; c < route_.size(); ++c)
    total += route_.marked(c) ? device_.partial(route_.index(c)) : host_.partial(route_.index(c));
  return total;
}

}  // namespace strata
