#!/usr/bin/env bash
# Each rank's place on its node (label mpi, issue #25's "strata info shows ranks and their
# placement"): `strata info --ranks N --json` plans N ranks whose CPU shares are disjoint and cover
# every CPU (on a machine of at least N cores); under mpirun only the node's local rank 0 prints,
# one document for the NP ranks; and `strata train` under mpirun: rank 0 logs its binding, and
# each rank, read from /proc while it trains, is bound to its own share.
# Usage: info_ranks_check.sh NP STRATA mpirun [mpirun args, without -np...]
set -u
np=$1 strata=$2
shift 2
mpirun=("$@")
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The plan without a launcher: shares disjoint, every CPU in one when the ranks fit the cores.
timeout 60 "$strata" info --ranks "$np" --json >"$work/plan.json" || fail "strata info --ranks $np exited $?"
python3 - "$work/plan.json" "$np" <<'EOF' || exit 1
import json, sys
doc = json.load(open(sys.argv[1])); np = int(sys.argv[2])
ranks = doc["ranks"]
assert ranks["launcher"] == "single" and ranks["local_ranks"] == np, ranks
placement = ranks["placement"]
assert [p["local_rank"] for p in placement] == list(range(np)), placement
every = sorted(c for n in doc["numa_nodes"] for c in n["cpus"])
shares = [p["cpus"] for p in placement]
assert all(s for s in shares), shares
if doc["cpu"]["physical_cores"] >= np:
    flat = sorted(c for s in shares for c in s)
    assert flat == every, f"shares {shares} are not a partition of {every}"
print("plan:", [(p["local_rank"], p["cpus"], p["cpus_why"]) for p in placement])
EOF

# Under mpirun: one report, by local rank 0, for the node's NP ranks.
timeout 60 "${mpirun[@]}" -np "$np" "$strata" info --json >"$work/mpi.json" 2>"$work/mpi.err" ||
  fail "mpirun strata info exited $?: $(cat "$work/mpi.err")"
python3 - "$work/mpi.json" "$np" <<'EOF' || exit 1
import json, sys
text = open(sys.argv[1]).read(); np = int(sys.argv[2])
doc = json.loads(text)  # one document: a second rank's would not parse
ranks = doc["ranks"]
assert ranks["launcher"] == "mpirun" and ranks["world_size"] == np and ranks["local_ranks"] == np, ranks
assert len(ranks["placement"]) == np
EOF

# Training: rank 0 logs its binding (the others log only errors); each rank's own, read from /proc
# while the ranks train, is a share of its own where the cores allow.
timeout 120 "${mpirun[@]}" -np "$np" "$strata" train --preset gpt2-tiny --dtype fp32 --micro-batch 1 --seq 16 \
  --grad-accum "$np" --steps 100000 --eval-every 0 --log-every 1 --metrics "$work/metrics.jsonl" \
  >"$work/train.out" 2>&1 &
mp=$!
declare -A bound=()
for _ in $(seq 1 600); do  # up to 30 s for every rank to be past its binding
  # The ranks: processes named strata whose command line names this check's directory.
  for pid in $(ps -eo pid=,comm=,args= | awk -v w="$work/metrics.jsonl" '$2 == "strata" && index($0, w) {print $1}'); do
    grep -q '\] step  *[0-9]' "$work/train.out" || continue  # every rank's setup (its binding) done: a step ran
    bound[$pid]=$(awk '/^Cpus_allowed_list:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
  done
  [ "${#bound[@]}" -ge "$np" ] && break
  sleep 0.05
done
kill -TERM "$mp" 2>/dev/null
wait "$mp"
[ "${#bound[@]}" -eq "$np" ] || fail "found ${#bound[@]} training ranks, not $np: $(tail -5 "$work/train.out")"
grep -q "rank 0 of $np (mpirun, local rank 0 of $np): [0-9]* CPUs\? " "$work/train.out" ||
  fail "rank 0 logged no binding: $(head -20 "$work/train.out")"
echo "ranks' CPUs: ${bound[*]}"
cores=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["cpu"]["physical_cores"])' "$work/plan.json")
if [ "$cores" -ge "$np" ]; then
  dups=$(printf '%s\n' "${bound[@]}" | sort | uniq -d)
  [ -z "$dups" ] || fail "two ranks bound to the same CPUs $dups"
fi
echo "PASS: $np ranks placed on disjoint shares (the plan, mpirun's info, the training ranks' bindings)"
