// The page: its controls make trainmem's command lines, the worker runs
// them (trainmem compiled to WebAssembly: the same code as the command
// line, so the same numbers), and the answers fill the table. The whole
// state lives in the URL, so a setup is shared as a link.
"use strict";

// The presets and cards trainmem knows (model.PresetNames, cuda.GPUKeys;
// TestWebLists keeps them equal).
const PRESETS = ["tiny", "tiny-llama", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "6b", "llama2-7b", "tinyllama-1.1b", "llama3-8b"];
const CARDS = ["h100", "h100-pcie", "h100-nvl", "h200", "h800", "a100", "a800", "l40s", "l4", "none"];
const DEFAULTS = { preset: "gpt2", batch: "8", seq: "1024", precision: "bf16", optimizer: "adam", checkpoint: "none", attention: "", method: "full", rank: "16", targets: "", ranks: "1", zero: "0", tp: "1", pp: "1", gpu: "h100", memory: "80" };
const CATEGORIES = ["params", "grads", "master", "adam_m", "adam_v", "frozen", "quant_state", "activations", "gathered", "temporaries", "workspace", "comm"];
const STATES = ["params", "grads", "master", "adam_m", "adam_v", "frozen", "quant_state"];
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
// The micro-batch has a slider beside its box: moving it sets the box (and
// the answer follows as it moves), typing in the box moves it.
const slider = form.elements.batchslider;
slider.value = form.elements.batch.value;
slider.addEventListener("input", () => { form.elements.batch.value = slider.value; });
form.elements.batch.addEventListener("input", () => { slider.value = form.elements.batch.value; });

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
function args(cmd, s, files = true) {
	const model = config ? ["--hf-config", CONFIG] : ["--preset", s.preset];
	const a = [cmd, ...model, "--batch", s.batch, "--seq", s.seq, "--precision", s.precision, "--optimizer", s.optimizer,
		"--checkpoint", s.checkpoint, "--ranks", s.ranks, "--zero", s.zero, "--tp", s.tp, "--pp", s.pp];
	if (s.attention) a.push("--attention", s.attention);
	a.push(...adapters(s));
	if (cmd === "simulate") a.push("--gpu", s.gpu);
	if (cmd === "simulate" && files) a.push("--memory-trace", "/out/trace", "--plot-timeline", "/out/timeline.svg");
	a.push("--format", "json");
	return a;
}
// adapters are the fine-tuning flags: LoRA's rank and targets, and QLoRA's
// 4-bit base.
function adapters(s) {
	if (s.method === "full") return [];
	const a = ["--lora-rank", s.rank];
	if (s.targets) a.push("--lora-targets", s.targets);
	if (s.method === "qlora") a.push("--quantize", "nf4");
	return a;
}
// fitArgs asks fit for the largest micro-batch in the card's memory: the
// setup but its micro-batch, over its ranks and layout, for each
// checkpointing policy and ZeRO stage; fine-tuning, for the method with and
// without full checkpointing, and Adam's states in 32 and 8 bits.
function fitArgs(s) {
	const model = config ? ["--hf-config", CONFIG] : ["--preset", s.preset];
	const a = ["fit", ...model, "--seq", s.seq, "--precision", s.precision, "--optimizer", s.optimizer, "--ranks", s.ranks, "--tp", s.tp, "--pp", s.pp, "--memory", s.memory + "GB"];
	if (s.attention) a.push("--attention", s.attention);
	if (s.method !== "full") {
		a.push("--method", s.method, "--lora-rank", s.rank);
		if (s.targets) a.push("--lora-targets", s.targets);
	}
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
	if ("loaded" in m) {
		// The WebAssembly arriving: a share of it when its size is known.
		const mb = (n) => (n / 1e6).toFixed(1) + " MB";
		progress(m.total ? m.loaded / m.total : null, `loading trainmem: ${mb(m.loaded)}` + (m.total ? ` of ${mb(m.total)}` : ""));
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

// show fills the answer: the categories, the headline against the card's
// memory, the formulas' sources and the checkpointing policies (their
// simulated peaks come later: see policyPeaks).
// row is a table row headed by label (a row header cell).
function row(label) {
	const tr = document.createElement("tr");
	const th = document.createElement("th");
	th.scope = "row";
	th.textContent = label;
	tr.append(th);
	return tr;
}

function show(est, sim, s) {
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
		const tr = row(c);
		tr.dataset.category = c;
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
	const tr = row("total peak (allocated)");
	tr.className = "total";
	tr.dataset.category = "total";
	for (const f of FORMULAS) cell(tr, est.totals[f], "formula-" + f);
	cell(tr, peakAlloc, "simulated");
	tr.append(document.createElement("td"));
	tbody.append(tr);
	// What the caching allocator holds beyond the allocated peak: the
	// formulas have no reserve.
	for (const [category, label, n] of [["reserved", "reserved by the allocator", peakRes], ["unallocated", "of it not allocated at the peak (cache, fragmentation)", peakRes - peakAlloc]]) {
		const r = row(label);
		r.dataset.category = category;
		for (const f of FORMULAS) cell(r, null, "formula-" + f);
		cell(r, n, "simulated");
		r.append(document.createElement("td"));
		tbody.append(r);
	}
	// Each formula's source, on its column and in full below the table.
	const sources = $("sources");
	sources.replaceChildren();
	for (const [name, key] of [...FORMULAS.map((f) => [f, f]), ["model states", "model_states"]]) {
		const src = est.sources[key];
		if (!src) continue;
		const head = $("categories").tHead.querySelector(`th[data-formula="${key}"]`);
		if (head) head.title = src;
		const dt = document.createElement("dt");
		dt.textContent = name;
		const dd = document.createElement("dd");
		dd.textContent = src;
		sources.append(dt, dd);
	}
	const pol = $("policies").tBodies[0];
	pol.replaceChildren();
	for (const p of est.checkpoint_policies || []) {
		const tr = row(p.policy);
		tr.dataset.policy = p.policy;
		if (p.policy === est.setup.checkpoint) tr.className = "chosen";
		for (const f of FORMULAS) cell(tr, p.activations[f], "formula-" + f);
		const peak = cell(tr, p.policy === est.setup.checkpoint ? peakAlloc : null, "simulated-peak");
		if (p.policy !== est.setup.checkpoint) peak.textContent = "…";
		const td = document.createElement("td");
		td.textContent = (100 * p.recompute_fraction).toFixed(1) + "%";
		td.dataset.fraction = String(p.recompute_fraction);
		tr.append(td);
		pol.append(tr);
	}
	// Will it fit? The simulated peak against the card's memory (GB, as
	// the cards are sold).
	const card = Number(s.memory) * 1e9;
	let head = `Simulated peak: ${bytes(peakAlloc)} allocated, ${bytes(peakRes)} reserved by the caching allocator`;
	if (card > 0) {
		const fits = peakRes <= card;
		head += fits ? `: it fits in the card's ${s.memory} GB, ${bytes(card - peakRes)} to spare.` : `: it does not fit in the card's ${s.memory} GB, ${bytes(peakRes - card)} over.`;
		$("headline").className = fits ? "fits" : "over";
	} else head += ".";
	const p = sim.predicted;
	const ms = p ? (one ? p.step_ms : sim.ranks[0].timing && sim.ranks[0].timing.step_ms) : null;
	if (p && ms) head += ` Predicted step on ${p.gpu}: ${ms < 1000 ? ms.toPrecision(3) + " ms" : (ms / 1000).toPrecision(3) + " s"}` + (one && p.mfu ? `, MFU ${(100 * p.mfu).toFixed(0)}%.` : ".");
	$("headline").textContent = head;
	$("headline").dataset.peakAllocated = String(peakAlloc);
	if (ms) $("headline").dataset.stepMs = String(ms);
}

// offer shows the simulation's timeline and links its files and the
// answers' JSON for download (rank 0's traces over ranks); more adds one
// (fit's, when it comes).
let urls = [];
// blobURL is a URL of bytes, revoked at the next answer.
function blobURL(bytes, type) {
	const u = URL.createObjectURL(new Blob([bytes], { type }));
	urls.push(u);
	return u;
}
function link(name, bytes, type, what) {
	const u = blobURL(bytes, type);
	const li = document.createElement("li");
	const a = document.createElement("a");
	a.href = u;
	a.download = name;
	a.textContent = name;
	li.append(a, ": " + what);
	$("downloads").append(li);
}
async function offer(est, sim, files, one) {
	for (const u of urls) URL.revokeObjectURL(u);
	urls = [];
	$("downloads").replaceChildren();
	const img = $("timeline").querySelector("img");
	const svg = files["/out/timeline.svg"];
	$("timeline").hidden = !svg;
	if (svg) {
		img.src = blobURL(svg, "image/svg+xml");
		await img.decode().catch(() => {});
	}
	const trace = one ? "/out/trace" : "/out/trace.rank0";
	const whose = one ? "" : " (rank 0's)";
	for (const [name, bytes, type, what] of [
		["snapshot.pickle", files[trace + ".pickle"], "application/octet-stream", "PyTorch's memory snapshot of the simulated step: open it at pytorch.org/memory_viz" + whose],
		["trace.json", files[trace + ".json"], "application/json", "the Chrome trace of the simulated step: open it at ui.perfetto.dev" + whose],
		["estimate.json", est, "application/json", "trainmem estimate --format json"],
		["simulate.json", sim, "application/json", "trainmem simulate --format json"],
	]) {
		if (bytes) link(name, bytes, type, what);
	}
}

// progress shows how far the work is: a share of it (0 to 1), or null for
// work whose length is not known; and what is being done.
function progress(share, text) {
	const bar = $("progress");
	bar.hidden = false;
	if (share === null) bar.removeAttribute("value");
	else bar.value = share;
	$("status").textContent = text;
}
function idle(text) {
	$("progress").hidden = true;
	$("status").textContent = text;
}

// update runs the commands of the controls' setup and shows their answers
// as they come: estimate and simulate, then fit, then each other
// checkpointing policy's simulated peak. A newer update makes an older
// one's answer stale. The page's body says where it is (data-state:
// computing, ready or error; data-update the latest update's number,
// data-done the last one finished; data-answered and data-took when the
// latest answer showed and how long it took, in ms).
let generation = 0;
const body = document.body;
async function update() {
	const g = ++generation;
	body.dataset.update = String(g);
	body.dataset.state = "computing";
	const s = state();
	const q = new URLSearchParams();
	for (const [k, v] of Object.entries(s)) if (v !== DEFAULTS[k]) q.set(k, v);
	history.replaceState(null, "", q.toString() ? "?" + q : location.pathname);
	const cmds = [args("estimate", s), args("simulate", s)];
	$("commands").textContent = [...cmds, fitArgs(s)].map((a) => "trainmem " + quote(a)).join("\n");
	const started = performance.now();
	await readyP;
	progress(null, "computing the estimate and the simulation…");
	const [est, sim] = await Promise.all(cmds.map(trainmem));
	if (g !== generation) return;
	const failed = [est, sim].find((r) => r.code !== 0);
	const err = $("error");
	if (failed) {
		err.textContent = failed.stderr.trim();
		err.hidden = false;
		$("answer").hidden = true;
		idle("");
		finish(g, "error");
		return;
	}
	err.hidden = true;
	const e = JSON.parse(est.stdout), m = JSON.parse(sim.stdout);
	show(e, m, s);
	await offer(est.stdout, sim.stdout, sim.files, !m.ranks);
	$("answer").hidden = false;
	const took = performance.now() - started;
	// When the answer showed (ms since the page began loading) and how long
	// it took; fit and the policies' peaks follow.
	body.dataset.answered = performance.now().toFixed(0);
	body.dataset.took = took.toFixed(0);
	// fit simulates many micro-batches: the answer above comes first.
	$("fit").hidden = true;
	$("fitstatus").textContent = "";
	progress(null, `computed in ${(took / 1000).toFixed(2)} s; fitting the card…`);
	const fit = await trainmem(fitArgs(s));
	if (g !== generation) return;
	const fitted = showFit(fit);
	$("ranks").hidden = true;
	// Nothing fits at the setup's ranks (every weight trained): then the
	// other question, how many ranks would hold this batch?
	if (s.method === "full" && fitted && fitted.results.every((r) => r.simulated_max_micro_batch === 0 && r.max_micro_batch === 0)) {
		progress(null, "nothing fits at these ranks: finding the fewest ranks that hold the micro-batch…");
		const few = await trainmem([...fitArgs(s), "--batch", s.batch]);
		if (g !== generation) return;
		showRanks(few);
	}
	if (!(await policyPeaks(g, s, e))) return;
	idle(`computed in ${(took / 1000).toFixed(2)} s`);
	finish(g, "ready");
}
function finish(g, st) {
	body.dataset.state = waiting ? "computing" : st; // a change typed meanwhile is coming
	body.dataset.done = String(g);
}

// policyPeaks simulates the setup under each other checkpointing policy
// for its peak; false when a newer update made it stale.
async function policyPeaks(g, s, est) {
	const others = (est.checkpoint_policies || []).filter((p) => p.policy !== s.checkpoint);
	for (const [i, p] of others.entries()) {
		progress(i / others.length, `simulating checkpointing ${p.policy} (${i + 1} of ${others.length})…`);
		const r = await trainmem(args("simulate", { ...s, checkpoint: p.policy }, false));
		if (g !== generation) return false;
		const td = $("policies").querySelector(`tr[data-policy="${p.policy}"] td.simulated-peak`);
		if (r.code !== 0) {
			td.textContent = "-";
			td.title = r.stderr.trim();
			continue;
		}
		const m = JSON.parse(r.stdout);
		const peak = m.ranks ? m.ranks[0].peak_allocated_bytes : m.peak_allocated_bytes;
		td.textContent = bytes(peak);
		td.dataset.bytes = String(peak);
		td.title = peak.toLocaleString("en") + " bytes";
	}
	return true;
}

// showRanks fills the table of the fewest data-parallel ranks that hold the
// micro-batch (fit --batch), or says why fit gave none.
function showRanks(few) {
	const tbody = $("ranks").tBodies[0];
	tbody.replaceChildren();
	$("ranks").hidden = false;
	if (few.code !== 0) {
		$("ranks").caption.textContent = few.stderr.trim().split("\n").pop();
		return;
	}
	const f = JSON.parse(few.stdout);
	$("ranks").caption.textContent = `Nothing fits at ${f.setup.ranks} rank${f.setup.ranks === 1 ? "" : "s"}: the fewest data-parallel ranks whose every rank holds micro-batch ${f.setup.batch} in the card's memory, for each checkpointing policy and ZeRO stage, by the formula and by the simulation (trainmem fit --batch; "none" past 1,048,576 ranks).`;
	for (const r of f.results) {
		const tr = row(r.checkpoint);
		for (const v of r.refused ? [String(r.zero), "refused", "refused"] : [String(r.zero), r.min_ranks, r.simulated_min_ranks]) {
			const td = document.createElement("td");
			td.textContent = v === 0 ? "none" : String(v);
			tr.append(td);
		}
		tbody.append(tr);
	}
	link("fit-ranks.json", few.stdout, "application/json", "trainmem fit --batch --format json");
}

// showFit fills the fit table and returns fit's answer, or says why fit
// gave none.
function showFit(fit) {
	const tbody = $("fit").tBodies[0];
	tbody.replaceChildren();
	if (fit.code !== 0) {
		$("fitstatus").textContent = fit.stderr.trim().split("\n").pop();
		return null;
	}
	const f = JSON.parse(fit.stdout);
	// Fine-tuning's answer has a row a method, checkpointing and optimizer,
	// with the smallest card that holds micro-batch 1.
	const byMethod = f.question === "max_micro_batch_by_method";
	const cols = byMethod ? ["method", "checkpointing", "optimizer", "by the formula", "simulated", "smallest card for micro-batch 1"] : ["checkpointing", "ZeRO", "by the formula", "simulated"];
	const head = document.createElement("tr");
	for (const c of cols) {
		const th = document.createElement("th");
		th.scope = "col";
		th.textContent = c;
		head.append(th);
	}
	$("fit").tHead.replaceChildren(head);
	for (const r of f.results) {
		const tr = row(byMethod ? `${r.method}${r.lora_rank ? " r " + r.lora_rank : ""}` : r.checkpoint);
		const cells = byMethod ? [r.checkpoint, r.optimizer, r.max_micro_batch, r.simulated_max_micro_batch, r.smallest_card || "none"]
			: r.refused ? [String(r.zero), "refused", "refused"] : [String(r.zero), r.max_micro_batch, r.simulated_max_micro_batch];
		for (const v of cells) {
			const td = document.createElement("td");
			td.textContent = v === 0 ? "none fits" : String(v);
			tr.append(td);
		}
		tbody.append(tr);
	}
	$("fitstatus").textContent = `in ${bytes(f.memory_bytes)} (${f.memory_bytes.toLocaleString("en")} bytes) a rank:`;
	$("fit").hidden = false;
	link("fit.json", fit.stdout, "application/json", "trainmem fit --format json");
	return f;
}

// Changes recompute, the typing in a number box once it pauses; the page
// says at once that an answer is coming.
let timer, waiting = false;
function soon(wait) {
	clearTimeout(timer);
	waiting = true;
	body.dataset.state = "computing";
	timer = setTimeout(() => {
		waiting = false;
		update().catch(failure);
	}, wait);
}
function failure(err) {
	console.error(err);
	$("error").textContent = "trainmem: " + err;
	$("error").hidden = false;
	finish(generation, "error");
}
form.addEventListener("input", (e) => {
	// A slider's answer follows it as it moves; typing waits for a pause.
	// A file's change says when it is read.
	if (e.target.type !== "file") soon(e.target.type === "range" ? 100 : 300);
});
form.addEventListener("change", (e) => {
	if (e.target.type !== "file") soon(0);
});
form.addEventListener("submit", (e) => e.preventDefault());
// LoRA's rank and targets count only when adapters are trained.
function adapterControls() {
	const full = form.elements.method.value === "full";
	form.elements.rank.disabled = full;
	form.elements.targets.disabled = full;
}
form.elements.method.addEventListener("change", adapterControls);
adapterControls();

// A config.json, chosen or dropped on the page, replaces the preset until
// the preset is chosen again.
async function useConfig(file) {
	body.dataset.state = "computing";
	config = { name: file.name, bytes: new Uint8Array(await file.arrayBuffer()) };
	$("dropnote").textContent = `The model is ${file.name}'s (a Hugging Face config.json), not the preset's; a link to this page carries the preset, not the file.`;
	$("dropnote").hidden = false;
	soon(0);
}
form.elements.config.addEventListener("change", (e) => {
	if (e.target.files.length) useConfig(e.target.files[0]).catch(failure);
});
form.elements.preset.addEventListener("change", () => {
	config = null;
	form.elements.config.value = "";
	$("dropnote").hidden = true;
});
document.addEventListener("dragover", (e) => { e.preventDefault(); body.classList.add("dragging"); });
document.addEventListener("dragleave", () => body.classList.remove("dragging"));
document.addEventListener("drop", (e) => {
	e.preventDefault();
	body.classList.remove("dragging");
	if (e.dataTransfer.files.length) useConfig(e.dataTransfer.files[0]).catch(failure);
});

update().catch(failure);

// The service worker keeps the site's files for a reload without a network
// (sw.js). Where it cannot run (a file:// page), the page works as it is.
if ("serviceWorker" in navigator) navigator.serviceWorker.register("sw.js").catch(() => {});
