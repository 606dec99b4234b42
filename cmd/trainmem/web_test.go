package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"image/color"
	"image/png"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"trainmem/cuda"
	"trainmem/model"
)

// The page's lists of presets and cards are trainmem's.
func TestWebLists(t *testing.T) {
	src, err := os.ReadFile("web/app.js")
	if err != nil {
		t.Fatal(err)
	}
	list := func(name string) []string {
		m := regexp.MustCompile(`const ` + name + ` = \[([^\]]*)\]`).FindSubmatch(src)
		if m == nil {
			t.Fatalf("app.js has no %s", name)
		}
		var out []string
		for _, q := range regexp.MustCompile(`"([^"]*)"`).FindAllSubmatch(m[1], -1) {
			out = append(out, string(q[1]))
		}
		return out
	}
	if got, want := list("PRESETS"), model.PresetNames(); !slices.Equal(got, want) {
		t.Errorf("the page's presets %v, trainmem's %v", got, want)
	}
	got, want := list("CARDS"), append(strings.Split(cuda.GPUKeys(), ", "), "none")
	if got[0] != cuda.DefaultGPU || !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))) {
		t.Errorf("the page's cards %v, trainmem's %v (and none), the default %s first", got, want, cuda.DefaultGPU)
	}
	if d := webDefaults(t); d["gpu"] != cuda.DefaultGPU || d["preset"] != "gpt2" || len(d) != 16 {
		t.Errorf("the page's defaults %v", d)
	}
}

// webDefaults are app.js's DEFAULTS: the values a URL leaves out.
func webDefaults(t *testing.T) map[string]string {
	t.Helper()
	src, err := os.ReadFile("web/app.js")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`const DEFAULTS = (\{[^}]*\});`).FindSubmatch(src)
	if m == nil {
		t.Fatal("app.js has no DEFAULTS")
	}
	// The object literal's keys are bare words: quote them for JSON.
	lit := regexp.MustCompile(`(\w+):`).ReplaceAll(m[1], []byte(`"$1":`))
	d := map[string]string{}
	if err := json.Unmarshal(lit, &d); err != nil {
		t.Fatalf("app.js's DEFAULTS %s: %v", m[1], err)
	}
	return d
}

// webBuild builds the page as `make build` does (scripts/web.sh DIR BIN)
// into a temporary directory: the static site (what `make web` makes) and
// trainmem with the site inside, which `trainmem web` serves.
func webBuild(t *testing.T) (site, bin string) {
	t.Helper()
	tmp := t.TempDir()
	site, bin = filepath.Join(tmp, "web"), filepath.Join(tmp, "trainmem")
	cmd := exec.Command("bash", "../../scripts/web.sh", site, bin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/web.sh: %v\n%s", err, out)
	}
	return site, bin
}

// mistralConfig is mistralai/Mistral-7B-Instruct-v0.2's config.json on
// the Hugging Face Hub (attention over the whole context: no sliding
// window); mistralV01 is Mistral-7B-v0.1's difference, a sliding window
// of 4,096, which trainmem refuses by name.
const mistralConfig = `{
  "architectures": ["MistralForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 14336,
  "max_position_embeddings": 32768,
  "model_type": "mistral",
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0,
  "sliding_window": null,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.36.0",
  "use_cache": true,
  "vocab_size": 32000
}`

var mistralV01 = strings.Replace(strings.Replace(mistralConfig, `"sliding_window": null`, `"sliding_window": 4096`, 1), `"rope_theta": 1000000.0`, `"rope_theta": 10000.0`, 1)

// wallClock is the one field a simulation's JSON has that no two runs
// share: how long it took.
var wallClock = regexp.MustCompile(`(?m)^  "seconds": [0-9.e+-]+,\n`)

// webShown is what the page shows after an update, read from its DOM.
type webShown struct {
	State    map[string]string `json:"state"`
	URL      string            `json:"url"`
	Error    string            `json:"error"`
	Answer   bool              `json:"answer"`
	Config   string            `json:"config"`
	Timeline bool              `json:"timeline"`
	FitNote  string            `json:"fitNote"`
	Headline string            `json:"headline"`
	Status   string            `json:"status"`
	// Downloads are the links offered: name → the file's text (JSON) or
	// its size and first byte (the snapshot).
	Downloads map[string]string `json:"downloads"`
	Rows      []struct {
		Category string               `json:"category"`
		Cells    [][2]json.RawMessage `json:"cells"`
	} `json:"rows"`
	Policies []struct {
		Policy   string `json:"policy"`
		Chosen   bool   `json:"chosen"`
		Trainmem int64  `json:"trainmem"`
		Peak     *int64 `json:"peak"`
	} `json:"policies"`
	Sources int `json:"sources"`
}

// readPage is the JavaScript that reads webShown from the page.
const readPage = `(async () => {
	const form = document.getElementById("setup"), $ = (id) => document.getElementById(id);
	const state = {};
	for (const k of ["preset", "batch", "seq", "precision", "optimizer", "checkpoint", "attention", "method", "rank", "targets", "ranks", "zero", "tp", "pp", "gpu", "memory"]) state[k] = form.elements[k].value;
	const downloads = {};
	for (const a of document.querySelectorAll("#downloads a")) {
		const r = await fetch(a.href);
		if (a.download.endsWith(".json")) downloads[a.download] = await r.text();
		else { const b = new Uint8Array(await r.arrayBuffer()); downloads[a.download] = b.length + " bytes, first " + b[0]; }
	}
	const img = $("timeline").querySelector("img");
	return {
		state, url: location.search, downloads,
		error: $("error").hidden ? "" : $("error").textContent,
		answer: !$("answer").hidden,
		config: $("dropnote").hidden ? "" : $("dropnote").textContent,
		timeline: !$("timeline").hidden && img.complete && img.naturalWidth > 0,
		fitNote: $("fitstatus").textContent, headline: $("headline").textContent, status: $("status").textContent,
		rows: [...document.querySelectorAll("#categories tbody tr")].map((tr) => ({
			category: tr.dataset.category,
			cells: [...tr.querySelectorAll("td[data-bytes]")].map((td) => [td.className, Number(td.dataset.bytes)]),
		})),
		policies: [...document.querySelectorAll("#policies tbody tr")].map((tr) => {
			const peak = tr.querySelector("td.simulated-peak").dataset.bytes;
			return { policy: tr.dataset.policy, chosen: tr.className === "chosen",
				trainmem: Number(tr.querySelector("td.formula-trainmem").dataset.bytes), peak: peak === undefined ? null : Number(peak) };
		}),
		sources: document.querySelectorAll("#sources dd").length,
	};
})()`

// webStep is one thing a person does to the page, and the model's config
// it leaves (the preset's when "").
type webStep struct {
	name   string
	act    func(b *browserPage)
	config string
	shots  []webShot
	// want are controls' values the step must leave (those a key or a
	// slider sets).
	want map[string]string
}

// webShot is a screenshot taken after a step: at a width, light or dark.
type webShot struct {
	name  string
	width int
	dark  bool
}

// The page in headless Chromium, served by trainmem web from the binary
// make build makes (the page inside it), driven over the DevTools protocol
// as a person drives it: controls changed, keys typed and pressed (the Tab
// order through every control, a number typed, a select stepped with the
// arrow keys), a config.json chosen with the file input and others dropped
// on the page. The setups are the issue's: gpt2-xl at b 32, s 1000, fp16
// with full checkpointing; llama3-8b at s 4096, bf16, flash attention;
// ZeRO-3 over 64 ranks; a tp 2 × pp 2 layout; Hugging Face configs; and bad
// input (a shape that overflows, a batch of 0, a malformed config, a
// sliding window trainmem refuses), which shows the command line's own message and leaves the page
// working. Each answer's estimate, simulation and fit JSON (the page's
// downloads) are the command line's for the same arguments, byte for byte
// (but the simulation's wall-clock seconds), every byte the page shows is
// theirs, each checkpointing policy's simulated peak is the command line's
// simulation under it, and the URL holds the state. The last setups are
// computed after the server has stopped: the page needs no network once
// loaded. Screenshots at a laptop's and a phone's width, light and dark,
// are kept (in $TRAINMEM_ARTEFACTS/web when it is set) and checked: a
// picture, dark where the reader asked for dark, and no sideways scrolling
// on the phone. The console, the worker's included, shows no error.
func TestWebInChromium(t *testing.T) {
	browser := chromium()
	if browser == "" {
		t.Skip("no Chromium here (Debian: apt-get install chromium); .ci/run installs it")
	}
	_, bin := webBuild(t)
	shots := t.TempDir()
	if a := os.Getenv("TRAINMEM_ARTEFACTS"); a != "" {
		shots = filepath.Join(a, "web")
		if err := os.MkdirAll(shots, 0o755); err != nil {
			t.Fatal(err)
		}
	}

	// trainmem web, the page inside the binary, on a free port.
	srv := exec.Command(bin, "web", "--addr", "127.0.0.1:0")
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	addr := regexp.MustCompile(`http://\S+/`).FindString(line)
	if err != nil || addr == "" {
		t.Fatalf("trainmem web said %q (%v)", line, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	b := openBrowser(t, browser)
	defaults := webDefaults(t)
	set := func(kv map[string]string) func(*browserPage) {
		return func(b *browserPage) {
			js, _ := json.Marshal(kv)
			b.must(`(() => { const form = document.getElementById("setup");
				for (const [k, v] of Object.entries(`+string(js)+`)) { form.elements[k].value = v; form.elements[k].dispatchEvent(new Event("change", { bubbles: true })); } })()`, nil)
		}
	}
	// A config.json chosen with the file input, or dropped on the page.
	configFile := func(text string) string {
		path := filepath.Join(t.TempDir(), "config.json")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	choose := func(text string) func(*browserPage) {
		return func(b *browserPage) {
			var doc struct {
				Root struct {
					ID int `json:"nodeId"`
				} `json:"root"`
			}
			b.call("DOM.getDocument", nil, &doc)
			var in struct {
				ID int `json:"nodeId"`
			}
			b.call("DOM.querySelector", map[string]any{"nodeId": doc.Root.ID, "selector": `input[name="config"]`}, &in)
			b.call("DOM.setFileInputFiles", map[string]any{"nodeId": in.ID, "files": []string{configFile(text)}}, nil)
		}
	}
	drop := func(text string) func(*browserPage) {
		return func(b *browserPage) {
			js, _ := json.Marshal(text)
			b.must(`(() => { const dt = new DataTransfer();
				dt.items.add(new File([`+string(js)+`], "config.json", { type: "application/json" }));
				document.body.dispatchEvent(new DragEvent("dragover", { dataTransfer: dt, bubbles: true, cancelable: true }));
				document.body.dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true })); })()`, nil)
		}
	}
	const tab, down, right, backspace = 9, 40, 39, 8
	focus := func(name string) {
		b.must(`document.getElementById("setup").elements["`+name+`"].focus()`, nil)
	}
	focused := func() string {
		var n string
		b.must(`document.activeElement ? document.activeElement.name || document.activeElement.tagName : ""`, &n)
		return n
	}
	// typeNumber types a number into the focused box as a person does:
	// what is there deleted, then the digits.
	typeNumber := func(v string) func(*browserPage) {
		return func(b *browserPage) {
			for range 6 {
				b.key("Backspace", backspace, "", 0)
			}
			b.typeText(v)
		}
	}
	// update is the page's latest update's number (data-update): each step
	// waits for a later one.
	var update int
	laptop, phone := 1280, 390
	steps := []webStep{
		{name: "gpt2-xl b 32 s 1000 fp16 full", act: set(map[string]string{"preset": "gpt2-xl", "batch": "32", "seq": "1000", "precision": "fp16", "checkpoint": "full"}),
			shots: []webShot{{"gpt2-xl-laptop-light", laptop, false}, {"gpt2-xl-phone-dark", phone, true}}},
		{name: "llama3-8b s 4096 bf16 flash", act: set(map[string]string{"preset": "llama3-8b", "batch": "1", "seq": "4096", "precision": "bf16", "checkpoint": "none", "attention": "flash"})},
		{name: "QLoRA r 64 on every linear layer, llama2-7b in 24 GB", act: set(map[string]string{"preset": "llama2-7b", "seq": "2048", "attention": "", "checkpoint": "full", "method": "qlora", "rank": "64", "targets": "all-linear", "memory": "24"}),
			shots: []webShot{{"qlora-laptop-light", laptop, false}}},
		{name: "LoRA r 16, PEFT's targets", act: set(map[string]string{"method": "lora", "rank": "16", "targets": ""})},
		{name: "llama3-8b trained whole in 24 GB: nothing fits on one card", act: set(map[string]string{"preset": "llama3-8b", "seq": "4096", "method": "full", "checkpoint": "none", "attention": "flash"})},
		{name: "ZeRO-3 over 64 ranks", act: set(map[string]string{"preset": "gpt2", "batch": "4", "seq": "1024", "attention": "", "checkpoint": "none", "method": "full", "memory": "80", "ranks": "64", "zero": "3"}),
			shots: []webShot{{"zero3-64-ranks-laptop-dark", laptop, true}}},
		{name: "tp 2 × pp 2 in 24 GB", act: set(map[string]string{"ranks": "1", "zero": "0", "tp": "2", "pp": "2", "memory": "24"})},
		{name: "a shape that overflows: b 16777216 × s 1024 rows", act: set(map[string]string{"batch": "16777216"})},
		{name: "a batch of 0, typed", act: func(b *browserPage) {
			focus("seq")
			b.key("Tab", tab, "", 1<<3) // Shift-Tab twice: back past the slider to the micro-batch
			b.key("Tab", tab, "", 1<<3)
			if f := focused(); f != "batch" {
				t.Fatalf("two Shift-Tabs from the sequence reached %q, not the micro-batch", f)
			}
			typeNumber("0")(b)
		}, shots: []webShot{{"batch-0-phone-light", phone, false}}},
		{name: "a batch of 2, typed", act: typeNumber("2"), want: map[string]string{"batch": "2"}},
		{name: "the micro-batch's slider moved a step with the arrow key", act: func(b *browserPage) {
			b.key("Tab", tab, "", 0) // the box → its slider
			if f := focused(); f != "batchslider" {
				t.Fatalf("Tab from the micro-batch reached %q, not its slider", f)
			}
			b.key("ArrowRight", right, "", 0)
		}, want: map[string]string{"batch": "3"}},
		{name: "checkpointing stepped with the arrow keys", act: func(b *browserPage) {
			for range 4 { // slider → seq → precision → optimizer → checkpoint
				b.key("Tab", tab, "", 0)
			}
			if f := focused(); f != "checkpoint" {
				t.Fatalf("four Tabs from the micro-batch's slider reached %q, not checkpointing", f)
			}
			b.key("ArrowDown", down, "", 0)
		}, want: map[string]string{"checkpoint": "selective"}},
		{name: "Mistral-7B-Instruct-v0.2's config.json, chosen", act: choose(mistralConfig), config: mistralConfig,
			shots: []webShot{{"mistral-config-laptop-light", laptop, false}}},
		{name: "a malformed config.json, dropped", act: drop("{not json"), config: "{not json"},
		{name: "Mistral-7B-v0.1's config.json, dropped", act: drop(mistralV01), config: mistralV01},
		{name: "preset gpt2 again", act: set(map[string]string{"preset": "gpt2"})},
		{name: "the server stopped: batch 3", act: func(b *browserPage) {
			// The service worker has kept the site's files by now.
			b.waitFor(ctx, `navigator.serviceWorker.controller !== null`, "the service worker")
			b.waitFor(ctx, `caches.open("trainmem-web").then((c) => Promise.all(["./", "trainmem.wasm", "worker.js", "wasm_exec.js"].map((f) => c.match(f)))).then((r) => r.every(Boolean))`, "the service worker's copy")
			srv.Process.Kill()
			srv.Wait()
			set(map[string]string{"batch": "3"})(b)
		}, want: map[string]string{"batch": "3"}},
		{name: "the server stopped: the page reloaded, ZeRO-1 over 8 ranks", act: func(b *browserPage) {
			b.call("Page.reload", nil, nil)
			b.waitFor(ctx, `(() => { const d = document.body ? document.body.dataset : {}; return d.state === "ready" && d.done === d.update; })()`, "the reloaded page's answer")
			var d struct{ Update, Answered string }
			b.must(`({ Update: document.body.dataset.update, Answered: document.body.dataset.answered })`, &d)
			update, _ = strconv.Atoi(d.Update) // a new page counts from 1
			at, _ := strconv.ParseFloat(d.Answered, 64)
			t.Logf("reloaded with the server stopped, from the service worker's copy: the first answer %.2f s after the page began loading", at/1000)
			set(map[string]string{"ranks": "8", "zero": "1"})(b)
		}, want: map[string]string{"batch": "3", "ranks": "8", "zero": "1"}},
	}

	// The page loads, answers the defaults, and every control is a Tab
	// stop in the order they read.
	start := time.Now()
	b.call("Page.navigate", map[string]any{"url": addr}, nil)
	waitDone := func(after int) int {
		b.waitFor(ctx, fmt.Sprintf(`(() => { const d = document.body ? document.body.dataset : {};
			return Number(d.update) > %d && d.state !== "computing" && d.done === d.update; })()`, after), "the page's answer")
		var n string
		b.must(`document.body.dataset.update`, &n)
		u, _ := strconv.Atoi(n)
		return u
	}
	update = waitDone(0)
	var answered struct {
		At   string `json:"answered"`
		Took string `json:"took"`
	}
	timing := func() (at, took float64) {
		b.must(`({ ...document.body.dataset })`, &answered)
		at, _ = strconv.ParseFloat(answered.At, 64)
		took, _ = strconv.ParseFloat(answered.Took, 64)
		return at / 1000, took / 1000
	}
	at, _ := timing()
	t.Logf("first answer (the defaults) %.2f s after the page began loading; with fit and every policy's peak, %.2f s after it was asked for", at, time.Since(start).Seconds())
	// LoRA's rank and targets are disabled (no Tab stop) until adapters are
	// trained.
	order := []string{"preset", "config", "batch", "batchslider", "seq", "precision", "optimizer", "checkpoint", "attention", "method", "ranks", "zero", "tp", "pp", "gpu", "memory"}
	focus("preset")
	for _, want := range order[1:] {
		b.key("Tab", tab, "", 0)
		if f := focused(); f != want {
			t.Fatalf("Tab reached %q, want %q (the order: %v)", f, want, order)
		}
	}
	check := func(what, config string, want map[string]string) {
		var r webShown
		b.must(readPage, &r)
		for k, v := range want {
			if r.State[k] != v {
				t.Errorf("%s: %s is %q, want %q", what, k, r.State[k], v)
			}
		}
		checkWebAnswer(t, what, config, r, defaults)
	}
	check("the defaults", "", nil)
	for _, st := range steps {
		// The page's clock at the change, and when the answer showed on it:
		// what the person waited, the typing's pause included.
		var before float64
		b.must(`performance.now()`, &before)
		began := time.Now()
		st.act(b)
		update = waitDone(update)
		took := time.Since(began)
		check(st.name, st.config, st.want)
		if at, main := timing(); webAnswered(b) && at*1000 < before {
			// A reloaded page's clock began again.
			t.Logf("%s: answered (%.2f s computing), with fit and every policy's peak %.2f s after", st.name, main, took.Seconds())
		} else if webAnswered(b) {
			t.Logf("%s: answered %.2f s after the change (%.2f s computing), with fit and every policy's peak %.2f s after", st.name, at-before/1000, main, took.Seconds())
		} else {
			t.Logf("%s: the message in %.2f s", st.name, took.Seconds())
		}
		for _, sh := range st.shots {
			webScreenshot(t, b, filepath.Join(shots, sh.name+".png"), sh.width, sh.dark)
		}
	}
	for _, e := range b.consoleErrors() {
		t.Errorf("the console: %s", e)
	}
	t.Logf("screenshots in %s", shots)
}

// webAnswered says whether the page shows an answer (not an error).
func webAnswered(b *browserPage) bool {
	var shown bool
	b.must(`!document.getElementById("answer").hidden`, &shown)
	return shown
}

// checkWebAnswer checks what the page shows after an update against the
// command line's answers for the same setup (config: the config.json's
// text, "" for the preset).
func checkWebAnswer(t *testing.T, what, config string, r webShown, defaults map[string]string) {
	t.Helper()
	s := r.State
	what = fmt.Sprintf("%s (%v)", what, s)
	model := []string{"--preset", s["preset"]}
	same := func(x string) string { return x }
	if config != "" {
		// The file, as the command line reads it: the page's copy is
		// /in/config.json.
		path := filepath.Join(t.TempDir(), "config.json")
		if err := os.WriteFile(path, []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		model = []string{"--hf-config", path}
		same = func(x string) string { return strings.ReplaceAll(x, "/in/config.json", path) }
		if !strings.Contains(r.Config, "config.json") {
			t.Errorf("%s: the page does not say the model is the config's: %q", what, r.Config)
		}
	}
	// Fine-tuning: LoRA's rank and targets, QLoRA's NF4 base.
	var adapters []string
	if s["method"] != "full" {
		adapters = []string{"--lora-rank", s["rank"]}
		if s["targets"] != "" {
			adapters = append(adapters, "--lora-targets", s["targets"])
		}
	}
	a := func(cmd, checkpoint string) []string {
		out := []string{cmd, model[0], model[1], "--batch", s["batch"], "--seq", s["seq"], "--precision", s["precision"], "--optimizer", s["optimizer"],
			"--checkpoint", checkpoint, "--ranks", s["ranks"], "--zero", s["zero"], "--tp", s["tp"], "--pp", s["pp"]}
		if s["attention"] != "" {
			out = append(out, "--attention", s["attention"])
		}
		out = append(out, adapters...)
		if s["method"] == "qlora" {
			out = append(out, "--quantize", "nf4")
		}
		if cmd == "simulate" {
			out = append(out, "--gpu", s["gpu"])
		}
		return append(out, "--format", "json")
	}
	// The URL holds the state: every control's value read back from it
	// (a default left out).
	q, err := url.ParseQuery(strings.TrimPrefix(r.URL, "?"))
	if err != nil {
		t.Errorf("%s: URL %q: %v", what, r.URL, err)
	}
	for k, v := range s {
		if q.Has(k) && q.Get(k) != v || !q.Has(k) && v != defaults[k] {
			t.Errorf("%s: the URL %q gives %s=%q, the controls %q", what, r.URL, k, q.Get(k), v)
		}
	}
	estOut, estErr, estCode := runArgs(t, a("estimate", s["checkpoint"])...)
	if estCode != 0 {
		// Bad input: the command line's own message in the page, and no
		// answer.
		if estCode != 2 || r.Answer || !strings.Contains(same(r.Error), strings.TrimSpace(estErr)) {
			t.Errorf("%s: the page says %q (answer shown: %v); the command line %q (exit %d)", what, r.Error, r.Answer, estErr, estCode)
		}
		return
	}
	if r.Error != "" || !r.Answer {
		t.Fatalf("%s: the page shows the error %q", what, r.Error)
	}
	simOut, _ := mustRun(t, a("simulate", s["checkpoint"])...)
	if same(r.Downloads["estimate.json"]) != estOut {
		t.Errorf("%s: the page's estimate differs from the command line's", what)
	}
	if wallClock.ReplaceAllString(same(r.Downloads["simulate.json"]), "") != wallClock.ReplaceAllString(simOut, "") {
		t.Errorf("%s: the page's simulation differs from the command line's", what)
	}
	// fit's answer for the card's memory, as the command line gives it.
	fitArgs := []string{"fit", model[0], model[1], "--seq", s["seq"], "--precision", s["precision"], "--optimizer", s["optimizer"], "--ranks", s["ranks"], "--tp", s["tp"], "--pp", s["pp"], "--memory", s["memory"] + "GB"}
	if s["attention"] != "" {
		fitArgs = append(fitArgs, "--attention", s["attention"])
	}
	if s["method"] != "full" {
		fitArgs = append(append(fitArgs, "--method", s["method"]), adapters...)
	}
	fitOut, fitErr, fitCode := runArgs(t, append(fitArgs, "--format", "json")...)
	if fitCode == 0 && same(r.Downloads["fit.json"]) != fitOut {
		t.Errorf("%s: the page's fit differs from the command line's", what)
	}
	// When nothing fits at the setup's ranks, the fewest ranks that hold
	// the micro-batch (fit --batch), as the command line gives them.
	var fitted struct {
		Results []struct {
			Sim     int `json:"simulated_max_micro_batch"`
			Formula int `json:"max_micro_batch"`
		} `json:"results"`
	}
	nothing := false
	if fitCode == 0 && s["method"] == "full" {
		if err := json.Unmarshal([]byte(fitOut), &fitted); err != nil {
			t.Fatal(err)
		}
		nothing = !slices.ContainsFunc(fitted.Results, func(r struct {
			Sim     int `json:"simulated_max_micro_batch"`
			Formula int `json:"max_micro_batch"`
		}) bool {
			return r.Sim > 0 || r.Formula > 0
		})
	}
	if nothing {
		few, _ := mustRun(t, append(fitArgs, "--format", "json", "--batch", s["batch"])...)
		if same(r.Downloads["fit-ranks.json"]) != few {
			t.Errorf("%s: nothing fits, and the page's fewest ranks differ from the command line's", what)
		}
	}
	if fitCode != 0 {
		last := strings.Split(strings.TrimSpace(fitErr), "\n")
		if _, offered := r.Downloads["fit.json"]; offered || same(r.FitNote) != last[len(last)-1] {
			t.Errorf("%s: fit fails on the command line (%q) but the page says %q", what, last[len(last)-1], r.FitNote)
		}
	}
	// The checkpointing table is the estimate's policies, the chosen one
	// marked, each with the simulated peak under it.
	var est struct {
		Policies []struct {
			Policy      string           `json:"policy"`
			Activations map[string]int64 `json:"activations"`
		} `json:"checkpoint_policies"`
		Sources map[string]string `json:"sources"`
	}
	if err := json.Unmarshal([]byte(estOut), &est); err != nil {
		t.Fatal(err)
	}
	if r.Sources < 4 {
		t.Errorf("%s: %d formulas' sources shown", what, r.Sources)
	}
	peakOf := func(out string) int64 {
		var sim struct {
			PeakAllocated int64 `json:"peak_allocated_bytes"`
			Ranks         []struct {
				PeakAllocated int64 `json:"peak_allocated_bytes"`
			} `json:"ranks"`
		}
		if err := json.Unmarshal([]byte(out), &sim); err != nil {
			t.Fatal(err)
		}
		if len(sim.Ranks) > 0 {
			return sim.Ranks[0].PeakAllocated
		}
		return sim.PeakAllocated
	}
	if len(r.Policies) != len(est.Policies) || len(est.Policies) < 4 {
		t.Errorf("%s: the page shows %d policies, the estimate has %d", what, len(r.Policies), len(est.Policies))
	} else {
		for k, p := range r.Policies {
			e := est.Policies[k]
			if p.Policy != e.Policy || p.Trainmem != e.Activations["trainmem"] || p.Chosen != (p.Policy == s["checkpoint"]) {
				t.Errorf("%s: policy row %+v, the estimate's %+v (chosen: %s)", what, p, e, s["checkpoint"])
			}
			out, _, code := runArgs(t, a("simulate", p.Policy)...)
			switch {
			case code != 0 && p.Peak != nil:
				t.Errorf("%s: the page shows a peak for %s, which the command line cannot simulate", what, p.Policy)
			case code == 0 && (p.Peak == nil || *p.Peak != peakOf(out)):
				t.Errorf("%s: %s's simulated peak on the page %v, the command line's %d", what, p.Policy, p.Peak, peakOf(out))
			}
		}
	}
	// The timeline drew, and the simulation's files are offered.
	want := []string{"estimate.json", "fit.json", "simulate.json", "snapshot.pickle", "trace.json"}
	if fitCode != 0 {
		want = slices.DeleteFunc(want, func(n string) bool { return n == "fit.json" })
	}
	if nothing {
		want = slices.Sorted(slices.Values(append(want, "fit-ranks.json")))
	}
	if got := slices.Sorted(maps.Keys(r.Downloads)); !r.Timeline || !slices.Equal(got, want) {
		t.Errorf("%s: timeline %v, downloads %v", what, r.Timeline, got)
	}
	if snap := r.Downloads["snapshot.pickle"]; !strings.HasSuffix(snap, "first 128") {
		t.Errorf("%s: the snapshot is not a pickle (protocol byte 0x80 first): %s", what, snap)
	}
	// The rows the page shows are the JSON's bytes; the headline says
	// whether the step fits in the card.
	var sim struct {
		Memory struct {
			PeakRequested map[string]int64 `json:"peak_requested"`
		} `json:"memory"`
		PeakReserved int64 `json:"peak_reserved_bytes"`
		Ranks        []struct {
			PeakRequested map[string]int64 `json:"peak_requested"`
			PeakReserved  int64            `json:"peak_reserved_bytes"`
		} `json:"ranks"`
	}
	if err := json.Unmarshal([]byte(simOut), &sim); err != nil {
		t.Fatal(err)
	}
	cats, reserved := sim.Memory.PeakRequested, sim.PeakReserved
	if len(sim.Ranks) > 0 {
		cats, reserved = sim.Ranks[0].PeakRequested, sim.Ranks[0].PeakReserved
	}
	gb, _ := strconv.ParseInt(s["memory"], 10, 64)
	if fits := reserved <= gb*1_000_000_000; strings.Contains(r.Headline, "it fits") != fits || strings.Contains(r.Headline, "does not fit") == fits {
		t.Errorf("%s: %d bytes reserved in %d GB, the headline %q", what, reserved, gb, r.Headline)
	}
	shown := 0
	for _, row := range r.Rows {
		for _, c := range row.Cells {
			var class string
			var v int64
			if err := json.Unmarshal(c[0], &class); err != nil || json.Unmarshal(c[1], &v) != nil {
				t.Fatalf("%s: a cell %s", what, c)
			}
			if class != "simulated" {
				continue
			}
			want := cats[row.Category]
			switch row.Category {
			case "total":
				want = peakOf(simOut)
			case "reserved":
				want = reserved
			case "unallocated":
				want = reserved - peakOf(simOut)
			}
			if v != want {
				t.Errorf("%s: %s shows %d simulated bytes, the JSON %d", what, row.Category, v, want)
			}
			shown++
		}
	}
	if shown < 4 {
		t.Errorf("%s: %d rows shown", what, shown)
	}
}

// webScreenshot photographs the whole page at a width, light or dark, into
// path, and checks it: a picture of that width, dark where dark was asked
// for and light elsewhere, and at a phone's width nothing wider than the
// screen. The page is back at a laptop's width, light, afterwards.
func webScreenshot(t *testing.T, b *browserPage, path string, width int, dark bool) {
	t.Helper()
	scheme := "light"
	if dark {
		scheme = "dark"
	}
	b.call("Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 600}, nil)
	b.call("Emulation.setEmulatedMedia", map[string]any{"features": []map[string]string{{"name": "prefers-color-scheme", "value": scheme}}}, nil)
	defer func() {
		b.call("Emulation.clearDeviceMetricsOverride", nil, nil)
		b.call("Emulation.setEmulatedMedia", map[string]any{"features": []map[string]string{}}, nil)
	}()
	var wide struct {
		Scroll int `json:"scroll"`
		Inner  int `json:"inner"`
	}
	b.must(`new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r({ scroll: document.documentElement.scrollWidth, inner: innerWidth }))))`, &wide)
	if wide.Scroll > wide.Inner {
		t.Errorf("%s: the page is %d px wide in a %d px window: it scrolls sideways", filepath.Base(path), wide.Scroll, wide.Inner)
	}
	shot := b.screenshot()
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("%s: not a PNG: %v", path, err)
	}
	bounds := img.Bounds()
	if bounds.Dx() != width || bounds.Dy() < 600 {
		t.Errorf("%s: %v, want %d px wide and the whole page", path, bounds, width)
	}
	// The background's lightness: a corner's pixel, where only the page's
	// background is; and enough colours that something is drawn.
	c := color.GrayModel.Convert(img.At(bounds.Min.X+2, bounds.Max.Y-2)).(color.Gray).Y
	if dark && c > 80 || !dark && c < 200 {
		t.Errorf("%s: the background's grey is %d, want %s", path, c, scheme)
	}
	colours := map[color.Color]bool{}
	for y := bounds.Min.Y; y < bounds.Max.Y; y += 3 {
		for x := bounds.Min.X; x < bounds.Max.X; x += 3 {
			colours[img.At(x, y)] = true
		}
	}
	if len(colours) < 20 {
		t.Errorf("%s: %d colours: nothing drawn", path, len(colours))
	}
	t.Logf("%s: %dx%d, %s, %d bytes", filepath.Base(path), bounds.Dx(), bounds.Dy(), scheme, len(shot))
}

// trainmem web serves a site's files, each with its type: the WebAssembly
// gzip'd to a browser that takes gzip and unpacked for one that does not
// (the embedded site has only the gzip'd copy), 304 for a file the browser
// holds, 404 for what the site lacks and 405 for a write; it stops when its
// context ends, and refuses bad input by name with exit status 2.
func TestWebServe(t *testing.T) {
	wasm := append([]byte("\x00asm\x01\x00\x00\x00"), bytes.Repeat([]byte("trainmem "), 20000)...)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(wasm)
	zw.Close()
	site := map[string][]byte{"index.html": []byte("<!doctype html><title>t</title>"), "app.js": []byte("'use strict';"), "worker.js": []byte("'use strict';"), "sw.js": []byte("'use strict';"),
		"style.css": []byte("body{}"), "wasm_exec.js": []byte("'use strict';"), "trainmem.wasm": wasm, "trainmem.wasm.gz": gz.Bytes()}
	dir := t.TempDir()
	for name, b := range site {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		var stderr bytes.Buffer
		err := run(ctx, []string{"web", "--dir", dir, "--addr", "127.0.0.1:0"}, pw, &stderr)
		pw.Close()
		done <- err
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	addr := regexp.MustCompile(`http://\S+/`).FindString(line)
	if err != nil || addr == "" {
		t.Fatalf("trainmem web said %q (%v)", line, err)
	}
	go io.Copy(io.Discard, pr)
	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	get := func(method, path string, header ...string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, addr+path, nil)
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res, b
	}
	res, b := get("GET", "")
	if res.StatusCode != 200 || !bytes.Equal(b, site["index.html"]) || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Errorf("GET /: %s %q %q", res.Status, res.Header.Get("Content-Type"), b)
	}
	res, b = get("GET", "trainmem.wasm", "Accept-Encoding", "gzip, deflate, br")
	if res.StatusCode != 200 || res.Header.Get("Content-Encoding") != "gzip" || !bytes.Equal(b, gz.Bytes()) || res.Header.Get("Content-Type") != "application/wasm" {
		t.Errorf("GET /trainmem.wasm taking gzip: %s %v, %d bytes", res.Status, res.Header, len(b))
	}
	res, b = get("GET", "trainmem.wasm", "Accept-Encoding", "gzip;q=0, identity")
	if res.StatusCode != 200 || res.Header.Get("Content-Encoding") != "" || !bytes.Equal(b, wasm) {
		t.Errorf("GET /trainmem.wasm refusing gzip: %s %v, %d bytes", res.Status, res.Header, len(b))
	}
	res, _ = get("GET", "app.js")
	if res2, b := get("GET", "app.js", "If-None-Match", res.Header.Get("ETag")); res.Header.Get("ETag") == "" || res2.StatusCode != http.StatusNotModified || len(b) != 0 {
		t.Errorf("GET /app.js again with its ETag %q: %s", res.Header.Get("ETag"), res2.Status)
	}
	for _, c := range []struct {
		method, path string
		status       int
	}{{"GET", "nothing.js", 404}, {"GET", "trainmem.wasm.gz", 404}, {"POST", "", 405}, {"HEAD", "style.css", 200}} {
		if res, b := get(c.method, c.path); res.StatusCode != c.status || c.method == "HEAD" && len(b) != 0 {
			t.Errorf("%s /%s: %s, want %d", c.method, c.path, res.Status, c.status)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("trainmem web, stopped: %v", err)
	}

	// The embedded site's WebAssembly is only gzip'd: a browser that
	// refuses gzip gets it unpacked.
	h, err := newWebHandler(fstest.MapFS{"index.html": {Data: site["index.html"]}, "trainmem.wasm.gz": {Data: gz.Bytes()}})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/trainmem.wasm", nil))
	if rec.Code != 200 || rec.Header().Get("Content-Encoding") != "" || !bytes.Equal(rec.Body.Bytes(), wasm) {
		t.Errorf("the gzip'd-only WebAssembly without gzip: %d %v, %d bytes", rec.Code, rec.Header(), rec.Body.Len())
	}

	// Bad input, refused by name.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	partial := t.TempDir()
	os.WriteFile(filepath.Join(partial, "index.html"), site["index.html"], 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--dir", filepath.Join(dir, "nowhere")}, "not a folder"},
		{[]string{"--dir", partial}, "it has no app.js"},
		{[]string{"--dir", dir, "--addr", "8080"}, `--addr "8080"`},
		{[]string{"--dir", dir, "--addr", busy.Addr().String()}, "the port is in use"},
		{[]string{"--dir", dir, "--addr", "127.0.0.1:99999"}, `--addr "127.0.0.1:99999"`},
		// This test binary is a plain go build: no WebAssembly inside.
		{nil, "make build"},
	} {
		_, stderr, code := runArgs(t, append([]string{"web"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("web %v: exit %d, %q; want 2 and one line saying %q", c.args, code, stderr, c.want)
		}
	}
}
