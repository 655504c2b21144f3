#!/usr/bin/env bash
# `strata bench comm` under mpirun (label mpi): on NP ranks at two tiny sizes, rank 0 alone prints
# the table, every op and size has a row whose numbers parse, algbw = bytes / time and busbw =
# algbw x NCCL-tests' factor for NP ranks; then two bad runs: a flag mpirun passes to every rank
# (said once, by rank 0, exit non-zero) and ranks given different sizes (named, exit non-zero).
# Usage: bench_comm_check.sh NP STRATA mpirun [mpirun args, without -np...]
set -u
np=$1 strata=$2
shift 2
mpirun=("$@")
fail() { echo "FAIL: $*"; exit 1; }

out=$(timeout 60 "${mpirun[@]}" -np "$np" "$strata" bench comm --size 4KiB,64KiB --repeat 2 2>/dev/null)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "mpirun exited $rc"
[ "$(grep -c '^bench comm: ' <<<"$out")" -eq 1 ] || fail "not one table (rank 0 alone prints)"
grep -q "^bench comm: $np ranks, mpi communicator on the cpu backend$" <<<"$out" || fail "header"
awk -v np="$np" '
  /^(all-gather|reduce-scatter|all-reduce|all-to-all) / {
    rows++
    if (NF != 7) { print "FAIL: row has " NF " fields: " $0; bad = 1; next }
    for (i = 2; i <= 7; i++) if ($i !~ /^[0-9]+(\.[0-9]+)?$/) { print "FAIL: field " i " of: " $0; bad = 1 }
    if ($2 != 4096 && $2 != 65536) { print "FAIL: size " $2; bad = 1 }
    if (!($4 <= $3 && $3 <= $5 && $3 > 0)) { print "FAIL: time not min <= median <= max: " $0; bad = 1 }
    alg = $2 / $3 / 1e3  # bytes / us -> GB/s
    if (alg - $6 > 0.002 + 0.02 * alg || $6 - alg > 0.002 + 0.02 * alg) { print "FAIL: algbw " $6 " vs " alg; bad = 1 }
    f = (np - 1) / np * ($1 == "all-reduce" ? 2 : 1)
    if ($7 - $6 * f > 0.0015 || $6 * f - $7 > 0.0015) { print "FAIL: busbw " $7 " vs " $6 " x " f; bad = 1 }
  }
  END { if (rows != 8) { print "FAIL: " rows " rows, not 8"; bad = 1 } exit bad }' <<<"$out" || exit 1

err=$(timeout 60 "${mpirun[@]}" -np "$np" "$strata" bench comm --op allgather 2>&1 >/dev/null)
rc=$?
[ $rc -ne 0 ] || fail "a bad --op exited 0"
[ "$(grep -c 'strata: error: --op allgather: expected all-gather' <<<"$err")" -eq 1 ] ||
  fail "a bad --op was not said once: $err"

# Different flags on different ranks (mpirun's colon syntax): named instead of a hang.
err=$(timeout 60 "${mpirun[@]}" -np 1 "$strata" bench comm --size 4KiB --repeat 1 : -np 1 "$strata" bench comm --size 8KiB \
      --repeat 1 2>&1 >/dev/null)
rc=$?
[ $rc -ne 0 ] || fail "ranks given different sizes exited 0"
grep -q 'rank 1 was given other --op, --size, --repeat or --warmup than rank 0' <<<"$err" ||
  fail "mismatched flags not named: $err"
echo "PASS: $np ranks, 8 rows add up; a bad flag and mismatched ranks are said"
