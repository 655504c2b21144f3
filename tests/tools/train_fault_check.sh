#!/usr/bin/env bash
# One rank's fate reaches the others (label mpi): `strata train` on NP ranks under
# `mpirun --enable-recovery` (which leaves the other ranks running, so what they do is strata's own
# doing, not mpirun's cleanup); once rank 0 has logged two steps, rank 1 alone gets a signal:
#  * kill: SIGKILL. Passes when rank 1 died by it and every other rank exited non-zero, its error
#    naming rank 1, within LIMIT seconds of the kill (the ranks run with --comm-timeout TIMEOUT).
#  * term: SIGTERM. Passes when every rank stopped with 128 + 15 (the stop agreed across ranks,
#    though only rank 1 got the signal) and rank 0 wrote the checkpoint of its last logged step.
# Each rank runs under this script's --rank wrapper, which prints RANK_EXIT <rank> <status> <epoch
# seconds>; rank 1's also SIGNALLED <epoch seconds>. A survivor killed by another survivor's MPI_Abort
# before its wrapper reports has no RANK_EXIT: its error (written as it ran) must still name rank 1,
# and mpirun's end bounds its time.
# FAULT_CHECK_PLACEMENT: device (the default: ZeRO-2, the optimizer on the device) or zero3 (the
# optimizer on the CPU and the weights partitioned: the gathers ahead run on a second communicator,
# whose collectives must end at the timeout too).
# Usage: train_fault_check.sh kill|term NP TIMEOUT LIMIT STRATA mpirun [mpirun args, without -np...]
#        train_fault_check.sh --rank kill|term DIR STRATA ARGS...   (the per-rank wrapper)
set -u
if [ "$1" = --rank ]; then
  mode=$2 dir=$3
  shift 3
  rank=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-?}}
  if [ "$rank" != 1 ]; then
    "$@" 2>"$dir/err.$rank"
    rc=$?
    cat "$dir/err.$rank" >&2
    echo "RANK_EXIT $rank $rc $(date +%s)"
    exit $rc
  fi
  "$@" 2>/dev/null &
  pid=$!
  for _ in $(seq 600); do  # rank 0's metrics: two steps trained
    [ "$({ wc -l <"$dir/metrics.jsonl"; } 2>/dev/null || echo 0)" -ge 2 ] && break
    sleep 0.1
  done
  if [ "$mode" = kill ]; then kill -KILL $pid; else kill -TERM $pid; fi
  echo "SIGNALLED $(date +%s)"
  wait $pid
  rc=$?
  echo "RANK_EXIT 1 $rc $(date +%s)"
  exit $rc
fi
mode=$1 np=$2 comm_timeout=$3 limit=$4 strata=$5
shift 5
mpirun=("$@")
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=1
case ${FAULT_CHECK_PLACEMENT:-device} in
  device) placement=(--optimizer-device device) ;;
  zero3) placement=(--optimizer-device cpu --zero-stage 3) ;;
  *) fail "FAULT_CHECK_PLACEMENT is device or zero3, not '$FAULT_CHECK_PLACEMENT'" ;;
esac
out=$(timeout $((limit + 90)) "${mpirun[@]}" -np "$np" bash "$0" --rank "$mode" "$work" "$strata" train \
        --preset gpt2-tiny --micro-batch 2 --seq 32 --grad-accum "$np" "${placement[@]}" --threads 1 \
        --steps 1000000 --comm-timeout "$comm_timeout" --log-every 1 --metrics "$work/metrics.jsonl" \
        --checkpoint-dir "$work/run" 2>&1)
finished=$(date +%s)
echo "$out" | grep -v '^\[' | tail -20
signalled=$(sed -n 's/^SIGNALLED \([0-9]*\)$/\1/p' <<<"$out")
[ -n "$signalled" ] || fail "rank 1 got no signal (did training start?)"
if [ "$mode" = term ]; then
  for ((r = 0; r < np; r++)); do
    grep -q "^RANK_EXIT $r 143 " <<<"$out" || fail "rank $r did not stop with 143 (128 + SIGTERM)"
  done
  last=$(python3 -c 'import json,sys; print(max(json.loads(l)["step"] for l in open(sys.argv[1]) if "loss" in l))' \
         "$work/metrics.jsonl")
  [ -d "$work/run/step-$(printf %06d "$last")" ] || fail "no checkpoint of step $last (rank 0's last logged step)"
  echo "PASS: SIGTERM to rank 1 alone stopped all $np ranks after step $last, checkpoint written by rank 0"
  exit 0
fi
grep -q '^RANK_EXIT 1 137 ' <<<"$out" || fail "rank 1 did not die by SIGKILL"
for ((r = 0; r < np; r++)); do
  [ $r -eq 1 ] && continue
  if line=$(grep "^RANK_EXIT $r " <<<"$out"); then
    read -r _ _ status end <<<"$line"
    [ "$status" -ne 0 ] || fail "rank $r exited 0 after rank 1 died"
  else
    # Every survivor aborts the world (abort_mpi_world): the first abort may kill a slower survivor,
    # wrapper and all, after it wrote its error (checked below) but before its wrapper reported.
    # It ended no later than mpirun did.
    end=$finished
    echo "rank $r: no exit status (killed by a peer's MPI_Abort); it ended by $((end - signalled)) s after the kill"
  fi
  [ $((end - signalled)) -le "$limit" ] || fail "rank $r took $((end - signalled)) s after the kill (limit $limit s)"
  # "rank 1", or rank 1 in a list ("no data from ranks 1, 2": a rank still waiting in an earlier
  # collective for rank 1 is silent too, and the waiting rank cannot tell the two apart).
  grep -qE "\branks? ([0-9]+, )*1\b" "$work/err.$r" ||
    fail "rank $r's error does not name rank 1: $(tail -2 "$work/err.$r")"
done
echo "PASS: rank 1 SIGKILLed; the other $((np - 1)) rank(s) exited non-zero naming it within $limit s"
