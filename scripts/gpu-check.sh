#!/usr/bin/env bash
# gpu-check.sh OUTDIR: the one command for a GPU machine, which needs no Go.
#
# It runs binaries built on a development machine (`make gpu-bundle` puts
# them beside this script in bin/gpu-bundle; copy that folder over):
#   trainmem    the cuda build of trainmem (go build -tags trainmem_cuda)
#   gpu.test    package gpu's tests, conformance included (go test -c)
#   gpureport   the closing table
# and:
#   0. preflight: one line per requirement (glibc, the NVIDIA driver, the
#      cuBLAS the device loads (found where the device looks for it),
#      free GPU memory, the CUDA device opening and loading cuBLAS),
#      stopping at once with the reason when one is not met;
#   1. runs the conformance suite and the CUDA device tests on the GPU; a
#      failing test is run again alone with TRAINMEM_CUDA_SYNC=1, so that
#      the kernel that faulted names itself;
#   2. the quick pass (tiny only, about two minutes): `trainmem validate`
#      and `trainmem train` in fp16 and bf16, checkpoint none and full, then
#      bf16 with fp32 main gradients, the optimizer offloaded to host
#      memory, and ZeRO-3's weights offloaded too, and the table; so that a
#      short GPU lease always ends with a table;
#   3. the ranks over NCCL when the machine has 2 GPUs or more (each
#      setting, 2 ranks and every GPU, in one process and one a process,
#      the per-rank table), saying it skipped otherwise;
#   4. the full pass (QUICK=1 skips it): the same for gpt2 (124M, sequence
#      1024) at two batch sizes, and the table again with every run.
# The table: measured vs simulated memory per category, the CUDA context's
# share, step time, tokens/s, MFU. Full logs go to OUTDIR. The exit status
# is non-zero when a step failed; every step after the preflight runs
# anyway.
#
# Environment: BIN (where the binaries are; default: beside this script,
# else ../bin/gpu-bundle), QUICK=1 (the quick pass only), TRAINMEM_CUBLAS
# (the cuBLAS to load), TRAINMEM_CUDA_SYNC=1 (every kernel synchronizes and
# names itself on failure, for every run).
set -uo pipefail

if [ $# -ne 1 ]; then
	echo "usage: $0 OUTDIR" >&2
	exit 2
fi
HERE=$(cd "$(dirname "$0")" && pwd)
BIN=${BIN:-$HERE}
[ -x "$BIN/trainmem" ] || BIN=$HERE/../bin/gpu-bundle
for b in trainmem gpu.test gpureport; do
	[ -x "$BIN/$b" ] || { echo "gpu-check: $BIN/$b is missing: run 'make gpu-bundle' on a machine with Go and copy bin/gpu-bundle here" >&2; exit 2; }
done
OUT=$1
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
exec > >(tee "$OUT/gpu-check.log") 2>&1

failed=()
step() { echo; echo "== $*"; }
note_fail() { failed+=("$1"); echo "gpu-check: FAILED: $1 (log: $2)"; }
need() { printf '  %-22s %s\n' "$1" "$2"; }
stop() { echo "gpu-check: cannot run here: $*"; echo "gpu-check: logs in $OUT"; exit 1; }

step "preflight"
# glibc: the bundle's binaries are built against 2.34's symbols.
glibc=$(ldd --version 2>/dev/null | head -1 | grep -oE '[0-9]+\.[0-9]+$')
if [ -z "$glibc" ]; then
	need glibc "unknown (no ldd): the binaries need 2.34 or newer"
elif [ "$(printf '%s\n2.34\n' "$glibc" | sort -V | head -1)" != 2.34 ]; then
	need glibc "$glibc: too old"
	stop "glibc $glibc; the bundle's binaries need 2.34 or newer (Ubuntu 22.04+, RHEL 9+)"
else
	need glibc "$glibc (2.34 or newer: ok)"
fi
# The driver, and the newest CUDA it runs.
driver_cuda=""
if command -v nvidia-smi >/dev/null 2>&1; then
	nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || stop "nvidia-smi fails: $(tail -1 "$OUT/nvidia-smi.txt")"
	drv=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)
	driver_cuda=$(grep -oE 'CUDA Version: [0-9]+\.[0-9]+' "$OUT/nvidia-smi.txt" | grep -oE '[0-9]+\.[0-9]+')
	need driver "$drv (runs CUDA ${driver_cuda:-?})"
	nvidia-smi --query-gpu=name,memory.total,memory.free,compute_cap --format=csv 2>/dev/null | sed 's/^/  /'
	free_mib=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -dc 0-9)
	if [ -n "$free_mib" ] && [ "$free_mib" -lt 2048 ]; then
		need "free GPU memory" "$free_mib MiB: too little"
		stop "only $free_mib MiB of GPU memory is free (another process holds the card?); trainmem's checks need 2 GiB"
	fi
	need "free GPU memory" "${free_mib:-?} MiB"
else
	need driver "no nvidia-smi on PATH: trainmem's own view below decides"
fi
# trainmem's view: the CUDA device opens and a product loads cuBLAS
# (TestCUDADevice), found where the device looks for it (cuda/gpu/plan.go's
# cublasCandidates, TRAINMEM_CUBLAS first). Whether the kernels compute
# right is the conformance suite's to say, below.
(cd "$OUT" && "$BIN/gpu.test" -test.run '^TestCUDADevice$' -test.v) >"$OUT/preflight.log" 2>&1
if grep -q -- '--- PASS: TestCUDADevice' "$OUT/preflight.log"; then
	need "CUDA device" "$(grep -m1 'device_test.go.*cuda:' "$OUT/preflight.log" | sed 's/.*: cuda:/cuda:/; s/, cuBLAS .*/)/')"
	lib=$(grep -o 'cuBLAS [^(]*([^)]*)' "$OUT/preflight.log" | head -1)
	need cuBLAS "${lib:-not loaded (see $OUT/preflight.log)}"
else
	why=$(grep -E 'skipped: |cuda: |cuBLAS' "$OUT/preflight.log" | head -1 | sed 's/^ *[a-z_]*\.go:[0-9]*: //')
	need "CUDA device" "does not open: ${why:-see $OUT/preflight.log}"
	stop "${why:-the CUDA device does not open (see $OUT/preflight.log)}; for cuBLAS, install it (pip install nvidia-cublas-cu12) or set TRAINMEM_CUBLAS"
fi

step "conformance suite and CUDA device tests (log: conformance.log)"
t0=$(date +%s)
(cd "$OUT" && "$BIN/gpu.test" -test.run 'DriverShim|CUDADevice|JITLog|CUBLASLoadedLazily|ConformanceCUDA' -test.v -test.timeout 30m) >"$OUT/conformance.log" 2>&1
rc=$?
grep -E '^(--- |    --- FAIL|FAIL|ok|PASS)|skipped' "$OUT/conformance.log" | grep -v -- '--- PASS: .*/' | head -60
echo "$(grep -c -- '--- PASS' "$OUT/conformance.log") passed, $(grep -c -- '--- FAIL' "$OUT/conformance.log") failed, $(grep -c -- '--- SKIP' "$OUT/conformance.log") skipped ($(( $(date +%s) - t0 )) s)"
if [ $rc -ne 0 ]; then
	note_fail conformance "$OUT/conformance.log"
	# Each failing test that has no failing subtest, alone, every kernel
	# synchronized, so that a fault names its kernel.
	fails=$(grep -oE -- '--- FAIL: [^ ]+' "$OUT/conformance.log" | awk '{print $3}' | sort -u)
	for t in $(for f in $fails; do echo "$fails" | grep -q "^$f/" || echo "$f"; done | head -6); do
		pattern="^$(echo "$t" | sed 's#/#$/^#g')\$"
		log="$OUT/conformance-sync-$(echo "$t" | tr '/' '_').log"
		echo "-- again with TRAINMEM_CUDA_SYNC=1: $t (log: $log)"
		(cd "$OUT" && TRAINMEM_CUDA_SYNC=1 "$BIN/gpu.test" -test.run "$pattern") >"$log" 2>&1
		grep -E '^ +[a-z_]+\.go:[0-9]+: |cuda: ' "$log" | head -4
	done
elif grep -q -- '--- SKIP: TestConformanceCUDA' "$OUT/conformance.log"; then
	note_fail "conformance skipped (no usable GPU)" "$OUT/conformance.log"
	echo "gpu-check: no usable GPU here, nothing more to check; logs in $OUT"
	exit 1
fi

step "trainmem on the GPU (log: smoke.log)"
if "$BIN/trainmem" train --device cuda --preset tiny --steps 2 >"$OUT/smoke.log" 2>&1; then
	grep -E '^(device|loss)' "$OUT/smoke.log"
else
	note_fail "trainmem train --device cuda (smoke)" "$OUT/smoke.log"
	tail -2 "$OUT/smoke.log"
fi

# run_setups PRESET SEQ "BATCHES": validate and train for each precision
# and checkpoint policy.
run_setups() {
	local preset=$1 seq=$2 batches=$3
	for prec in fp16 bf16; do
		for ck in none full; do
			for b in $batches; do
				local name="${preset}_${prec}_${ck}_b${b}"
				local args=(--device cuda --preset "$preset" --precision "$prec" --checkpoint "$ck" --batch "$b" --seq "$seq")
				step "$name"
				local t0=$(date +%s)
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
}

# run_policies: the executor's policies on the GPU (tiny, bf16): fp32 main
# gradients, the optimizer offloaded to host memory, ZeRO-3's weight shard
# offloaded too (one rank gathering its units from host memory), QLoRA
# (the NF4 kernels: the base quantized at load, dequantized for each op)
# and 8-bit Adam states (the Adam8bit kernel).
run_policies() {
	local base=(--device cuda --preset tiny --precision bf16 --batch 8 --seq 64)
	local p
	for p in maingrads offload offloadparams qlora adam8bit; do
		local extra=()
		case $p in
		maingrads) extra=(--main-grads fp32) ;;
		offload) extra=(--offload optimizer) ;;
		offloadparams) extra=(--zero 3 --offload params) ;;
		qlora) extra=(--lora-rank 8 --lora-targets all-linear --quantize nf4) ;;
		adam8bit) extra=(--optimizer adamw8bit) ;;
		esac
		local name="tiny_bf16_${p}_b8"
		step "$name (${extra[*]})"
		local t0=$(date +%s)
		if ! "$BIN/trainmem" validate "${base[@]}" "${extra[@]}" --steps 3 --format json >"$OUT/validate-$name.json" 2>"$OUT/validate-$name.log"; then
			note_fail "validate $name" "$OUT/validate-$name.log"
			tail -5 "$OUT/validate-$name.log"
		fi
		if ! "$BIN/trainmem" train "${base[@]}" "${extra[@]}" --steps 6 --out "$OUT/train-$name.jsonl" >"$OUT/train-$name.log" 2>&1; then
			note_fail "train $name" "$OUT/train-$name.log"
			tail -5 "$OUT/train-$name.log"
		else
			grep -E '^(loss|speed)|PCIe' "$OUT/train-$name.log"
		fi
		echo "($(( $(date +%s) - t0 )) s)"
	done
}

table() {
	step "measured vs simulated (MiB), speed and MFU: $1"
	"$BIN/gpureport" "$OUT" | tee "$OUT/table.txt"
}

# ranks_nccl: the ranks over NCCL, when the machine has 2 GPUs or more: 2
# ranks and every GPU, each setting, in one process (ncclCommInitAll) and one
# process a rank (ncclCommInitRank, the id over trainmem's TCP rendezvous),
# printing the per-rank table (measured beside simulated, and NCCL's own
# memory).
ranks_nccl() {
	local ngpu
	ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
	if [ "${ngpu:-0}" -lt 2 ]; then
		step "ranks over NCCL: skipped (this machine has ${ngpu:-0} GPU; NCCL's ranks need 2 or more)"
		return
	fi
	local sizes=2
	[ "$ngpu" -gt 2 ] && sizes="2 $ngpu"
	local args=(--device cuda --preset tiny --precision bf16 --batch 4 --seq 64 --steps 3)
	for n in $sizes; do
		for set in "--zero 0" "--zero 1" "--zero 2" "--zero 3" "--data-parallel ps"; do
			local name="nccl_r${n}_$(echo "$set" | tr -d ' -')"
			step "$name: validate --ranks $n $set, one process"
			# shellcheck disable=SC2086
			if "$BIN/trainmem" validate "${args[@]}" --ranks "$n" $set >"$OUT/$name.txt" 2>"$OUT/$name.log"; then
				sed -n '/^rank /,/^$/p' "$OUT/$name.txt" | head -14
				grep -E '^why they differ: the measured' "$OUT/$name.txt"
			else
				note_fail "$name (one process)" "$OUT/$name.log"
				tail -3 "$OUT/$name.log"
			fi
			step "$name: the same, one process a rank"
			local port=$((29400 + RANDOM % 500)) pids=() r
			for r in $(seq 0 $((n - 1))); do
				# shellcheck disable=SC2086
				"$BIN/trainmem" validate "${args[@]}" $set --rank "$r" --world "$n" --init "tcp://127.0.0.1:$port" --timeout 2m \
					>"$OUT/$name-procs-r$r.txt" 2>"$OUT/$name-procs-r$r.log" &
				pids+=($!)
			done
			local ok=1
			for pid in "${pids[@]}"; do wait "$pid" || ok=0; done
			if [ $ok = 1 ]; then
				sed -n '/^rank /,/^$/p' "$OUT/$name-procs-r0.txt" | head -14
			else
				note_fail "$name (one process a rank)" "$OUT/$name-procs-r0.log"
				tail -3 "$OUT"/"$name"-procs-r*.log
			fi
		done
	done
}

run_setups tiny 64 8
run_policies
table "quick pass (tiny)"
ranks_nccl
if [ "${QUICK:-}" != 1 ]; then
	run_setups tiny 64 32
	run_setups gpt2 1024 "4 16"
	table "full pass"
fi

echo
if [ ${#failed[@]} -gt 0 ]; then
	echo "gpu-check: ${#failed[@]} step(s) failed: ${failed[*]}"
	echo "gpu-check: logs in $OUT"
	exit 1
fi
echo "gpu-check: all steps passed; logs in $OUT"
