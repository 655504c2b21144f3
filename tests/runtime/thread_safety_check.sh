#!/usr/bin/env bash
# thread_safety_check.sh CLANGXX SOURCE_ROOT PROBE: shows clang's -Wthread-safety is real over
# runtime/mutex.h. PROBE (thread_safety_probe.cc) must compile clean as it is, and with
# -DSTRATA_PROBE_VIOLATIONS must fail with an error at each line ending in `// violation` and at
# no other line. Exits 77 (CTest's SKIP_RETURN_CODE) when CLANGXX is empty or missing: gcc has no
# such analysis. Compiles only (-fsyntax-only), about a second.
set -uo pipefail
clangxx=$1 root=$2 probe=$3
if [ -z "$clangxx" ] || ! command -v "$clangxx" >/dev/null; then
  echo "SKIPPED: clang++ is not installed; the thread-safety analysis is clang's (tools/setup.sh installs clang)"
  exit 77
fi
flags=(-std=c++20 -fsyntax-only -Wthread-safety -Werror=thread-safety "-I$root")
clean_log=$(mktemp)
trap 'rm -f "$clean_log"' EXIT

# Both compiles at once: each is about half a second of one core.
"$clangxx" "${flags[@]}" "$probe" >"$clean_log" 2>&1 &
clean_pid=$!
out=$("$clangxx" "${flags[@]}" -DSTRATA_PROBE_VIOLATIONS "$probe" 2>&1)
rc=$?
if ! wait "$clean_pid"; then
  echo "FAIL: the probe without violations does not compile clean:"
  cat "$clean_log"
  exit 1
fi
if [ "$rc" -eq 0 ]; then
  echo "FAIL: the probe with deliberate locking violations compiled: -Wthread-safety is not checking"
  exit 1
fi
expected=$(grep -n '// violation$' "$probe" | cut -d: -f1 | sort -n | uniq)
reported=$(echo "$out" | sed -n "s|^.*thread_safety_probe\.cc:\([0-9]*\):[0-9]*: error: .*|\1|p" | sort -n | uniq)
if [ "$expected" != "$reported" ]; then
  echo "FAIL: violations expected at lines [$(echo $expected)], errors reported at lines [$(echo $reported)]:"
  echo "$out"
  exit 1
fi
echo "OK: $(echo "$expected" | wc -l) deliberate violations rejected, each at its line; the clean probe compiles"
