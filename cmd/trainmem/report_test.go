package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// reportArgs is a small report: tiny at batch 2, sequence 32.
var reportArgs = []string{"report", "--batch", "2", "--seq", "32", "--threads", "1"}

// report DIR writes index.html with every section, table and figure, each
// table also as CSV and JSON; it refuses a directory that holds anything,
// and no DIR.
func TestReport(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	out, _ := mustRun(t, append(reportArgs, dir)...)
	if !strings.Contains(out, "report written to "+dir) {
		t.Errorf("the output does not say where: %s", out)
	}
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"validate", "checkpoint", "batch", "seq", "zero", "presets"} {
		if !bytes.Contains(page, []byte(`<section id="`+id+`">`)) {
			t.Errorf("index.html has no section %s", id)
		}
		b, err := os.ReadFile(filepath.Join(dir, id+".csv"))
		if err != nil {
			t.Fatal(err)
		}
		recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
		if err != nil || len(recs) < 2 {
			t.Errorf("%s.csv: %d records, %v", id, len(recs), err)
		}
		var doc struct {
			Columns []string         `json:"columns"`
			Rows    []map[string]any `json:"rows"`
		}
		if b, err = os.ReadFile(filepath.Join(dir, id+".json")); err == nil {
			err = json.Unmarshal(b, &doc)
		}
		if err != nil || len(doc.Rows) != len(recs)-1 || len(doc.Columns) != len(recs[0]) {
			t.Errorf("%s.json: %v, %d rows against the CSV's %d", id, err, len(doc.Rows), len(recs)-1)
		}
		if id == "batch" || id == "seq" { // measured and simulated activations agree at every point measured
			for _, row := range doc.Rows {
				if id == "seq" && row["sequence s"].(float64) > 64 { // past tiny's context: simulated only
					if row["measured"] != nil {
						t.Errorf("seq %v: measured past the context", row["sequence s"])
					}
					continue
				}
				if row["measured"] == nil || row["measured"] != row["simulated"] {
					t.Errorf("%s: measured %v, simulated %v", id, row["measured"], row["simulated"])
				}
			}
		}
	}
	if n := bytes.Count(page, []byte("<figure")); n != 8 || bytes.Count(page, []byte("<svg")) != 8 {
		t.Errorf("index.html has %d figures, want 8 inline SVGs", n)
	}
	if bytes.Contains(page, []byte("http://")) && !bytes.Contains(page, []byte("http://www.w3.org/")) || bytes.Contains(page, []byte("https://")) {
		t.Error("index.html reaches the network")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{append(append([]string(nil), reportArgs...), dir), "holds "},
		{reportArgs, "give DIR"},
		{append(append([]string(nil), reportArgs...), filepath.Join(dir, "index.html", "x")), "not a directory"},
	} {
		if _, errOut, code := runArgs(t, c.args...); code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, want 2 and %q: %s", c.args, code, c.want, errOut)
		}
	}
}

// chromium is the headless browser the page test opens it in: Debian's
// chromium, or another Chrome, by name.
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// The page opens in headless Chromium: its screenshot is a picture, every
// figure draws and every image loads (the page's own check, read from the
// DOM), and the console shows no error.
func TestReportInChromium(t *testing.T) {
	browser := chromium()
	if browser == "" {
		t.Skip("no Chromium here (Debian: apt-get install chromium); .ci/run installs it")
	}
	dir := filepath.Join(t.TempDir(), "out")
	mustRun(t, append(reportArgs, "--no-measure", dir)...)
	url := "file://" + filepath.Join(dir, "index.html")
	common := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--virtual-time-budget=10000", "--enable-logging=stderr", "--v=0"}
	// A headless Chromium on a loaded machine sometimes hangs before it
	// loads anything (its children give up on the browser process: "no
	// connection"): a run that times out is tried once more, with a
	// profile of its own; any other failure, or a second timeout, fails.
	run := func(args ...string) (string, string) {
		for try := 1; ; try++ {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			all := append(append(append([]string(nil), common...), "--user-data-dir="+t.TempDir()), args...)
			cmd := exec.CommandContext(ctx, browser, append(all, url)...)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			timedOut := ctx.Err() != nil
			cancel()
			switch {
			case err == nil:
				return out.String(), errb.String()
			case timedOut && try == 1:
				t.Logf("%s timed out (%v); trying once more", browser, err)
			default:
				t.Fatalf("%s: %v\n%s", browser, err, errb.String())
			}
		}
	}
	dom, logs := run("--dump-dom")
	if !strings.Contains(dom, `data-figures="ok 8"`) {
		i := strings.Index(dom, "data-figures")
		t.Errorf("the page's check says %q, want every one of 8 figures drawn and every image loaded", dom[max(i, 0):min(i+30, len(dom))])
	}
	if !strings.Contains(dom, `data-wrapped="0"`) { // numbers wrapped inside their cells
		i := strings.Index(dom, "data-wrapped")
		t.Errorf("the page's check says %q, want no table cell wrapped", dom[max(i, 0):min(i+20, len(dom))])
	}
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "CONSOLE") && (strings.Contains(line, "rror") || strings.Contains(line, "Uncaught")) {
			t.Errorf("the console: %s", line)
		}
	}
	shot := filepath.Join(t.TempDir(), "page.png")
	run("--window-size=1200,3000", "--screenshot="+shot)
	b, err := os.ReadFile(shot)
	if err != nil || len(b) < 20000 || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("the screenshot: %d bytes, %v", len(b), err)
	}
}
