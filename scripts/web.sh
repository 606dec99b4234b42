#!/usr/bin/env bash
# Builds trainmem's web page into DIR (default bin/web): the static files of
# cmd/trainmem/web, trainmem compiled to WebAssembly (the command line
# itself: the page runs its estimate and simulate) and Go's wasm_exec.js
# that loads it. Any static host serves DIR as it is (GitHub Pages, or
# `python3 -m http.server -d DIR`); `make web` runs this.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bin/web}
GO=${GO:-go}
root=$("$GO" env GOROOT)
exec_js="$root/lib/wasm/wasm_exec.js"
[ -f "$exec_js" ] || exec_js="$root/misc/wasm/wasm_exec.js" # Go before 1.24
mkdir -p "$out"
tmp=$(mktemp "$out/.trainmem.wasm.tmp-XXXXXX")
trap 'rm -f "$tmp"' EXIT
GOOS=js GOARCH=wasm "$GO" build -trimpath -ldflags=-s -o "$tmp" ./cmd/trainmem
mv "$tmp" "$out/trainmem.wasm"
cp "$exec_js" "$out/wasm_exec.js"
cp cmd/trainmem/web/index.html cmd/trainmem/web/app.js cmd/trainmem/web/worker.js cmd/trainmem/web/style.css "$out/"
echo "web: $out ($(du -sh "$out/trainmem.wasm" | cut -f1) of WebAssembly, $(gzip -9 -c "$out/trainmem.wasm" | wc -c) bytes gzipped)"
