#!/usr/bin/env bash
# install-cuda-kit.sh: the driver-free CUDA 11.8 build kit, for building
# trainmem's CUDA device on a machine without a GPU (design.md).
#
# It downloads Debian 12's nvidia-cuda-toolkit (nvcc, ptxas, cicc) and
# nvidia-cuda-dev (headers and link stubs) from the non-free component,
# unpacks them into ./.cudakit (gitignored) without installing them, and
# installs g++-11 (nvcc 11.8 refuses gcc 12). No driver package is
# installed: binaries built with the kit load libcuda.so.1 and cuBLAS at
# run time, on the GPU machine.
#
# Idempotent: a complete kit is left alone. It ends by printing the
# environment to build with; `eval "$(scripts/install-cuda-kit.sh --env)"`
# sets it in the calling shell.
#
# Usage: scripts/install-cuda-kit.sh [--env]   (KIT=dir to unpack elsewhere)
set -euo pipefail
cd "$(dirname "$0")/.."
KIT=${KIT:-$PWD/.cudakit}
case "$KIT" in /*) ;; *) KIT=$PWD/$KIT ;; esac
ENV_ONLY=${1:-}

say() { if [ "$ENV_ONLY" != --env ]; then echo "cuda-kit: $*" >&2; fi; }

as_root() {
	if [ "$(id -u)" -eq 0 ]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
		sudo -n "$@"
	else
		echo "cuda-kit: need root (or password-less sudo) for: $*" >&2
		return 1
	fi
}

# The marker is written last: its presence means every step finished.
MARK="$KIT/.complete-11.8"

if [ ! -f "$MARK" ] || ! command -v g++-11 >/dev/null 2>&1; then
	command -v apt-get >/dev/null || { echo "cuda-kit: needs Debian's apt-get (Debian 12 bookworm)" >&2; exit 1; }
	. /etc/os-release
	if [ "${VERSION_CODENAME:-}" != bookworm ]; then
		echo "cuda-kit: warning: made for Debian 12 (bookworm), this is ${PRETTY_NAME:-unknown}" >&2
	fi
	# Debian's contrib and non-free components, for the suites the machine
	# already uses, in a sources file of our own.
	SRC=/etc/apt/sources.list.d/trainmem-cuda-kit.sources
	if [ ! -f "$SRC" ]; then
		say "adding contrib non-free (bookworm, bookworm-updates) in $SRC"
		as_root tee "$SRC" >/dev/null <<'SOURCES'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: contrib non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
	fi
	say "apt-get update"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	if ! command -v g++-11 >/dev/null 2>&1; then
		say "installing g++-11 (the host compiler nvcc 11.8 accepts)"
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++-11 >/dev/null
	fi
fi

if [ ! -f "$MARK" ]; then
	DL=$(mktemp -d)
	trap 'rm -rf "$DL"' EXIT
	chmod 777 "$DL" # apt-get download runs as _apt where it can
	say "downloading nvidia-cuda-toolkit, nvidia-cuda-dev and libnvvm4 (about 870 MB)"
	(cd "$DL" && apt-get download -q nvidia-cuda-toolkit nvidia-cuda-dev libnvvm4 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2 || true)
	for p in nvidia-cuda-toolkit nvidia-cuda-dev libnvvm4; do
		ls "$DL"/${p}_*.deb >/dev/null 2>&1 || { echo "cuda-kit: apt-get download $p failed" >&2; exit 1; }
	done
	rm -rf "$KIT"
	mkdir -p "$KIT"
	say "unpacking into $KIT"
	dpkg-deb -x "$DL"/nvidia-cuda-toolkit_*.deb "$KIT"
	dpkg-deb -x "$DL"/libnvvm4_*.deb "$KIT"
	# Of the 770 MB of libraries in nvidia-cuda-dev, only the headers and
	# the link stubs: the real libraries come from the GPU machine.
	dpkg-deb --fsys-tarfile "$DL"/nvidia-cuda-dev_*.deb |
		tar -x -C "$KIT" ./usr/include ./usr/lib/x86_64-linux-gnu/stubs
	# Debian's nvcc reads /etc/nvcc.profile through a symlink; the kit's
	# profile finds everything relative to nvcc itself.
	BIN="$KIT/usr/lib/nvidia-cuda-toolkit/bin"
	rm -f "$BIN/nvcc.profile"
	cat >"$BIN/nvcc.profile" <<'PROFILE'
NVVMIR_LIBRARY_DIR = $(_HERE_)/../libdevice
PATH		+= $(_HERE_):$(_HERE_)/../../../bin:
INCLUDES	+= "-I$(_HERE_)/../../../include" $(_SPACE_)
LIBRARIES	=+ $(_SPACE_) "-L$(_HERE_)/../../x86_64-linux-gnu/stubs"
PROFILE
	# The kit's own nvcc, not Debian's wrapper (which execs /usr/lib/...).
	mkdir -p "$KIT/bin"
	# (A wrapper, not a symlink: nvcc looks for nvcc.profile beside the
	# path it was started by.)
	printf '#!/bin/sh\nexec "$(dirname "$0")/../usr/lib/nvidia-cuda-toolkit/bin/nvcc" "$@"\n' >"$KIT/bin/nvcc"
	chmod +x "$KIT/bin/nvcc"
	ln -sf ../usr/bin/ptxas "$KIT/bin/ptxas"
	# Check it: a kernel with fp16 and bf16 to PTX for both targets, and
	# ptxas on the result.
	cat >"$DL/probe.cu" <<'CU'
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void probe(float *x, const __half *h, const __nv_bfloat16 *b) {
	x[threadIdx.x] = __half2float(h[threadIdx.x]) + __bfloat162float(b[threadIdx.x]);
}
CU
	for a in 80 90; do
		"$KIT/bin/nvcc" -ccbin g++-11 -ptx -arch=compute_$a -o "$DL/probe$a.ptx" "$DL/probe.cu"
		"$KIT/bin/ptxas" -arch=sm_$a -o /dev/null "$DL/probe$a.ptx"
	done
	"$KIT/bin/nvcc" --version | tail -2 >"$MARK"
	say "ok: $(tail -1 "$MARK")"
fi

cat <<ENV
export CUDAKIT='$KIT'
export PATH='$KIT/bin':"\$PATH"
export CGO_CFLAGS='-I$KIT/usr/include'
export CGO_LDFLAGS='-Wl,--as-needed -L$KIT/usr/lib/x86_64-linux-gnu/stubs'
export NVCC_CCBIN=g++-11
ENV
