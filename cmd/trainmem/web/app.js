// The page: its controls make trainmem's command lines, the worker runs
// them (trainmem compiled to WebAssembly: the same code as the command
// line, so the same numbers), and the answers fill the table. The whole
// state lives in the URL, so a setup is shared as a link.
"use strict";

// The presets and cards trainmem knows (model.PresetNames, cuda.GPUKeys;
// TestWebLists keeps them equal).
const PRESETS = ["tiny", "tiny-llama", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "6b", "llama2-7b", "tinyllama-1.1b", "llama3-8b"];
const CARDS = ["h100", "h100-pcie", "h100-nvl", "h200", "h800", "a100", "a800", "l40s", "l4", "none"];
const DEFAULTS = { preset: "gpt2", batch: "8", seq: "1024", precision: "bf16", optimizer: "adam", checkpoint: "none", attention: "", ranks: "1", zero: "0", tp: "1", pp: "1", gpu: "h100", memory: "80" };
const CATEGORIES = ["params", "grads", "master", "adam_m", "adam_v", "frozen", "quant_state", "activations", "gathered", "temporaries", "workspace", "comm"];
const STATES = ["params", "grads", "master", "adam_m", "adam_v"];
const FORMULAS = ["zero_paper", "korthikanti", "trainmem"];

const form = document.getElementById("setup");
const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);

function fill(select, values) {
	for (const v of values) {
		const o = document.createElement("option");
		o.value = o.textContent = v;
		select.append(o);
	}
}
fill(form.elements.preset, PRESETS);
fill(form.elements.gpu, CARDS);
for (const [k, v] of Object.entries(DEFAULTS)) {
	form.elements[k].value = params.has(k) ? params.get(k) : v;
}

// state is the controls' values; args the command line of one command.
function state() {
	const s = {};
	for (const k of Object.keys(DEFAULTS)) s[k] = form.elements[k].value.trim();
	return s;
}
// A dropped Hugging Face config.json stands in for the preset: its bytes
// go to the worker as /in/config.json with every command. (It is not in
// the URL: a link carries the preset.)
let config = null; // {name, bytes}
const CONFIG = "/in/config.json";
function args(cmd, s) {
	const model = config ? ["--hf-config", CONFIG] : ["--preset", s.preset];
	const a = [cmd, ...model, "--batch", s.batch, "--seq", s.seq, "--precision", s.precision, "--optimizer", s.optimizer,
		"--checkpoint", s.checkpoint, "--ranks", s.ranks, "--zero", s.zero, "--tp", s.tp, "--pp", s.pp];
	if (s.attention) a.push("--attention", s.attention);
	if (cmd === "simulate") a.push("--gpu", s.gpu, "--memory-trace", "/out/trace", "--plot-timeline", "/out/timeline.svg");
	a.push("--format", "json");
	return a;
}
// fitArgs asks fit for the largest micro-batch in the card's memory: the
// setup but its micro-batch, over its data-parallel ranks.
function fitArgs(s) {
	const model = config ? ["--hf-config", CONFIG] : ["--preset", s.preset];
	const a = ["fit", ...model, "--seq", s.seq, "--precision", s.precision, "--optimizer", s.optimizer, "--ranks", s.ranks, "--memory", s.memory + "GB"];
	if (s.attention) a.push("--attention", s.attention);
	a.push("--format", "json");
	return a;
}
// The command line as a person runs it: files in the working directory.
function quote(a) {
	return a.map((x) => x.replace(/^\/(in|out)\//, "")).map((x) => (/^[\w.:=,-]+$/.test(x) ? x : "'" + x + "'")).join(" ");
}

// The worker, and a promise a request.
const worker = new Worker("worker.js");
let nextID = 0;
const pending = new Map();
let ready;
const readyP = new Promise((resolve, reject) => { ready = { resolve, reject }; });
worker.onmessage = (e) => {
	const m = e.data;
	if ("ready" in m) {
		m.ready ? ready.resolve() : ready.reject(new Error(m.error));
		return;
	}
	const p = pending.get(m.id);
	pending.delete(m.id);
	if (p) p(m);
};
function trainmem(a) {
	return new Promise((resolve) => {
		const id = nextID++;
		pending.set(id, resolve);
		worker.postMessage({ id, args: a, inputs: config ? { [CONFIG]: config.bytes } : {} });
	});
}

// Bytes for people: binary units, three figures.
function bytes(n) {
	if (n === null || n === undefined) return "-";
	const units = ["B", "KiB", "MiB", "GiB", "TiB"];
	let u = 0, v = n;
	while (Math.abs(v) >= 1024 && u < units.length - 1) { v /= 1024; u++; }
	return (u === 0 ? String(v) : v.toPrecision(3)) + " " + units[u];
}
function cell(tr, n, cls) {
	const td = document.createElement("td");
	td.textContent = bytes(n);
	if (n !== null && n !== undefined) {
		td.dataset.bytes = String(n);
		td.title = n.toLocaleString("en") + " bytes";
	}
	if (cls) td.className = cls;
	tr.append(td);
	return td;
}

function show(est, sim) {
	const one = !sim.ranks;
	const simCats = one ? sim.memory.peak_requested : sim.ranks[0].peak_requested;
	const peakAlloc = one ? sim.peak_allocated_bytes : sim.ranks[0].peak_allocated_bytes;
	const peakRes = one ? sim.peak_reserved_bytes : sim.ranks[0].peak_reserved_bytes;
	const tbody = $("categories").tBodies[0];
	tbody.replaceChildren();
	const most = Math.max(1, ...CATEGORIES.map((c) => simCats[c] || 0));
	for (const c of CATEGORIES) {
		const simulated = simCats[c] || 0;
		let formula = null;
		if (STATES.includes(c)) formula = est.model_states[c];
		if (c === "gathered") formula = est.gathered;
		if (simulated === 0 && !formula) continue;
		const tr = document.createElement("tr");
		tr.dataset.category = c;
		const th = document.createElement("th");
		th.scope = "row";
		th.textContent = c;
		tr.append(th);
		for (const f of FORMULAS) cell(tr, c === "activations" ? est.activations[f] : formula, "formula-" + f);
		cell(tr, simulated, "simulated");
		const bar = document.createElement("td");
		bar.className = "bar";
		const span = document.createElement("span");
		span.style.width = (100 * simulated / most).toFixed(1) + "%";
		bar.append(span);
		tr.append(bar);
		tbody.append(tr);
	}
	const tr = document.createElement("tr");
	tr.className = "total";
	tr.dataset.category = "total";
	const th = document.createElement("th");
	th.scope = "row";
	th.textContent = "total peak (allocated)";
	tr.append(th);
	for (const f of FORMULAS) cell(tr, est.totals[f], "formula-" + f);
	cell(tr, peakAlloc, "simulated");
	tr.append(document.createElement("td"));
	tbody.append(tr);
	const pol = $("policies").tBodies[0];
	pol.replaceChildren();
	for (const p of est.checkpoint_policies || []) {
		const tr = document.createElement("tr");
		tr.dataset.policy = p.policy;
		if (p.policy === est.setup.checkpoint) tr.className = "chosen";
		const th = document.createElement("th");
		th.scope = "row";
		th.textContent = p.policy;
		tr.append(th);
		for (const f of FORMULAS) cell(tr, p.activations[f], "formula-" + f);
		const td = document.createElement("td");
		td.textContent = (100 * p.recompute_fraction).toFixed(1) + "%";
		td.dataset.fraction = String(p.recompute_fraction);
		tr.append(td);
		pol.append(tr);
	}
	let head = `Simulated peak: ${bytes(peakAlloc)} allocated, ${bytes(peakRes)} reserved by the caching allocator.`;
	const p = sim.predicted;
	const ms = p ? (one ? p.step_ms : sim.ranks[0].timing && sim.ranks[0].timing.step_ms) : null;
	if (p && ms) head += ` Predicted step on ${p.gpu}: ${ms < 1000 ? ms.toPrecision(3) + " ms" : (ms / 1000).toPrecision(3) + " s"}` + (one && p.mfu ? `, MFU ${(100 * p.mfu).toFixed(0)}%.` : ".");
	$("headline").textContent = head;
	$("headline").dataset.peakAllocated = String(peakAlloc);
	if (ms) $("headline").dataset.stepMs = String(ms);
}

// offer shows the simulation's timeline and links its files and the
// answers' JSON for download (rank 0's traces over ranks).
let urls = [];
async function offer(est, sim, files, one) {
	for (const u of urls) URL.revokeObjectURL(u);
	urls = [];
	const blob = (bytes, type) => {
		const u = URL.createObjectURL(new Blob([bytes], { type }));
		urls.push(u);
		return u;
	};
	const img = $("timeline").querySelector("img");
	const svg = files["/out/timeline.svg"];
	$("timeline").hidden = !svg;
	if (svg) {
		img.src = blob(svg, "image/svg+xml");
		await img.decode().catch(() => {});
	}
	const trace = one ? "/out/trace" : "/out/trace.rank0";
	const list = $("downloads");
	list.replaceChildren();
	for (const [name, bytes, type, what] of [
		["snapshot.pickle", files[trace + ".pickle"], "application/octet-stream", "PyTorch's memory snapshot of the simulated step: open it at pytorch.org/memory_viz"],
		["trace.json", files[trace + ".json"], "application/json", "the Chrome trace of the simulated step: open it at ui.perfetto.dev"],
		["estimate.json", est, "application/json", "trainmem estimate --format json"],
		["simulate.json", sim, "application/json", "trainmem simulate --format json"],
	]) {
		if (!bytes) continue;
		const li = document.createElement("li");
		const a = document.createElement("a");
		a.href = blob(bytes, type);
		a.download = name;
		a.textContent = name;
		li.append(a, ": " + what + (one || !name.startsWith("s") && !name.startsWith("t") ? "" : " (rank 0's)"));
		list.append(li);
	}
}

// update runs the two commands of the controls' setup and shows them; a
// newer update makes an older one's answer stale.
let generation = 0;
async function update() {
	const g = ++generation;
	const s = state();
	const q = new URLSearchParams();
	for (const [k, v] of Object.entries(s)) if (v !== DEFAULTS[k]) q.set(k, v);
	for (const k of ["report", "drive"]) if (params.has(k)) q.set(k, params.get(k));
	history.replaceState(null, "", q.toString() ? "?" + q : location.pathname);
	const cmds = [args("estimate", s), args("simulate", s)];
	$("commands").textContent = [...cmds, fitArgs(s)].map((a) => "trainmem " + quote(a)).join("\n");
	$("status").textContent = "computing…";
	document.body.dataset.state = "computing";
	const started = performance.now();
	await readyP;
	const [est, sim] = await Promise.all(cmds.map(trainmem));
	if (g !== generation) return null;
	const failed = [est, sim].find((r) => r.code !== 0);
	const err = $("error");
	if (failed) {
		err.textContent = failed.stderr.trim();
		err.hidden = false;
		$("answer").hidden = true;
		$("status").textContent = "";
		document.body.dataset.state = "error";
		return { state: s, code: failed.code, stderr: failed.stderr };
	}
	err.hidden = true;
	const e = JSON.parse(est.stdout), m = JSON.parse(sim.stdout);
	show(e, m);
	await offer(est.stdout, sim.stdout, sim.files, !m.ranks);
	$("answer").hidden = false;
	const took = performance.now() - started;
	$("status").textContent = `computed in ${(took / 1000).toFixed(2)} s`;
	// fit simulates many micro-batches: the answer above comes first.
	$("fitstatus").textContent = "fitting…";
	$("fit").hidden = true;
	const fit = await trainmem(fitArgs(s));
	if (g !== generation) return null;
	showFit(fit);
	document.body.dataset.state = "ready";
	return { state: s, code: 0, estimate: est.stdout, simulate: sim.stdout, fit: fit.stdout, fitCode: fit.code, ms: took };
}

// showFit fills the fit table, or says why fit gave no answer.
function showFit(fit) {
	const body = $("fit").tBodies[0];
	body.replaceChildren();
	if (fit.code !== 0) {
		$("fitstatus").textContent = fit.stderr.trim().split("\n").pop();
		return;
	}
	const f = JSON.parse(fit.stdout);
	for (const r of f.results) {
		const tr = document.createElement("tr");
		const th = document.createElement("th");
		th.scope = "row";
		th.textContent = r.checkpoint;
		tr.append(th);
		for (const v of [r.zero, r.max_micro_batch, r.simulated_max_micro_batch]) {
			const td = document.createElement("td");
			td.textContent = v === 0 ? "none fits" : String(v);
			tr.append(td);
		}
		body.append(tr);
	}
	$("fitstatus").textContent = `in ${bytes(f.memory_bytes)} (${f.memory_bytes.toLocaleString("en")} bytes) a rank:`;
	$("fit").hidden = false;
}

// Changes recompute, the typing in a number box once it pauses.
let timer, lastRun;
form.addEventListener("input", (e) => {
	if (e.target.type === "file") return; // its change says when it is read
	clearTimeout(timer);
	timer = setTimeout(() => { lastRun = run(); }, 300);
});
form.addEventListener("change", () => { clearTimeout(timer); lastRun = run(); });
form.addEventListener("submit", (e) => e.preventDefault());

// A config.json, chosen or dropped on the page, replaces the preset until
// the preset is chosen again.
async function useConfig(file) {
	config = { name: file.name, bytes: new Uint8Array(await file.arrayBuffer()) };
	$("dropnote").textContent = `The model is ${file.name}'s (a Hugging Face config.json), not the preset's; a link to this page carries the preset, not the file.`;
	$("dropnote").hidden = false;
	return run();
}
form.elements.config.addEventListener("change", (e) => {
	e.stopPropagation();
	if (e.target.files.length) lastRun = useConfig(e.target.files[0]);
});
form.elements.preset.addEventListener("change", () => {
	config = null;
	form.elements.config.value = "";
	$("dropnote").hidden = true;
});
document.addEventListener("dragover", (e) => { e.preventDefault(); document.body.classList.add("dragging"); });
document.addEventListener("dragleave", () => document.body.classList.remove("dragging"));
document.addEventListener("drop", (e) => {
	e.preventDefault();
	document.body.classList.remove("dragging");
	if (e.dataTransfer.files.length) lastRun = useConfig(e.dataTransfer.files[0]);
});

// With ?report=1 (the tests'), each finished update is posted back to the
// page's server, with the rows the page shows.
async function run() {
	const r = await update().catch((err) => ({ code: 1, stderr: String(err) }));
	if (r && r.code === 1 && !r.state) console.error(r.stderr);
	if (r && params.get("report") === "1") {
		r.rows = [...document.querySelectorAll("#categories tbody tr")].map((tr) => ({
			category: tr.dataset.category,
			cells: [...tr.querySelectorAll("td[data-bytes]")].map((td) => [td.className, Number(td.dataset.bytes)]),
		}));
		r.url = location.search;
		r.config = config ? config.name : "";
		r.policies = [...document.querySelectorAll("#policies tbody tr")].map((tr) => ({
			policy: tr.dataset.policy, chosen: tr.className === "chosen",
			trainmem: Number(tr.querySelector("td.formula-trainmem").dataset.bytes),
		}));
		r.timeline = !$("timeline").hidden && $("timeline").querySelector("img").complete && $("timeline").querySelector("img").naturalWidth > 0;
		r.downloads = [...document.querySelectorAll("#downloads a")].map((a) => a.download);
		r.sinceLoad = performance.now();
		r.error = $("error").hidden ? "" : $("error").textContent;
		await fetch("report", { method: "POST", body: JSON.stringify(r) });
	}
	return r;
}

// ?drive=[{"batch":"4"},…] (the tests'): set the controls one step at a
// time, as a person would, each change dispatched as theirs is.
async function drive() {
	await run();
	if (!params.has("drive")) return;
	for (const step of JSON.parse(params.get("drive"))) {
		if ("config" in step) {
			// A file dropped on the page, as a person's drop delivers it.
			const dt = new DataTransfer();
			dt.items.add(new File([step.config], "config.json", { type: "application/json" }));
			document.dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true }));
			await lastRun;
			continue;
		}
		for (const [k, v] of Object.entries(step)) {
			form.elements[k].value = v;
			form.elements[k].dispatchEvent(new Event("change", { bubbles: true }));
		}
		await lastRun;
	}
	if (params.get("report") === "1") await fetch("report", { method: "POST", body: JSON.stringify({ done: true }) });
}
drive();
