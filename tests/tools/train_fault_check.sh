#!/usr/bin/env bash
# A rank that dies mid-training stops the others (label mpi): `strata train` on NP ranks under
# `mpirun --enable-recovery` (which leaves the survivors running, so what they do is strata's own
# detection, not mpirun's cleanup); once rank 0 has logged two steps, rank 1 is SIGKILLed. Passes
# when rank 1 died by SIGKILL and every other rank exited non-zero, its error naming rank 1, within
# LIMIT seconds of the kill. Each rank runs under this script's --rank wrapper, which prints
# RANK_EXIT <rank> <status> <epoch seconds>; rank 1's prints KILLED <epoch seconds>.
# The ranks run with --comm-timeout TIMEOUT (the survivors' wait for the dead rank).
# Usage: train_fault_check.sh NP TIMEOUT LIMIT STRATA mpirun [mpirun args, without -np...]
#        train_fault_check.sh --rank DIR STRATA ARGS...   (the per-rank wrapper)
set -u
if [ "$1" = --rank ]; then
  dir=$2
  shift 2
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
  kill -9 $pid
  echo "KILLED $(date +%s)"
  wait $pid
  rc=$?
  echo "RANK_EXIT 1 $rc $(date +%s)"
  exit $rc
fi
np=$1 comm_timeout=$2 limit=$3 strata=$4
shift 4
mpirun=("$@")
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OPENBLAS_NUM_THREADS=1
out=$(timeout $((limit + 90)) "${mpirun[@]}" -np "$np" bash "$0" --rank "$work" "$strata" train --preset gpt2-tiny \
        --micro-batch 2 --seq 32 --grad-accum "$np" --optimizer-device device --threads 1 --steps 1000000 --comm-timeout "$comm_timeout" \
        --log-every 1 --metrics "$work/metrics.jsonl" 2>&1)
echo "$out" | grep -v '^\[' | tail -20
killed=$(sed -n 's/^KILLED \([0-9]*\)$/\1/p' <<<"$out")
[ -n "$killed" ] || fail "rank 1 was not killed (did training start?)"
grep -q '^RANK_EXIT 1 137 ' <<<"$out" || fail "rank 1 did not die by SIGKILL"
for ((r = 0; r < np; r++)); do
  [ $r -eq 1 ] && continue
  line=$(grep "^RANK_EXIT $r " <<<"$out") || fail "rank $r's exit status is missing"
  read -r _ _ status end <<<"$line"
  [ "$status" -ne 0 ] || fail "rank $r exited 0 after rank 1 died"
  [ $((end - killed)) -le "$limit" ] || fail "rank $r took $((end - killed)) s after the kill (limit $limit s)"
  grep -q "rank 1\b" "$work/err.$r" || fail "rank $r's error does not name rank 1: $(tail -2 "$work/err.$r")"
done
echo "PASS: rank 1 SIGKILLed; the other $((np - 1)) rank(s) exited non-zero naming it within $limit s"
