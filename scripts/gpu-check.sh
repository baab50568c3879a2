#!/usr/bin/env bash
# The CUDA kernels on a bare GPU host, in one command: needs nvcc, cmake and a C++ compiler (ninja
# and compute-sanitizer when present), and nothing from npm, pip or the network. It builds
# native/gpu_check (the kernels, the parts of the core they are checked against, their tests and
# a copy bench), runs the tests (the kernels against the CPU twin: page copies in every layout
# pair and direction, GPU digests, the SGLang chain byte-exact against the CPU hash core, refusals
# of bad input), times host <-> device page copies against cudaMemcpy of the same bytes, runs the
# tests again under compute-sanitizer memcheck, and prints one JSON summary as its last line:
#   {"gpu":..,"tests":{"passed":..,"failed":..},"copy_ratio_vs_memcpy":{..},"sanitizer":..}
# Exit status 0 when every test passed, the bench ran and memcheck (when present) found nothing.
#   bash scripts/gpu-check.sh [--dry-run] [--build-dir DIR] [--out FILE]
# --dry-run: build everything and list the test cases, launch nothing (a host without a GPU; CI).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dry=0
build="$root/build-gpu-check"
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --build-dir) build="$2"; shift ;;
    --out) out="$2"; shift ;;
    *) echo "gpu-check: unknown argument '$1' (use --dry-run, --build-dir DIR, --out FILE)" >&2; exit 2 ;;
  esac
  shift
done
out="${out:-$build/gpu-check.json}"
t0=$(date +%s)
say() { printf '==> %s (%ss)\n' "$*" "$(( $(date +%s) - t0 ))" >&2; }

find_tool() {  # name, then extra directories to look in
  local name="$1"; shift
  command -v "$name" 2>/dev/null && return 0
  for d in "$@"; do [ -x "$d/$name" ] && { echo "$d/$name"; return 0; }; done
  return 1
}
nvcc="${CUDACXX:-$(find_tool nvcc /usr/local/cuda/bin)}" || { echo "gpu-check: nvcc not found (set CUDACXX or put it on PATH)" >&2; exit 1; }
command -v cmake >/dev/null || { echo "gpu-check: cmake not found" >&2; exit 1; }
cuda_bin="$(dirname "$nvcc")"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
jobs="$(nproc 2>/dev/null || echo 2)"

say "configure native/gpu_check with $nvcc"
cmake -S "$root/native/gpu_check" -B "$build" "${generator[@]}" -DCMAKE_CUDA_COMPILER="$nvcc" >&2 || exit 1
say "build the kernels, their tests and the copy bench ($jobs jobs)"
cmake --build "$build" --parallel "$jobs" >&2 || exit 1
tests="$build/kvcuda_tests"
bench="$build/kvcuda_bench"
listed=$("$tests" --list) || { echo "gpu-check: $tests --list failed" >&2; exit 1; }
ncases=$(printf '%s\n' "$listed" | grep -c .)
[ -x "$bench" ] || { echo "gpu-check: $bench was not built" >&2; exit 1; }
sanitizer_bin="$(find_tool compute-sanitizer "$cuda_bin" /usr/local/cuda/bin)" || sanitizer_bin=""
mkdir -p "$(dirname "$out")"

if [ "$dry" = 1 ]; then
  say "dry run: built $ncases test cases and the bench; nothing launched"
  printf '%s\n' "$listed" >&2
  sanitizer="absent"
  [ -n "$sanitizer_bin" ] && sanitizer="not run (dry run)"
  summary=$(printf '{"dry_run":true,"gpu":null,"tests":{"passed":0,"failed":0,"built":%d},"copy_ratio_vs_memcpy":null,"sanitizer":"%s"}' \
    "$ncases" "$sanitizer")
  printf '%s\n' "$summary" | tee "$out"
  exit 0
fi

gpu="null"
if command -v nvidia-smi >/dev/null; then
  g=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1 | tr -d '"\\')
  [ -n "$g" ] && gpu="\"$g\""
fi

say "tests: the kernels against the CPU twin"
log="$build/tests.log"
timeout 300 "$tests" >"$log" 2>&1
status=$?
cat "$log" >&2
passed=$(grep -c '^ok ' "$log")
failed=$(grep -c '^FAIL ' "$log")
# A crash, a timeout or a case that never ran is a failure even when no case printed FAIL.
[ $(( passed + failed )) -lt "$ncases" ] && failed=$(( ncases - passed ))
[ "$status" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1

say "bench: page copies vs cudaMemcpy of the same bytes"
bench_ok=1
ratio=$(timeout 180 "$bench" | tail -1)
case "$ratio" in
  \{*) ;;
  *) echo "gpu-check: the copy bench failed (above)" >&2; ratio="null"; bench_ok=0 ;;
esac

sanitizer='"absent"'
s=0
if [ -n "$sanitizer_bin" ]; then
  # The kernels' suites only: the refusal cases provoke CUDA API errors on purpose, which memcheck
  # would count.
  say "compute-sanitizer memcheck over the kernels' tests (cuda_copy, cuda_hash)"
  slog="$build/memcheck.log"
  : >"$slog"
  for suite in cuda_copy cuda_hash; do
    timeout 300 "$sanitizer_bin" --tool memcheck --leak-check full --error-exitcode 99 "$tests" "$suite" >>"$slog" 2>&1
    rc=$?
    [ "$rc" -ne 0 ] && s=$rc
  done
  tail -5 "$slog" >&2
  summary_line=$(grep -E 'ERROR SUMMARY' "$slog" | sed 's/^=* *//' | tr -d '"\\' | paste -sd ';' -)
  if [ "$s" -eq 0 ]; then sanitizer="{\"tool\":\"memcheck\",\"result\":\"clean\",\"summary\":\"$summary_line\"}"
  else sanitizer="{\"tool\":\"memcheck\",\"result\":\"errors (exit $s)\",\"summary\":\"$summary_line\"}"; fi
fi

summary=$(printf '{"gpu":%s,"tests":{"passed":%d,"failed":%d},"copy_ratio_vs_memcpy":%s,"sanitizer":%s,"seconds":%d}' \
  "$gpu" "$passed" "$failed" "$ratio" "$sanitizer" "$(( $(date +%s) - t0 ))")
printf '%s\n' "$summary" | tee "$out"
[ "$failed" -eq 0 ] && [ "$bench_ok" = 1 ] && [ "$s" -eq 0 ]
