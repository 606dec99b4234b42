#!/usr/bin/env bash
# Builds trainmem's web page into DIR (default bin/web): the static files of
# cmd/trainmem/web, trainmem compiled to WebAssembly (the command line
# itself: the page runs its estimate, simulate and fit), gzip'd beside it,
# and Go's wasm_exec.js that loads it. Any static host serves DIR as it is
# (GitHub Pages, or `trainmem web --dir DIR`); `make web` runs this.
#
# With BINARY, it then builds trainmem for this machine into BINARY with
# the page inside (`trainmem web` serves it; `make build` runs this): the
# WebAssembly and wasm_exec.js join cmd/trainmem/web's embedded files by
# go build -overlay, so the source tree holds no build output.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bin/web}
bin=${2:-}
GO=${GO:-go}
root=$("$GO" env GOROOT)
exec_js="$root/lib/wasm/wasm_exec.js"
[ -f "$exec_js" ] || exec_js="$root/misc/wasm/wasm_exec.js" # Go before 1.24
mkdir -p "$out"
tmp=$(mktemp -d "$out/.web.tmp-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
GOOS=js GOARCH=wasm "$GO" build -trimpath -ldflags=-s -o "$tmp/trainmem.wasm" ./cmd/trainmem
gzip -9 -n -c "$tmp/trainmem.wasm" > "$tmp/trainmem.wasm.gz"
mv "$tmp/trainmem.wasm" "$tmp/trainmem.wasm.gz" "$out/"
cp "$exec_js" "$out/wasm_exec.js"
cp cmd/trainmem/web/index.html cmd/trainmem/web/app.js cmd/trainmem/web/worker.js cmd/trainmem/web/sw.js cmd/trainmem/web/style.css "$out/"
echo "web: $out ($(du -sh "$out/trainmem.wasm" | cut -f1) of WebAssembly, $(wc -c < "$out/trainmem.wasm.gz") bytes gzip'd)"
if [ -n "$bin" ]; then
	abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
	src=$(abs cmd/trainmem/web)
	printf '{"Replace":{"%s":"%s","%s":"%s"}}\n' \
		"$src/trainmem.wasm.gz" "$(abs "$out/trainmem.wasm.gz")" \
		"$src/wasm_exec.js" "$(abs "$out/wasm_exec.js")" > "$tmp/overlay.json"
	"$GO" build -overlay "$tmp/overlay.json" -o "$bin" ./cmd/trainmem
	echo "web: $bin serves the page (trainmem web)"
fi
