#!/usr/bin/env bash
# Paged weights against resident ones, in one run of this script: trains the same model with the
# same data three times -- weights resident (a large --gpu-mem), homed in pinned memory and homed
# on NVMe (both with --gpu-mem a quarter of the resident need) -- and prints tokens/s of steps 2..N
# of each, the ratio to resident, the compute's wait and each run's device peak. The losses of the
# three runs must be identical (the exactness contract); the script says so or fails.
# Usage: bench/offload_train_bench.sh [NVME_DIR] [extra strata train flags...]
#   env: STRATA (binary, default build/bin/strata), DEVICE (cpu; cuda on a GPU), PRESET (gpt2-350m),
#        DTYPE (bf16), STEPS (4), MB (2), SEQ (64), RESIDENT_GPU_MEM (64GiB; auto on a GPU),
#        GPU_MEM_PAGED (derived: a quarter of the weights + gradients), OUT (a temp dir)
set -euo pipefail
cd "$(dirname "$0")/.."
STRATA=${STRATA:-build/bin/strata}
NVME_DIR=${1:-$PWD/build/offload-bench-swap}
shift || true
DEVICE=${DEVICE:-cpu}
RESIDENT_GPU_MEM=${RESIDENT_GPU_MEM:-64GiB}
PRESET=${PRESET:-gpt2-350m}
DTYPE=${DTYPE:-bf16}
STEPS=${STEPS:-4}
MB=${MB:-2}
SEQ=${SEQ:-64}
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$NVME_DIR" "$OUT"
common=(train --device "$DEVICE" --preset "$PRESET" --dtype "$DTYPE" --steps "$STEPS" --micro-batch "$MB" --seq "$SEQ"
        --activation-checkpointing --lr 3e-4 --eval-every 0 --log-every 1 "$@")

# The model's size on the device -- every weight and its gradient at the working precision -- from
# strata's own device plan (printed before anything is allocated): 2 x the resident weights.
plan=$("$STRATA" "${common[@]}" --gpu-mem "$RESIDENT_GPU_MEM" --steps 1 2>&1 | grep -m1 "device memory:" || true)
model_mib=$(python3 - "$plan" <<'PY'
import re, sys
m = re.search(r"weights ([0-9.]+) (KiB|MiB|GiB) \(resident\)", sys.argv[1])
v, u = float(m.group(1)), m.group(2)
print(int(2 * v * {"KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[u]))
PY
)
GPU_MEM_PAGED=${GPU_MEM_PAGED:-$(( model_mib / 4 ))MiB}
echo "offload bench: $PRESET $DTYPE, $STEPS steps of $MB x $SEQ; resident plan: ${plan#*device memory: }"
echo "offload bench: weights + gradients ${model_mib} MiB; paged runs get --gpu-mem $GPU_MEM_PAGED (a quarter)"

timer=()  # peak RSS from GNU time where it is installed
[ -x /usr/bin/time ] && timer=(/usr/bin/time -v)
run() {  # run NAME FLAGS...
  local name=$1
  shift
  "${timer[@]}" "$STRATA" "${common[@]}" --metrics "$OUT/$name.jsonl" "$@" >"$OUT/$name.log" 2>&1 ||
    { cat "$OUT/$name.log"; echo "offload bench: the $name run failed" >&2; exit 1; }
}
run resident --gpu-mem "$RESIDENT_GPU_MEM"
run cpu --gpu-mem "$GPU_MEM_PAGED" --offload-param cpu
run nvme --gpu-mem "$GPU_MEM_PAGED" --offload-param nvme --nvme-path "$NVME_DIR" --trace "$OUT/nvme-trace.json"

python3 - "$OUT" <<'PY'
import json, re, sys
out = sys.argv[1]
def load(name):
    rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
    log = open(f"{out}/{name}.log").read()
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", log)
    rss = int(m.group(1)) / 1024 if m else float("nan")
    later = rows[1:] or rows
    tok = sum(r["tokens_per_s"] * r["step_s"] for r in later) / sum(r["step_s"] for r in later)
    wait = sum(r.get("transfers", {}).get("wait_s", 0) for r in later) / sum(r["step_s"] for r in later)
    return rows, tok, wait, rss
res_rows, res_tok, _, res_rss = load("resident")
print(f"{'run':9} {'tok/s':>9} {'vs resident':>12} {'wait':>7} {'gpu peak':>10} {'RSS':>9}  losses")
ok = True
for name in ("resident", "cpu", "nvme"):
    rows, tok, wait, rss = load(name)
    same = [r["loss"] for r in rows] == [r["loss"] for r in res_rows]
    ok &= same
    gpu = rows[-1]["peak_bytes"]["gpu"] / 2**20
    print(f"{name:9} {tok:9.1f} {tok / res_tok:12.3f} {wait * 100:6.1f}% {gpu:8.0f} MiB {rss:7.0f} MiB  "
          f"{'identical' if same else 'DIFFER'} ({rows[0]['loss']:.4f} -> {rows[-1]['loss']:.4f})")
print(f"logs, metrics and the nvme run's trace: {out}")
sys.exit(0 if ok else 1)
PY
