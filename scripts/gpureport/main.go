// Command gpureport prints gpu-check.sh's closing table from the files the
// script left in OUTDIR: for each setup, the simulated and measured memory
// per category (trainmem validate --format json, validate-NAME.json) and
// the measured speed (trainmem train --out, train-NAME.jsonl: step time,
// tokens/s and MFU, averaged over the steps after the first) beside the
// step the time model predicts on the card (validate's time check).
//
// It travels in the GPU bundle (make gpu-bundle), since the GPU machine may
// have no Go, Python or jq.
//
// Usage: gpureport OUTDIR
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gpureport OUTDIR")
		os.Exit(2)
	}
	if err := report(os.Stdout, os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "gpureport:", err)
		os.Exit(1)
	}
}

// validateJSON is the part of `trainmem validate --format json` read here.
type validateJSON struct {
	Device string `json:"device"`
	Rows   []struct {
		Category  string `json:"category"`
		Simulated *int64 `json:"simulated"`
		Measured  *int64 `json:"measured"`
	} `json:"rows"`
	// Time is the measured step beside the model's on the card.
	Time *struct {
		MeasuredMs  float64 `json:"measured_ms"`
		PredictedMs float64 `json:"predicted_ms"`
	} `json:"time"`
}

// record is the part of a `trainmem train --out` line read here.
type record struct {
	StepMs     float64 `json:"step_ms"`
	TokensPerS float64 `json:"tokens_per_s"`
	MFU        float64 `json:"mfu"`
}

// columns are the memory rows shown, with their headings.
var columns = []struct{ row, head string }{
	{"model_states", "states"},
	{"activations", "activations"},
	{"temporaries", "temporaries"},
	{"workspace", "workspace"},
	{"total_peak", "peak alloc"},
	{"peak_reserved", "reserved"},
}

func report(w io.Writer, dir string) error {
	files, err := filepath.Glob(filepath.Join(dir, "validate-*.json"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no validate-*.json in %s", dir)
	}
	sort.Strings(files)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := []string{"setup"}
	for _, c := range columns {
		head = append(head, c.head+" sim/meas")
	}
	head = append(head, "context", "step ms", "predicted ms", "tokens/s", "MFU", "")
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, f := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "validate-"), ".json")
		cells := []string{name}
		var v validateJSON
		data, err := os.ReadFile(f)
		if err == nil {
			err = json.Unmarshal(data, &v)
		}
		if err != nil {
			fmt.Fprintf(tw, "%s\tvalidate failed: see validate-%s.log\t\n", name, name)
			continue
		}
		rows := map[string][2]*int64{}
		for _, r := range v.Rows {
			rows[r.Category] = [2]*int64{r.Simulated, r.Measured}
		}
		for _, c := range columns {
			r := rows[c.row]
			cells = append(cells, mib(r[0])+" / "+mib(r[1]))
		}
		cells = append(cells, mib(rows["context_and_libraries"][1]))
		predicted := "-"
		if v.Time != nil && v.Time.PredictedMs > 0 {
			predicted = fmt.Sprintf("%.1f", v.Time.PredictedMs)
		}
		ms, tps, mfu, n, err := speed(filepath.Join(dir, "train-"+name+".jsonl"))
		if err != nil || n == 0 {
			cells = append(cells, "-", predicted, "-", "-")
		} else {
			if predicted != "-" {
				// A minus sign, not a hyphen: "-" is an empty cell.
				predicted += strings.Replace(fmt.Sprintf(" (%+.0f%%)", 100*(v.Time.PredictedMs/ms-1)), "-", "−", 1)
			}
			cells = append(cells, fmt.Sprintf("%.1f", ms), predicted, fmt.Sprintf("%.0f", tps), fmt.Sprintf("%.1f%%", 100*mfu))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "memory in MiB, simulated (shape-only device) / measured (the GPU's caching allocator); context: cuMemGetInfo's used minus reserved")
	fmt.Fprintln(w, "speed: mean over the steps after the first; predicted: the step on the card's kernel model (validate's time check), against the mean; MFU: model FLOPs (3 forward passes) / step time / the card's dense peak for the precision")
	return nil
}

func mib(v *int64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(*v)/(1<<20))
}

// speed averages a train JSONL file's records after the first.
func speed(path string) (ms, tps, mfu float64, n int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	defer f.Close()
	var recs []record
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return 0, 0, 0, 0, fmt.Errorf("%s: %w", path, err)
		}
		recs = append(recs, r)
	}
	if err := sc.Err(); err != nil {
		return 0, 0, 0, 0, err
	}
	if len(recs) > 1 {
		recs = recs[1:]
	}
	for _, r := range recs {
		ms += r.StepMs
		tps += r.TokensPerS
		mfu += r.MFU
	}
	if n = len(recs); n > 0 {
		ms, tps, mfu = ms/float64(n), tps/float64(n), mfu/float64(n)
	}
	return ms, tps, mfu, n, nil
}
