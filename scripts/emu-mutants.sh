#!/usr/bin/env bash
# The emulated GPU can fail: each mutant is a deliberately broken copy of
# the CUDA C in cuda/gpu/kernels/ (a removed __syncthreads, a wrong index, a
# removed warp shuffle), built into a fake libcuda.so.1 of its own, and the
# conformance suite must fail on every one of them. Run by make
# test-cuda-emu after the real kernels passed.
#
# usage: scripts/emu-mutants.sh EMU_DIR "CXX FLAGS..."
set -uo pipefail
cd "$(dirname "$0")/.."
emu=$1
cxx=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# name | the file of cuda/gpu/kernels to change | the line to change (a
# fixed string) | what it becomes
mutants=(
	'column sums without their barrier|common.cuh|	part[threadIdx.y][threadIdx.x] = acc;
	__syncthreads();|	part[threadIdx.y][threadIdx.x] = acc;'
	'gemm tiles read before they are loaded|matmul.cuh|			Bs[kr][cc] = vb;
		}
		__syncthreads();|			Bs[kr][cc] = vb;
		}'
	'norm with a wrong weight index|norm.cuh|T v = (ld<T>(x, xdt, k) - mean) * rstd * ld<T>(w, wdt, c);|T v = (ld<T>(x, xdt, k) - mean) * rstd * ld<T>(w, wdt, (c + 1) % C);'
	'layer norm without its bias|norm.cuh|if (kind != NORM_RMS) v += ld<T>(b, bdt, c);|if (false) v += ld<T>(b, bdt, c);'
	'norm gradient without its xhat·mean(g·xhat) term|norm.cuh|ld<T>(w, wdt, c) - mg - xhat * mgx));|ld<T>(w, wdt, c) - mg));'
	'RMSNorm statistics with the mean subtracted|norm.cuh|		if (kind != NORM_RMS) {
			double s = 0;|		if (true) {
			double s = 0;'
	'the rotary gradient turned the forward way|rope.cuh|		s *= sign;|		s *= 1.0;'
	'grouped query heads reading the wrong key head|attention.cuh|	i64 hd = C / NH, g = h / (NH / KV), W = C + 2 * KV * hd;|	i64 hd = C / NH, g = h % KV, W = C + 2 * KV * hd;'
	'flash backward without the D term|flash.cuh|			double ds = p * (fl_dot<T>(d, qkv, qdt, row + C + (KV + g) * hd, hd, lane) - Dr);|			double ds = p * fl_dot<T>(d, qkv, qdt, row + C + (KV + g) * hd, hd, lane);'
	'flash key rows starting one query row late|flash.cuh|			for (i64 t = s; t < Tn; t++) {|			for (i64 t = s + 1; t < Tn; t++) {'
	'a group of key gradients stored to the value columns|attention.cuh|		st(dqkv, ddt, r * W + off + c, ld<T>(acc, adt, k));|		st(dqkv, ddt, r * W + (W - n) + c, ld<T>(acc, adt, k));'
	'SwiGLU gate gradient without the SiLU derivative term|swiglu.cuh|(T)(d * u * s * (1.0 + g * (1.0 - s))));|(T)(d * u * s));'
	'a warp sum one shuffle short|common.cuh|	for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);|	for (int o = 16; o > 1; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);'
)

caught=0
for m in "${mutants[@]}"; do
	name=${m%%|*}
	rest=${m#*|}
	file=${rest%%|*}
	rest=${rest#*|}
	from=${rest%%|*}
	to=${rest#*|}
	dir="$tmp/$caught"
	mkdir -p "$dir"
	cp -r cuda/gpu/kernels "$dir/kernels"
	FROM=$from TO=$to perl -e 'local $/; my $s = <STDIN>; my $i = index($s, $ENV{FROM}); exit 1 if $i < 0;
		substr($s, $i, length $ENV{FROM}) = $ENV{TO}; print $s' <"cuda/gpu/kernels/$file" >"$dir/kernels/$file" ||
		{ echo "mutant '$name': its line is not in kernels/$file"; exit 1; }
	$cxx -DEMU_KERNELS="\"$dir/kernels/kernels.cu\"" -c cuda/gpu/emu/emu_kernels.cpp -o "$dir/k.o" || exit 1
	$cxx -shared -o "$dir/libcuda.so.1" "$emu/fakecuda.o" "$dir/k.o" "$emu/emu_shared.o" -ldl || exit 1
	cp "$emu/libcublas.so.13" "$dir/"
	(cd cuda/gpu && LD_LIBRARY_PATH="$dir" ../../bin/cuda-tests/gpu.test -test.run TestConformanceCUDA -test.v) >"$dir/log" 2>&1
	rc=$?
	fails=$(grep -c -- '--- FAIL' "$dir/log")
	if [ $rc = 0 ] || [ "$fails" = 0 ]; then
		echo "mutant '$name': the emulated conformance suite passed, so it cannot catch this"
		exit 1
	fi
	echo "mutant '$name': caught ($fails failures, e.g. $(grep -- '--- FAIL' "$dir/log" | sed -n 2p | sed 's/^ *--- FAIL: //; s/ (.*//'))"
	caught=$((caught + 1))
done
echo "emu-mutants: all $caught mutants fail the emulated conformance suite"
