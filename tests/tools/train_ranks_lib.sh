# Shared by the training-across-ranks checks (sourced; needs fail() defined by the caller).
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
