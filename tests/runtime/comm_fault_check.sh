#!/usr/bin/env bash
# A dead or silent rank is an error, not a hang: runs `comm_mpi_check MODE` under mpirun (the
# command after MODE and NP) and passes when every rank but rank 1 printed COMM_FAULT_OK (an error
# naming rank 1 and all_reduce) and the whole run ended within LIMIT seconds.
# Usage: comm_fault_check.sh MODE NP LIMIT mpirun [mpirun args...] BINARY
set -u
mode=$1 np=$2 limit=$3
shift 3
start=$(date +%s)
out=$(timeout $((limit + 30)) "$@" "$mode" 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$out"
ok=$(grep -c '^COMM_FAULT_OK' <<<"$out")
if grep -q '^COMM_FAULT_BAD' <<<"$out"; then echo "FAIL: a rank got the wrong error"; exit 1; fi
if [ "$ok" -ne $((np - 1)) ]; then echo "FAIL: $ok of $((np - 1)) surviving ranks reported the dead rank (mpirun rc $rc)"; exit 1; fi
if [ "$elapsed" -gt "$limit" ]; then echo "FAIL: took ${elapsed} s (limit ${limit} s)"; exit 1; fi
echo "PASS: $ok ranks named rank 1 in ${elapsed} s (mpirun rc $rc)"
