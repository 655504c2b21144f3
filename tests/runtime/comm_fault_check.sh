#!/usr/bin/env bash
# A dead or silent rank is an error, not a hang: runs `comm_mpi_check MODE` (kill: rank 1 SIGKILLs
# itself; silent: rank 1 stays out of an all_reduce, alive) on NP ranks under the mpirun command
# given, and passes when the run ended within LIMIT seconds, no rank printed COMM_FAULT_BAD, and:
#  * with --enable-recovery (mpirun leaves the survivors running, so what they do is strata's own
#    detection): every rank but 1 printed COMM_FAULT_OK (its error names rank 1 and the all_reduce)
#    and exited non-zero, by its own exit status: each rank runs under this script's --rank-exit
#    wrapper, which prints RANK_EXIT <rank> <status>. mpirun's status proves nothing here: with
#    --enable-recovery Open MPI 4.1's mpirun exits 0 however its ranks ended. The ranks run with
#    own-exit (each exits by itself, not through MPI_Abort, which would kill a slower survivor before
#    its wrapper prints its status). In kill mode rank 1 must have died by SIGKILL (status 137).
#  * without it (the mpirun a user runs): mpirun exited non-zero and a rank named rank 1 (the first
#    survivor to abort takes the others down, so only one COMM_FAULT_OK is certain).
# MODE fail is the harness's own check: every rank passes the collectives, then rank 1 exits 1; a
# plain mpirun must exit non-zero (so the collectives tests, which trust mpirun's status, can fail).
# Usage: comm_fault_check.sh MODE NP LIMIT mpirun [mpirun args...] BINARY
#        comm_fault_check.sh --rank-exit COMMAND...   (the per-rank wrapper)
set -u
if [ "$1" = --rank-exit ]; then
  shift
  "$@"
  rc=$?
  echo "RANK_EXIT ${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-?}} $rc"
  exit $rc
fi
mode=$1 np=$2 limit=$3
shift 3
binary=${*: -1}
launcher=("${@:1:$#-1}")
recovery=0
for a in "${launcher[@]}"; do [ "$a" = --enable-recovery ] && recovery=1; done
start=$(date +%s)
own_exit=()
[ $recovery -eq 1 ] && own_exit=(cpu own-exit)
out=$(timeout $((limit + 30)) "${launcher[@]}" bash "$0" --rank-exit "$binary" "$mode" "${own_exit[@]}" 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$out"
fail() { echo "FAIL: $*"; exit 1; }
if [ "$mode" = fail ]; then
  [ "$(grep -c 'collectives ok' <<<"$out")" -eq "$np" ] || fail "not every rank passed the collectives"
  [ "$rc" -ne 0 ] || fail "mpirun exited 0 although rank 1 exited 1"
  grep -q '^RANK_EXIT 1 1$' <<<"$out" || fail "rank 1 did not exit 1"
  echo "PASS: rank 1 exited 1 and mpirun exited $rc"
  exit 0
fi
grep -q '^COMM_FAULT_BAD' <<<"$out" && fail "a rank got the wrong error"
[ "$elapsed" -le "$limit" ] || fail "took ${elapsed} s (limit ${limit} s)"
ok=$(grep -c '^COMM_FAULT_OK' <<<"$out")
if [ $recovery -eq 0 ]; then
  [ "$rc" -ne 0 ] || fail "mpirun exited 0 although rank 1 was $mode"
  [ "$ok" -ge 1 ] || fail "no rank reported rank 1 (mpirun rc $rc)"
  echo "PASS: mpirun exited $rc after ${elapsed} s, rank 1 named"
  exit 0
fi
[ "$ok" -eq $((np - 1)) ] || fail "$ok of $((np - 1)) surviving ranks reported the dead rank (mpirun rc $rc)"
for ((r = 0; r < np; r++)); do
  [ $r -eq 1 ] && continue
  status=$(sed -n "s/^RANK_EXIT $r \([0-9]*\)$/\1/p" <<<"$out")
  [ -n "$status" ] || fail "rank $r's exit status is missing"
  [ "$status" -ne 0 ] || fail "rank $r exited 0 after naming the dead rank"
done
if [ "$mode" = kill ]; then
  grep -q '^RANK_EXIT 1 137$' <<<"$out" || fail "rank 1 did not die by SIGKILL"
fi
echo "PASS: $ok ranks named rank 1 and exited non-zero in ${elapsed} s (mpirun rc $rc)"
