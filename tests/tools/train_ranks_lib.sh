# Shared by the training-across-ranks checks (sourced).
# fail MESSAGE: the check fails, saying why.
fail() { echo "FAIL: $*"; exit 1; }
# in_work_dir: a temporary directory as the working directory, removed at exit, with nvme/ for
# --nvme-path; one BLAS thread a process (the ranks share CI's 2 cores).
in_work_dir() {
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cd "$work" || exit 1
  mkdir nvme
  export OPENBLAS_NUM_THREADS=1
}
# figures FILE: step, loss, grad_norm, val_loss of each step line of a --metrics file, the figures
# that must match to the last digit.
figures() { python3 -c '
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    if "loss" in d: print(d["step"], repr(d["loss"]), repr(d["grad_norm"]), repr(d.get("val_loss")))
' "$1"; }
# same_checkpoint A B [WHAT]: the checkpoints' files the same bytes.
same_checkpoint() {
  for f in config.json model.safetensors optimizer.safetensors; do
    cmp -s "$1/$f" "$2/$f" || fail "$f differs: $1 vs $2${3:+ ($3)}"
  done
}
# clipped FILE: some step's gradient norm is above the clip threshold 0.5 (the test clipped).
clipped() { python3 -c '
import json, sys
norms = [d["grad_norm"] for d in map(json.loads, open(sys.argv[1])) if "grad_norm" in d]
sys.exit(0 if max(norms) > 0.5 else 1)' "$1"; }
