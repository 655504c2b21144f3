#!/usr/bin/env bash
# Multi-rank training is exact (label mpi): `strata train` on NP ranks under mpirun, micro-batch r
# of each step on rank r, against one rank with --grad-accum NP, for PRESET in DTYPE with clipping
# on (the test asserts it clipped): every step's loss, gradient norm and validation loss the same
# digits (--metrics, written by rank 0 alone), and the final checkpoint's files the same bytes
# (weights, optimizer state, config). Then checkpoints resume across world sizes (NP to 1, 1 or 2
# to NP: below), ending on the same bytes. Then two micro-batches a rank (--grad-accum 2 x NP, two
# rounds a step: micro-batch j x NP + r on rank r) against one rank with that --grad-accum, the same
# digits and bytes. Last, a --grad-accum that NP does not divide is refused before training, saying
# what to pass. (The other placements across ranks: train_ranks_placements_check.sh.)
# Usage: train_ranks_check.sh NP PRESET DTYPE STRATA mpirun [mpirun args, without -np...]
set -u
np=$1 preset=$2 dtype=$3 strata=$4
shift 4
mpirun=("$@")
. "$(dirname "$0")/train_ranks_lib.sh"  # fail, in_work_dir, figures, same_checkpoint, clipped
in_work_dir
common=(train --preset "$preset" --dtype "$dtype" --micro-batch 2 --seq 32 --grad-accum "$np" --optimizer-device device
        --clip-grad-norm 0.5 --lr-schedule-steps 4 --threads 1 --eval-every 2 --log-every 1)
one() { timeout 120 "$strata" "${common[@]}" "$@" >>log 2>&1 || fail "1 rank: $* (exit $?): $(tail -3 log)"; }
ranks_at() {
  local n=$1
  shift
  timeout 120 "${mpirun[@]}" -np "$n" "$strata" "${common[@]}" "$@" >>log 2>&1 ||
    fail "$n ranks: $* (exit $?): $(tail -3 log)"
}
ranks() { ranks_at "$np" "$@"; }

one --steps 4 --metrics one.jsonl --checkpoint-dir one
ranks --steps 4 --metrics many.jsonl --checkpoint-dir many
[ "$(figures one.jsonl | wc -l)" -eq 4 ] || fail "1 rank: not 4 step lines"
[ "$(figures many.jsonl | wc -l)" -eq 4 ] || fail "$np ranks: not 4 step lines (rank 0 alone writes them)"
diff <(figures one.jsonl) <(figures many.jsonl) || fail "$np ranks differ from 1 rank with grad-accum $np"
clipped one.jsonl || fail "no step clipped (every gradient norm <= 0.5)"
same_checkpoint one/step-000004 many/step-000004

# Resume across world sizes (each rank homes a shard of the optimizer state; a checkpoint is one
# set of files whatever the world size): NP ranks to step 2, then 1 rank to 4; and
# - NP 2: 1 rank to step 2, then NP ranks to 4, against the 1-rank run;
# - a larger NP: 2 ranks to step 2, then NP ranks to 4 (the shards of 2 cut again into NP), against
#   1 rank with --grad-accum 2 to step 2, then --grad-accum NP to 4 (a resume may change it).
ranks --steps 2 --checkpoint-dir a
one --steps 4 --resume a --checkpoint-dir a
same_checkpoint one/step-000004 a/step-000004
if [ "$np" -gt 2 ]; then
  one --steps 2 --checkpoint-dir ref --grad-accum 2
  one --steps 4 --resume ref --checkpoint-dir ref
  ranks_at 2 --steps 2 --checkpoint-dir b --grad-accum 2
  same_checkpoint ref/step-000002 b/step-000002
  ranks --steps 4 --resume b --checkpoint-dir b
  same_checkpoint ref/step-000004 b/step-000004
else
  one --steps 2 --checkpoint-dir b
  ranks --steps 4 --resume b --checkpoint-dir b
  same_checkpoint one/step-000004 b/step-000004
fi
# Refusals: exit 2 (a usage error) with the flag to change named.
refused() {
  local want=$1
  shift
  timeout 60 "${mpirun[@]}" -np "$np" "$strata" "${common[@]}" --steps 1 "$@" >refusal 2>&1
  local rc=$?
  [ $rc -ne 0 ] || fail "$np ranks with $* trained (exit 0)"
  grep -q -- "$want" refusal || fail "$np ranks with $*: no error naming $want: $(tail -2 refusal)"
}
# Two micro-batches a rank.
one --steps 4 --grad-accum $((2 * np)) --metrics one2.jsonl --checkpoint-dir one2
ranks --steps 4 --grad-accum $((2 * np)) --metrics many2.jsonl --checkpoint-dir many2
diff <(figures one2.jsonl) <(figures many2.jsonl) || fail "$np ranks differ from 1 rank with grad-accum $((2 * np))"
clipped one2.jsonl || fail "grad-accum $((2 * np)): no step clipped (every gradient norm <= 0.5)"
same_checkpoint one2/step-000004 many2/step-000004 "2 micro-batches a rank"
refused "must be a multiple of $np, not $((np + 1)); pass --grad-accum $((2 * np))" --grad-accum $((np + 1))
echo "PASS: $preset $dtype on $np ranks == 1 rank with grad-accum $np and $((2 * np)): $(figures one.jsonl | tail -1), checkpoints and resumes byte-identical"
