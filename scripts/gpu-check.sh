#!/usr/bin/env bash
# gpu-check.sh OUTDIR: the one command for a GPU machine, which needs no Go.
#
# It runs binaries built on a development machine (`make gpu-bundle` puts
# them beside this script in bin/gpu-bundle; copy that folder over):
#   trainmem    the cuda build of trainmem (go build -tags trainmem_cuda)
#   cuda.test   package cuda's tests, conformance included (go test -c)
#   gpureport   the closing table
# and:
#   1. prints the GPU (nvidia-smi) and trainmem's view of it;
#   2. runs the conformance suite and the CUDA device tests on the GPU;
#   3. runs `trainmem validate` (memory: estimate, simulation, measurement)
#      and `trainmem train` (speed and MFU) on the GPU for tiny and gpt2
#      (124M), in fp16 and bf16, with checkpoint none and full, at two batch
#      sizes each;
#   4. ends with a table: measured vs simulated memory per category, step
#      time, tokens/s, MFU.
# Full logs go to OUTDIR. The exit status is non-zero when a step failed;
# every step runs anyway. TRAINMEM_CUDA_SYNC=1 in the environment makes
# every kernel synchronize and name itself on failure.
#
# Environment: BIN (where the binaries are; default: beside this script,
# else ../bin/gpu-bundle), QUICK=1 (tiny only, one batch size).
set -uo pipefail

if [ $# -ne 1 ]; then
	echo "usage: $0 OUTDIR" >&2
	exit 2
fi
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-$HERE}
[ -x "$BIN/trainmem" ] || BIN=$HERE/../bin/gpu-bundle
for b in trainmem cuda.test gpureport; do
	[ -x "$BIN/$b" ] || { echo "gpu-check: $BIN/$b is missing: run 'make gpu-bundle' on a machine with Go and copy bin/gpu-bundle here" >&2; exit 2; }
done
OUT=$1
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
exec > >(tee "$OUT/gpu-check.log") 2>&1

failed=()
step() { echo; echo "== $*"; }
note_fail() { failed+=("$1"); echo "gpu-check: FAILED: $1 (log: $2)"; }

step "the GPU"
if command -v nvidia-smi >/dev/null 2>&1; then
	nvidia-smi | tee "$OUT/nvidia-smi.txt"
	nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv 2>/dev/null
else
	echo "gpu-check: no nvidia-smi on PATH"
fi
uname -a
ldd --version 2>/dev/null | head -1

step "conformance suite and CUDA device tests (log: conformance.log)"
t0=$(date +%s)
(cd "$OUT" && "$BIN/cuda.test" -test.run 'DriverShim|CUDADevice|ConformanceCUDA' -test.v -test.timeout 30m) >"$OUT/conformance.log" 2>&1
rc=$?
grep -E '^(--- |    --- FAIL|FAIL|ok|PASS)|skipped' "$OUT/conformance.log" | grep -v -- '--- PASS: .*/' | head -60
echo "$(grep -c -- '--- PASS' "$OUT/conformance.log") passed, $(grep -c -- '--- FAIL' "$OUT/conformance.log") failed, $(grep -c -- '--- SKIP' "$OUT/conformance.log") skipped ($(( $(date +%s) - t0 )) s)"
if [ $rc -ne 0 ]; then
	note_fail conformance "$OUT/conformance.log"
	grep -B2 -A8 -- '--- FAIL' "$OUT/conformance.log" | head -80
elif grep -q -- '--- SKIP: TestConformanceCUDA' "$OUT/conformance.log"; then
	note_fail "conformance skipped (no usable GPU)" "$OUT/conformance.log"
	echo "gpu-check: no usable GPU here, nothing more to check; logs in $OUT"
	exit 1
fi

step "trainmem on the GPU"
"$BIN/trainmem" train --device cuda --preset tiny --steps 2 >"$OUT/smoke.log" 2>&1 || note_fail "trainmem train --device cuda (smoke)" "$OUT/smoke.log"
head -3 "$OUT/smoke.log"

# setups: preset seq batches
setups=("tiny 64 8 32" "gpt2 1024 4 16")
precisions=(fp16 bf16)
checkpoints=(none full)
if [ "${QUICK:-}" = 1 ]; then setups=("tiny 64 8"); fi
for s in "${setups[@]}"; do
	read -r preset seq batches <<<"$s"
	for prec in "${precisions[@]}"; do
		for ck in "${checkpoints[@]}"; do
			for b in $batches; do
				name="${preset}_${prec}_${ck}_b${b}"
				args=(--device cuda --preset "$preset" --precision "$prec" --checkpoint "$ck" --batch "$b" --seq "$seq")
				step "$name"
				t0=$(date +%s)
				if ! "$BIN/trainmem" validate "${args[@]}" --steps 3 --format json >"$OUT/validate-$name.json" 2>"$OUT/validate-$name.log"; then
					note_fail "validate $name" "$OUT/validate-$name.log"
					tail -5 "$OUT/validate-$name.log"
				fi
				if ! "$BIN/trainmem" train "${args[@]}" --steps 6 --out "$OUT/train-$name.jsonl" >"$OUT/train-$name.log" 2>&1; then
					note_fail "train $name" "$OUT/train-$name.log"
					tail -5 "$OUT/train-$name.log"
				else
					grep -E '^(loss|speed)' "$OUT/train-$name.log"
				fi
				echo "($(( $(date +%s) - t0 )) s)"
			done
		done
	done
done

step "measured vs simulated (MiB), speed and MFU"
"$BIN/gpureport" "$OUT" | tee "$OUT/table.txt"

echo
if [ ${#failed[@]} -gt 0 ]; then
	echo "gpu-check: ${#failed[@]} step(s) failed: ${failed[*]}"
	echo "gpu-check: logs in $OUT"
	exit 1
fi
echo "gpu-check: all steps passed; logs in $OUT"
