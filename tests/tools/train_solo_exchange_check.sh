#!/usr/bin/env bash
# One rank through the across-ranks path is the same bits as one rank without it: `strata train
# --comm COMM` (local: the local communicator, any backend; nccl: NCCL at a world of one, cuda) runs
# the gradient exchange, the partitioned optimizer state, the updated weights' gather and (ZeRO-3)
# the weights' shards at N = 1, and each run must give the plain run's (--comm auto: no
# communicator) losses, gradient norms and validation losses to the last digit (clipping on) and
# its final checkpoint the same bytes: the optimizer on the device (one and two micro-batches a
# step; layer-major), on the CPU (pinned; on NVMe with the gradient sums spilled; the weights paged
# from NVMe with a read cache asked for, which the path does not use and says so), and ZeRO-3 with
# the weights on NVMe (two micro-batches: two rounds of the exchange a step). A plain checkpoint
# resumes through the communicator onto the same bytes. On the CPU, --comm nccl is refused naming
# --comm local, and a split update through a communicator is refused naming the flag.
# Usage: train_solo_exchange_check.sh COMM PRESET DTYPE STRATA [strata train flags, e.g. --device cuda]
set -u
comm=$1 preset=$2 dtype=$3 strata=$4
shift 4
extra=("$@")
. "$(dirname "$0")/train_ranks_lib.sh"  # fail, in_work_dir, figures, same_checkpoint, clipped
in_work_dir
common=(train --preset "$preset" --dtype "$dtype" --micro-batch 2 --seq 32 --offload off --clip-grad-norm 0.5
        --lr-schedule-steps 4 --threads 1 --eval-every 2 --log-every 1 --steps 4 "${extra[@]}")
device=(--optimizer-device device)
pinned=(--optimizer-device cpu)
on_nvme=(--optimizer-device cpu --offload-optimizer nvme --offload-grad nvme --nvme-path nvme --sub-group-size 20000)
zero3_nvme=(--optimizer-device cpu --offload-param nvme --offload-optimizer nvme --offload-grad nvme --nvme-path nvme
            --resident-layers 0 --zero-stage 3 --sub-group-size 20000)
run() {  # run LOG FLAGS...
  local log=$1
  shift
  timeout 120 "$strata" "${common[@]}" "$@" >"$log" 2>&1 || fail "$* (exit $?): $(tail -3 "$log")"
}
# same NAME FLAGS...: the plain run and the run through the communicator, the same figures and bytes.
same() {
  local name=$1
  shift
  run "$name.plain.log" "$@" --metrics "$name.plain.jsonl" --checkpoint-dir "$name.plain"
  run "$name.log" "$@" --comm "$comm" --metrics "$name.jsonl" --checkpoint-dir "$name"
  grep -q "world: one rank through the .* communicator (--comm $comm)" "$name.log" ||
    fail "$name: the run did not say it went through the $comm communicator: $(grep "world:" "$name.log")"
  grep -q "world:" "$name.plain.log" && fail "$name: the plain run joined a world: $(grep "world:" "$name.plain.log")"
  [ "$(figures "$name.jsonl" | wc -l)" -eq 4 ] || fail "$name: not 4 step lines"
  diff <(figures "$name.plain.jsonl") <(figures "$name.jsonl") || fail "$name: --comm $comm differs from the plain run ($*)"
  same_checkpoint "$name.plain/step-000004" "$name/step-000004" "$name: --comm $comm"
}
same device "${device[@]}"
clipped device.jsonl || fail "no step clipped (every gradient norm <= 0.5)"
same device2 "${device[@]}" --grad-accum 2
same layer_major "${device[@]}" --grad-accum 2 --activation-checkpointing --step-schedule layer-major
same pinned "${pinned[@]}"
same on_nvme "${on_nvme[@]}"
same zero3_nvme "${zero3_nvme[@]}" --grad-accum 2
# Paged from NVMe with a read cache asked for: the plain run caches, the run through the
# communicator says it does not (as across ranks); the bits are the same either way.
same nvme_cached --optimizer-device cpu --offload-param nvme --nvme-path nvme --resident-layers 0 --param-cache 1MiB
grep -q "a pinned read cache of" nvme_cached.plain.log || fail "the plain run with --param-cache did not cache"
grep -q "param-cache 1 MiB is not used by a run through a communicator" nvme_cached.log ||
  fail "--param-cache through the communicator: the log did not say it is not used: $(grep "read cache" nvme_cached.log)"
grep -q "weights: partitioned over 1 rank" zero3_nvme.log ||
  fail "ZeRO-3 through the communicator did not partition the weights: $(grep "weights:" zero3_nvme.log | head -2)"
[ -z "$(ls -A nvme)" ] || fail "a run left files under --nvme-path: $(ls nvme)"

# A plain checkpoint resumed through the communicator (the optimizer on the CPU): the same bytes.
run resume_a.log "${pinned[@]}" --steps 2 --checkpoint-dir resumed
run resume_b.log "${pinned[@]}" --comm "$comm" --resume resumed --checkpoint-dir resumed
same_checkpoint pinned.plain/step-000004 resumed/step-000004 "a plain checkpoint resumed with --comm $comm"

# Refusals, before any step.
timeout 60 "$strata" "${common[@]}" --optimizer-device split --offload-param cpu --resident-layers 1 --comm "$comm" \
  >refusal 2>&1 && fail "--optimizer-device split with --comm $comm trained (exit 0)"
grep -q -- "--optimizer-device split runs on one rank without a communicator.*pass --optimizer-device cpu" refusal ||
  fail "split with --comm $comm: no error naming --optimizer-device: $(tail -2 refusal)"
if [ "$comm" = local ]; then
  timeout 60 "$strata" "${common[@]}" --device cpu --comm nccl >refusal 2>&1 && fail "--comm nccl on the cpu trained"
  grep -q -- "--comm nccl needs the cuda backend.*pass --comm local" refusal ||
    fail "--comm nccl on the cpu: no error naming --comm local: $(tail -2 refusal)"
fi
echo "PASS: $preset $dtype, --comm $comm at a world of one == no communicator (device optimizer x3, CPU optimizer pinned, on NVMe and paged from NVMe, ZeRO-3 on NVMe, a resume): $(figures device.jsonl | tail -1)"
