// The page's worker: trainmem itself, compiled to WebAssembly
// (GOOS=js GOARCH=wasm go build ./cmd/trainmem), run once a request with
// the request's arguments, as the command line runs it, its standard
// output and error captured. The page never freezes: the work is here.
"use strict";

importScripts("wasm_exec.js");

const decoder = new TextDecoder("utf-8");
let captured = null; // {1: stdout, 2: stderr} of the run in progress

// wasm_exec.js's file system writes to the console; trainmem's output
// goes to the run's capture instead.
globalThis.fs.writeSync = function (fd, buf) {
	if (captured) {
		captured[fd] = (captured[fd] || "") + decoder.decode(buf);
	}
	return buf.length;
};

const module = WebAssembly.compileStreaming(fetch("trainmem.wasm"));

// One run at a time: requests queue in order.
let queue = Promise.resolve();

async function run(args) {
	const go = new Go();
	go.argv = ["trainmem", ...args];
	go.env = {};
	let code = 0;
	go.exit = (c) => { code = c; };
	const instance = await WebAssembly.instantiate(await module, go.importObject);
	captured = { 1: "", 2: "" };
	const started = performance.now();
	await go.run(instance);
	const out = { code, stdout: captured[1], stderr: captured[2], ms: performance.now() - started };
	captured = null;
	return out;
}

onmessage = (e) => {
	const { id, args } = e.data;
	queue = queue.then(() => run(args)).then(
		(out) => postMessage({ id, ...out }),
		(err) => postMessage({ id, code: 1, stdout: "", stderr: "trainmem: " + err, ms: 0 }),
	);
};

module.then(() => postMessage({ ready: true }), (err) => postMessage({ ready: false, error: String(err) }));
