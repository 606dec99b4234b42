package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
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
	if d := webDefaults(t); d["gpu"] != cuda.DefaultGPU || d["preset"] != "gpt2" || len(d) != 13 {
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

// webSite builds the page as `make web` does (scripts/web.sh) into a
// temporary directory, once for the tests that load it.
func webSite(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "web")
	cmd := exec.Command("bash", "../../scripts/web.sh", dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/web.sh: %v\n%s", err, out)
	}
	return dir
}

// A page's report of one finished update (app.js, ?report=1).
type webReport struct {
	Done     bool              `json:"done"`
	State    map[string]string `json:"state"`
	Code     int               `json:"code"`
	Stderr   string            `json:"stderr"`
	Estimate string            `json:"estimate"`
	Simulate string            `json:"simulate"`
	Fit      string            `json:"fit"`
	FitCode  int               `json:"fitCode"`
	Error    string            `json:"error"`
	URL      string            `json:"url"`
	// Config is the dropped config.json's name ("" for a preset);
	// Timeline whether the timeline drew; Downloads the files offered.
	Config    string   `json:"config"`
	Timeline  bool     `json:"timeline"`
	Downloads []string `json:"downloads"`
	// Policies are the checkpointing table's rows.
	Policies []struct {
		Policy   string `json:"policy"`
		Chosen   bool   `json:"chosen"`
		Trainmem int64  `json:"trainmem"`
	} `json:"policies"`
	MS float64 `json:"ms"`
	// SinceLoad is the page's clock at the report: ms since it began
	// loading.
	SinceLoad float64 `json:"sinceLoad"`
	Rows      []struct {
		Category string               `json:"category"`
		Cells    [][2]json.RawMessage `json:"cells"`
	} `json:"rows"`
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

// The page in headless Chromium, served from a local static server as any
// static host would: it loads trainmem's WebAssembly in a worker and, set
// up through its own controls (each change dispatched as a person's is),
// computes the setups the issue names: gpt2-xl at b 32, s 1000, fp16 with
// full checkpointing; llama3-8b at s 4096, bf16, flash attention; ZeRO-3
// over 64 ranks; a tp 2 × pp 2 layout; a batch of 0, which shows the
// command line's own message in the page and leaves it working for the
// next setup. Each answer's estimate and simulation are the command
// line's JSON for the same arguments, byte for byte (but the simulation's
// wall-clock seconds), every row the page shows is the JSON's bytes, the
// URL holds the state, and the console shows no error.
func TestWebInChromium(t *testing.T) {
	browser := chromium()
	if browser == "" {
		t.Skip("no Chromium here (Debian: apt-get install chromium); .ci/run installs it")
	}
	dir := webSite(t)
	reports := make(chan webReport, 32)
	mux := http.NewServeMux()
	mux.Handle("/", http.FileServer(http.Dir(dir)))
	mux.HandleFunc("POST /report", func(w http.ResponseWriter, r *http.Request) {
		var rep webReport
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Errorf("a report that is not JSON: %v: %s", err, b)
		}
		reports <- rep
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	defaults := webDefaults(t)

	drive := []map[string]string{
		{"preset": "gpt2-xl", "batch": "32", "seq": "1000", "precision": "fp16", "checkpoint": "full"},
		{"preset": "llama3-8b", "batch": "1", "seq": "4096", "precision": "bf16", "checkpoint": "none", "attention": "flash"},
		{"preset": "gpt2", "batch": "4", "seq": "1024", "attention": "", "ranks": "64", "zero": "3"},
		{"ranks": "1", "zero": "0", "tp": "2", "pp": "2", "memory": "24"},
		{"batch": "0"},
		{"batch": "2"},
		{"config": mistralConfig},
		{"config": "{not json"},
		{"config": mistralV01},
		{"preset": "gpt2"},
	}
	steps, _ := json.Marshal(drive)
	page := srv.URL + "/index.html?report=1&drive=" + url.QueryEscape(string(steps))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir="+t.TempDir(), "--enable-logging=stderr", "--v=0", page)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()

	var got []webReport
	for done := false; !done; {
		select {
		case r := <-reports:
			if r.Done {
				done = true
			} else {
				got = append(got, r)
			}
		case <-ctx.Done():
			t.Fatalf("the page reported %d of %d updates in 4 minutes; Chromium said:\n%s", len(got), len(drive)+1, logs.String())
		}
	}
	if len(got) != len(drive)+1 {
		t.Fatalf("%d updates reported, want %d (the first setup and one a step)", len(got), len(drive)+1)
	}
	for i, r := range got {
		s := r.State
		what := fmt.Sprintf("update %d (%v)", i, s)
		model := []string{"--preset", s["preset"]}
		same := func(x string) string { return x }
		if r.Config != "" {
			// The dropped file, as the command line reads it: the page's
			// copy is /in/config.json.
			path := filepath.Join(t.TempDir(), "config.json")
			if err := os.WriteFile(path, []byte(drive[i-1]["config"]), 0o644); err != nil {
				t.Fatal(err)
			}
			model = []string{"--hf-config", path}
			same = func(x string) string { return strings.ReplaceAll(x, "/in/config.json", path) }
		}
		a := func(cmd string) []string {
			out := []string{cmd, model[0], model[1], "--batch", s["batch"], "--seq", s["seq"], "--precision", s["precision"], "--optimizer", s["optimizer"],
				"--checkpoint", s["checkpoint"], "--ranks", s["ranks"], "--zero", s["zero"], "--tp", s["tp"], "--pp", s["pp"]}
			if s["attention"] != "" {
				out = append(out, "--attention", s["attention"])
			}
			if cmd == "simulate" {
				out = append(out, "--gpu", s["gpu"])
			}
			return append(out, "--format", "json")
		}
		// The URL holds the state: every control's value read back from it
		// (a default left out).
		q, err := url.ParseQuery(strings.TrimPrefix(r.URL, "?"))
		if err != nil || q.Get("report") != "1" {
			t.Errorf("%s: URL %q (%v)", what, r.URL, err)
		}
		for k, v := range s {
			if q.Has(k) && q.Get(k) != v || !q.Has(k) && v != defaults[k] {
				t.Errorf("%s: the URL %q gives %s=%q, the controls %q", what, r.URL, k, q.Get(k), v)
			}
		}
		estOut, estErr, estCode := runArgs(t, a("estimate")...)
		if bad := s["batch"] == "0" || strings.HasPrefix(drive[max(i-1, 0)]["config"], "{not") || drive[max(i-1, 0)]["config"] == mistralV01; bad || estCode != 0 {
			// Bad input: the command line's own message in the page.
			if !bad || r.Code != 2 || estCode != 2 || !strings.Contains(same(r.Error), strings.TrimSpace(estErr)) {
				t.Errorf("%s: the page says %q (exit %d); the command line %q (exit %d)", what, r.Error, r.Code, estErr, estCode)
			}
			continue
		}
		if r.Code != 0 {
			t.Fatalf("%s: the page's exit %d (%s)", what, r.Code, r.Stderr)
		}
		simOut, _ := mustRun(t, a("simulate")...)
		if same(r.Estimate) != estOut {
			t.Errorf("%s: the page's estimate differs from the command line's", what)
		}
		if wallClock.ReplaceAllString(same(r.Simulate), "") != wallClock.ReplaceAllString(simOut, "") {
			t.Errorf("%s: the page's simulation differs from the command line's", what)
		}
		// fit's answer for the card's memory, as the command line gives it.
		fitArgs := []string{"fit", model[0], model[1], "--seq", s["seq"], "--precision", s["precision"], "--optimizer", s["optimizer"], "--ranks", s["ranks"], "--memory", s["memory"] + "GB"}
		if s["attention"] != "" {
			fitArgs = append(fitArgs, "--attention", s["attention"])
		}
		fitOut, _, fitCode := runArgs(t, append(fitArgs, "--format", "json")...)
		if r.FitCode != fitCode || same(r.Fit) != fitOut {
			t.Errorf("%s: the page's fit (exit %d) differs from the command line's (exit %d)", what, r.FitCode, fitCode)
		}
		// The checkpointing table is the estimate's policies, the chosen
		// one marked.
		var est struct {
			Policies []struct {
				Policy      string           `json:"policy"`
				Activations map[string]int64 `json:"activations"`
			} `json:"checkpoint_policies"`
		}
		if err := json.Unmarshal([]byte(estOut), &est); err != nil {
			t.Fatal(err)
		}
		if len(r.Policies) != len(est.Policies) || len(est.Policies) < 4 {
			t.Errorf("%s: the page shows %d policies, the estimate has %d", what, len(r.Policies), len(est.Policies))
		} else {
			for k, p := range r.Policies {
				if e := est.Policies[k]; p.Policy != e.Policy || p.Trainmem != e.Activations["trainmem"] || p.Chosen != (p.Policy == s["checkpoint"]) {
					t.Errorf("%s: policy row %+v, the estimate's %+v (chosen: %s)", what, p, e, s["checkpoint"])
				}
			}
		}
		// The timeline drew, and the simulation's files are offered.
		if !r.Timeline || !slices.Equal(r.Downloads, []string{"snapshot.pickle", "trace.json", "estimate.json", "simulate.json"}) {
			t.Errorf("%s: timeline %v, downloads %v", what, r.Timeline, r.Downloads)
		}
		// The rows the page shows are the JSON's bytes.
		var sim struct {
			Memory struct {
				PeakRequested map[string]int64 `json:"peak_requested"`
			} `json:"memory"`
			PeakAllocated int64 `json:"peak_allocated_bytes"`
			Ranks         []struct {
				PeakRequested map[string]int64 `json:"peak_requested"`
				PeakAllocated int64            `json:"peak_allocated_bytes"`
			} `json:"ranks"`
		}
		if err := json.Unmarshal([]byte(simOut), &sim); err != nil {
			t.Fatal(err)
		}
		cats, peak := sim.Memory.PeakRequested, sim.PeakAllocated
		if len(sim.Ranks) > 0 {
			cats, peak = sim.Ranks[0].PeakRequested, sim.Ranks[0].PeakAllocated
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
				if row.Category == "total" {
					want = peak
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
		t.Logf("%s: computed in %.2f s, answered %.2f s after the page began loading", what, r.MS/1000, r.SinceLoad/1000)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "CONSOLE") && (strings.Contains(line, "rror") || strings.Contains(line, "Uncaught")) {
			t.Errorf("the console: %s", line)
		}
	}
}
