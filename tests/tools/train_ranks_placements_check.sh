#!/usr/bin/env bash
# Every placement across ranks is the same bits (label mpi): `strata train` on NP ranks under mpirun
# with the optimizer on the device (the reference: train_ranks_check.sh shows it equals one rank with
# --grad-accum NP) and with the optimizer on the CPU, each rank homing its shard of the gradient
# sums and the state: pinned; on NVMe with the gradient sums spilled there too and the state cut in
# pieces; with the weights paged from pinned memory; with everything on NVMe; and with the weights
# partitioned too (--zero-stage 3: resident shards, paged shards, all on NVMe; and all on NVMe with
# two micro-batches a rank, against the device at that --grad-accum, micro-batch-major and
# layer-major, as the device optimizer layer-major too). Each must give
# the reference's losses, gradient norms and validation losses to the last digit (clipping on), and
# its final checkpoint the same bytes. Then a checkpoint written by NP ranks with the state on NVMe
# resumes on one rank with the optimizer on the CPU, and one written by one rank resumes on NP
# ranks with paged weights and with partitioned weights: all end on the reference's bytes. The
# checkpoints of the CPU optimizer's runs are written shard-wise (each rank its own shard into rank
# 0's files: the log says so); where a rank cannot open the files rank 0 gathers the state (same
# bytes); a rank's failed write fails the save on every rank, naming it, the previous checkpoint kept,
# and rank 0's failing before the files exist reaches the others at once. Tiled layouts across ranks
# equal one rank tiled alike, and 8-bit moments across ranks (optimizer on the CPU or the device) one rank's.
# Usage: train_ranks_placements_check.sh NP PRESET DTYPE STRATA mpirun [mpirun args, without -np...]
set -u
np=$1 preset=$2 dtype=$3 strata=$4
shift 4
mpirun=("$@")
. "$(dirname "$0")/train_ranks_lib.sh"  # fail, in_work_dir, figures, same_checkpoint, clipped
in_work_dir
common=(train --preset "$preset" --dtype "$dtype" --micro-batch 2 --seq 32 --grad-accum "$np" --offload off
        --clip-grad-norm 0.5 --lr-schedule-steps 4 --threads 1 --eval-every 2 --log-every 1)
device=(--optimizer-device device)
pinned=(--optimizer-device cpu)
on_nvme=(--optimizer-device cpu --offload-optimizer nvme --offload-grad nvme --nvme-path nvme --sub-group-size 20000)
paged=(--optimizer-device cpu --offload-param cpu --resident-layers 0)
all_nvme=(--optimizer-device cpu --offload-param nvme --offload-optimizer nvme --offload-grad nvme --nvme-path nvme
          --resident-layers 0)
zero3=(--optimizer-device cpu --zero-stage 3)
zero3_paged=(--optimizer-device cpu --zero-stage 3 --offload-param cpu --resident-layers 0)
zero3_nvme=("${all_nvme[@]}" --zero-stage 3 --sub-group-size 20000)
one() { timeout 120 "$strata" "${common[@]}" "$@" >>log 2>&1 || fail "1 rank: $* (exit $?): $(tail -3 log)"; }
ranks() {
  timeout 120 "${mpirun[@]}" -np "$np" "$strata" "${common[@]}" "$@" >>log 2>&1 ||
    fail "$np ranks: $* (exit $?): $(tail -3 log)"
}

ranks "${device[@]}" --steps 4 --metrics ref.jsonl --checkpoint-dir ref
[ "$(figures ref.jsonl | wc -l)" -eq 4 ] || fail "$np ranks: not 4 step lines"
clipped ref.jsonl || fail "no step clipped (every gradient norm <= 0.5)"
check() {  # check NAME FLAGS...: NP ranks with FLAGS against the reference
  local name=$1
  shift
  ranks "$@" --steps 4 --metrics "$name.jsonl" --checkpoint-dir "$name"
  grep "world:" log | tail -1 | grep -q "updated by its CPU" ||
    fail "$name: the run did not say each rank's CPU updates its shard: $(grep "world:" log | tail -1)"
  diff <(figures ref.jsonl) <(figures "$name.jsonl") || fail "$np ranks with $* differ from the optimizer on the device"
  same_checkpoint ref/step-000004 "$name/step-000004" "$*"
  grep "checkpoint:" log | grep -q "the $np ranks wrote their own shards" ||
    fail "$name: the ranks did not write their shards of the checkpoint: $(grep "checkpoint:" log | tail -2)"
}
check pinned "${pinned[@]}"
check on_nvme "${on_nvme[@]}"
check paged "${paged[@]}"
check all_nvme "${all_nvme[@]}"
check zero3 "${zero3[@]}"
check zero3_paged "${zero3_paged[@]}"
check zero3_nvme "${zero3_nvme[@]}"
grep -q "weights: partitioned over $np ranks" log || fail "no run said it partitioned the weights (--zero-stage 3)"
[ -z "$(ls -A nvme)" ] || fail "a rank left files under --nvme-path: $(ls nvme)"

# Two micro-batches a rank (--grad-accum 2 x NP: two rounds of the gradient exchange a step), the
# CPU optimizer's sums on NVMe and the weights partitioned, against the optimizer on the device at
# the same --grad-accum.
ranks "${device[@]}" --grad-accum $((2 * np)) --steps 4 --metrics ref2.jsonl --checkpoint-dir ref2
ranks "${zero3_nvme[@]}" --grad-accum $((2 * np)) --steps 4 --metrics rounds.jsonl --checkpoint-dir rounds
grep -q "2 micro-batches of each step run on each rank, in 2 rounds" log ||
  fail "--grad-accum $((2 * np)): the world line did not say each rank runs 2 micro-batches in rounds"
diff <(figures ref2.jsonl) <(figures rounds.jsonl) ||
  fail "$np ranks, 2 micro-batches a rank: the optimizer on the CPU differs from the device"
same_checkpoint ref2/step-000004 rounds/step-000004 "2 micro-batches a rank"
# The layer-major schedule across ranks (a rank's 2 micro-batches through each chunk while it is
# gathered; each chunk's contributions still reach the exchange round by round): what auto picks
# for ZeRO-3 on NVMe with checkpointing, and asked for beside the optimizer on the device (its
# DeviceGrads rounds; GPT-2's tied table through the stash): both the reference's bits.
ranks "${zero3_nvme[@]}" --grad-accum $((2 * np)) --activation-checkpointing --steps 4 --metrics vertical.jsonl \
  --checkpoint-dir vertical
grep "schedule:" log | tail -1 | grep -q "schedule: layer-major (each chunk is gathered from the $np ranks' shards\|schedule: layer-major (weights homed on nvme" ||
  fail "ZeRO-3 on NVMe, 2 micro-batches a rank, checkpointing: auto did not pick layer-major: $(grep "schedule:" log | tail -1)"
diff <(figures ref2.jsonl) <(figures vertical.jsonl) || fail "$np ranks layer-major (ZeRO-3 on NVMe) differ from the reference"
same_checkpoint ref2/step-000004 vertical/step-000004 "layer-major, ZeRO-3 on NVMe"
ranks "${device[@]}" --grad-accum $((2 * np)) --activation-checkpointing --step-schedule layer-major --steps 4 \
  --metrics vertical_device.jsonl --checkpoint-dir vertical_device
diff <(figures ref2.jsonl) <(figures vertical_device.jsonl) || fail "$np ranks layer-major (device optimizer) differ from the reference"
same_checkpoint ref2/step-000004 vertical_device/step-000004 "layer-major, optimizer on the device"

# Resumes across world sizes and placements.
ranks "${on_nvme[@]}" --steps 2 --checkpoint-dir a
one "${pinned[@]}" --grad-accum "$np" --steps 4 --resume a --checkpoint-dir a
same_checkpoint ref/step-000004 a/step-000004 "resumed on 1 rank"
one "${pinned[@]}" --steps 2 --checkpoint-dir b
cp -r b c
ranks "${paged[@]}" --steps 4 --resume b --checkpoint-dir b
same_checkpoint ref/step-000004 b/step-000004 "resumed on $np ranks, weights paged"
ranks "${zero3_paged[@]}" --steps 4 --resume c --checkpoint-dir c
same_checkpoint ref/step-000004 c/step-000004 "resumed on $np ranks, weights partitioned"

# Tiled layouts (vocabulary tiles, MLP tiles: GPT-2's MLP tiles are columns of the file's
# transposed tensors, gathered whole across their chunks) across ranks against one rank tiled alike
# (tiling regroups the MLP's sums, so not against the untiled reference).
tiles=(--vocab-tile 1024 --mlp-tiles 2)
one "${pinned[@]}" "${tiles[@]}" --steps 2 --metrics tiled1.jsonl --checkpoint-dir tiled1
ranks "${pinned[@]}" "${tiles[@]}" --steps 2 --metrics tiled.jsonl --checkpoint-dir tiled
diff <(figures tiled1.jsonl) <(figures tiled.jsonl) || fail "$np ranks tiled differ from 1 rank tiled"
same_checkpoint tiled1/step-000002 tiled/step-000002 "tiled"

# A checkpoint across ranks when the ranks cannot all open rank 0's files (a directory that is not
# shared; injected at "shard_open"): the whole state is gathered to rank 0, which writes it, the
# same bytes. Then a rank whose shard write fails (an injected ENOSPC after its writes, at the
# second save): every rank exits non-zero naming rank 1, and the first checkpoint is intact, the
# second absent, nothing temporary left.
: >log
STRATA_TEST_KILL_AT=shard_open:enospc ranks "${pinned[@]}" --steps 4 --checkpoint-dir unshared
grep -q "rank 1: injected at 'shard_open'.*the whole state is gathered to rank 0" log ||
  fail "a rank that cannot open the files: no warning of the gathered save: $(grep -i "checkpoint" log | tail -2)"
same_checkpoint ref/step-000004 unshared/step-000004 "gathered to rank 0"
STRATA_TEST_KILL_AT=shard_written:enospc:2 timeout 120 "${mpirun[@]}" -np "$np" "$strata" "${common[@]}" \
  "${pinned[@]}" --steps 4 --checkpoint-every 1 --checkpoint-dir failing >failed 2>&1 &&
  fail "a rank's failed checkpoint write: the run exited 0"
[ "$(grep -c "rank 1: injected at 'shard_written'" failed)" -ge "$np" ] ||
  fail "a rank's failed checkpoint write: not every rank named rank 1: $(grep -i "error" failed | head -4)"
[ -f failing/step-000001/optimizer.safetensors ] || fail "the checkpoint before the failed save is gone"
[ "$(ls failing)" = "$(printf 'latest\nlock\nstep-000001')" ] ||
  fail "a failed save across ranks left files behind: $(ls -a failing)"
# Rank 0's save failing before it has files to share (an injected ENOSPC at its store's "begin"):
# the other ranks learn it at once instead of waiting out --comm-timeout for the file list.
start=$(date +%s)
STRATA_TEST_KILL_AT=begin:enospc:2 timeout 120 "${mpirun[@]}" -np "$np" "$strata" "${common[@]}" "${pinned[@]}" \
  --steps 4 --checkpoint-every 1 --checkpoint-dir early --comm-timeout 60 >failed 2>&1 &&
  fail "rank 0's failed save: the run exited 0"
[ "$(grep -c "rank 0: injected at 'begin'" failed)" -ge "$np" ] ||
  fail "rank 0's failed save: not every rank named it: $(grep -i "error" failed | head -4)"
[ $(($(date +%s) - start)) -lt 45 ] || fail "rank 0's failed save: the ranks waited for the comm timeout"

# ZeRO-3 beside the optimizer on the device is refused, naming the flag.
timeout 60 "${mpirun[@]}" -np "$np" "$strata" "${common[@]}" "${device[@]}" --zero-stage 3 --steps 1 \
  >refusal 2>&1 && fail "--zero-stage 3 with the optimizer on the device trained (exit 0)"
grep -q -- "pass --optimizer-device cpu" refusal || fail "--zero-stage 3: no error naming --optimizer-device: $(tail -2 refusal)"
# 8-bit moments across ranks (each rank its shard of the codes and of their 256-element blocks'
# scales) are one rank's bits with the optimizer on the CPU (ZeRO-3 on NVMe) and on the device, and
# their checkpoint the same bytes written shard-wise or gathered to rank 0.
q8=(--optimizer-type adamw8bit)
one "${pinned[@]}" "${q8[@]}" --steps 4 --metrics q8one.jsonl --checkpoint-dir q8one
ranks "${zero3_nvme[@]}" "${q8[@]}" --steps 4 --metrics q8.jsonl --checkpoint-dir q8
diff <(figures q8one.jsonl) <(figures q8.jsonl) || fail "$np ranks with 8-bit moments differ from 1 rank"
same_checkpoint q8one/step-000004 q8/step-000004 "8-bit moments"
STRATA_TEST_KILL_AT=shard_open:enospc ranks "${pinned[@]}" "${q8[@]}" --steps 4 --checkpoint-dir q8gathered
same_checkpoint q8one/step-000004 q8gathered/step-000004 "8-bit moments gathered to rank 0"
ranks "${device[@]}" "${q8[@]}" --steps 4 --metrics q8device.jsonl --checkpoint-dir q8device
diff <(figures q8one.jsonl) <(figures q8device.jsonl) || fail "$np ranks with 8-bit moments on the device differ from 1 rank"
same_checkpoint q8one/step-000004 q8device/step-000004 "8-bit moments on the device"
echo "PASS: $preset $dtype on $np ranks: optimizer on the CPU (pinned, NVMe, paged weights, all NVMe, ZeRO-3 x3, and with 2 micro-batches a rank) == on the device, 8-bit moments (CPU and device optimizer) == 1 rank's: $(figures ref.jsonl | tail -1); checkpoints written shard-wise (or gathered where a rank cannot see the files), a rank's failed write fails every rank; resumes byte-identical"
