package main

// --memory-trace: every allocator event of a run's last step (or of the
// step that ran out of memory) for the viewers: PyTorch's memory snapshot
// and a Chrome trace.

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"trainmem/bench"
	"trainmem/model"
	"trainmem/model/files"
	"trainmem/zero"
)

// traceFlag is --memory-trace FILE and --plot-timeline FILE.
type traceFlag struct{ base, plot string }

func addTraceFlag(fs *flag.FlagSet) *traceFlag {
	t := &traceFlag{}
	fs.StringVar(&t.base, "memory-trace", "", "write the last step's allocator events to `FILE`.pickle (PyTorch's memory snapshot) and FILE.json (a Chrome trace)")
	fs.StringVar(&t.plot, "plot-timeline", "", "draw the last step's memory by category over its allocator events to `FILE` ("+bench.PlotFormats+")")
	return t
}

// paths are the files the flags write, for files.Check: the trace of one
// device at FILE, or with ranks (not nil) each rank's at bench.RankBase,
// and the plot. A plot of another format is a usage error.
func (t *traceFlag) paths(ranks []int) ([]files.Path, error) {
	var out []files.Path
	if t.base != "" {
		bases := []string{t.base}
		if ranks != nil {
			bases = bases[:0]
			for _, r := range ranks {
				bases = append(bases, bench.RankBase(t.base, r))
			}
		}
		for _, b := range bases {
			snap, chrome := bench.TraceFiles(b)
			out = append(out, files.Path{Flag: "--memory-trace", Name: snap}, files.Path{Flag: "--memory-trace", Name: chrome})
		}
	}
	if t.plot != "" {
		if err := bench.CheckPlotPath(t.plot); err != nil {
			return nil, usagef("--plot-timeline: %w", err)
		}
		out = append(out, files.Path{Flag: "--plot-timeline", Name: t.plot})
	}
	return out, nil
}

// check checks every file of a command before any work, in one
// files.Check: its inputs, its other outputs and the flags' files (ranks:
// as paths), so that no output, derived names included, replaces an input
// or another output.
func (t *traceFlag) check(ranks []int, inputs, outputs []files.Path) error {
	paths, err := t.paths(ranks)
	if err != nil {
		return err
	}
	return files.Check(inputs, append(append([]files.Path(nil), outputs...), paths...))
}

// given says whether either flag was given.
func (t *traceFlag) given() bool { return t.base != "" || t.plot != "" }

// recorder is the trace to record into, nil without either flag.
func (t *traceFlag) recorder() *bench.MemoryTrace {
	if !t.given() {
		return nil
	}
	return &bench.MemoryTrace{}
}

// write writes the recorded trace and says where (in text output); a run
// that failed (runErr) still writes what it recorded, and the error of the
// run comes first.
func (t *traceFlag) write(w io.Writer, rec *bench.MemoryTrace, format string, runErr error) error {
	if rec == nil {
		return runErr
	}
	var msgs []string
	if t.plot != "" {
		if err := bench.PlotTimeline(t.plot, []bench.TimelinePanel{{Title: fmt.Sprintf("step %d on %s", rec.Step, rec.Device), Trace: rec}}); err != nil {
			if runErr != nil {
				return runErr
			}
			return fmt.Errorf("the timeline plot was not written: %w", err)
		}
		msgs = append(msgs, "timeline plot written to "+t.plot)
	}
	if t.base == "" {
		return t.report(w, msgs, format, runErr)
	}
	if err := rec.Write(t.base); err != nil {
		if runErr != nil {
			return runErr
		}
		return fmt.Errorf("the memory trace was not written: %w", err)
	}
	snap, chrome := bench.TraceFiles(t.base)
	req, all := rec.ViewerPeak()
	msgs = append(msgs, fmt.Sprintf("memory trace of step %d written to %s (drop it on pytorch.org/memory_viz: its Active Memory Timeline peaks at %s, the tensors' requested bytes as PyTorch records them; in the allocator's 512-byte blocks the peak is %s) and %s (open it at ui.perfetto.dev)",
		rec.Step, snap, model.Bytes(req), model.Bytes(all), chrome))
	return t.report(w, msgs, format, runErr)
}

// report says what was written: after the report, or with the run's error.
func (t *traceFlag) report(w io.Writer, msgs []string, format string, runErr error) error {
	msg := strings.Join(msgs, "; ")
	if runErr != nil {
		return fmt.Errorf("%w (%s: what filled the device, up to the failed request)", runErr, msg)
	}
	if format != "json" {
		fmt.Fprintf(w, "\n%s\n", msg)
	}
	return nil
}

// rankRecorder is the ranks' traces to record into, nil without either
// flag.
func (t *traceFlag) rankRecorder() bench.RankTraces {
	if !t.given() {
		return nil
	}
	return bench.RankTraces{}
}

// writeRanks writes the ranks' traces (each rank's files) and their
// timeline (one panel a rank), and says where.
func (t *traceFlag) writeRanks(w io.Writer, rt bench.RankTraces, format string, runErr error) error {
	if rt == nil || len(rt) == 0 {
		return runErr
	}
	var msgs []string
	if t.plot != "" {
		if err := bench.PlotTimeline(t.plot, rt.Panels()); err != nil {
			if runErr != nil {
				return runErr
			}
			return fmt.Errorf("the timeline plot was not written: %w", err)
		}
		msgs = append(msgs, "timeline plot (one panel a rank) written to "+t.plot)
	}
	if t.base != "" {
		if err := rt.Write(t.base); err != nil {
			if runErr != nil {
				return runErr
			}
			return fmt.Errorf("the memory traces were not written: %w", err)
		}
		ranks := rt.Ranks()
		first, _ := bench.TraceFiles(bench.RankBase(t.base, ranks[0]))
		msgs = append(msgs, fmt.Sprintf("memory traces of %d ranks written to %s and the like (one .pickle and one .json a rank: pytorch.org/memory_viz, ui.perfetto.dev)", len(ranks), first))
		// Each rank's viewer peak, ranks of one peak folded into a line.
		var peaks []string
		for i := 0; i < len(ranks); {
			req, all := rt[ranks[i]].ViewerPeak()
			j := i + 1
			for j < len(ranks) {
				if r2, a2 := rt[ranks[j]].ViewerPeak(); r2 != req || a2 != all {
					break
				}
				j++
			}
			who := fmt.Sprintf("rank %d", ranks[i])
			if j-i > 1 {
				who = fmt.Sprintf("ranks %d-%d", ranks[i], ranks[j-1])
			}
			peaks = append(peaks, fmt.Sprintf("%s at %s (%s in the allocator's 512-byte blocks)", who, model.Bytes(req), model.Bytes(all)))
			i = j
		}
		msgs = append(msgs, "the viewer's Active Memory Timeline peaks at the tensors' requested bytes, as PyTorch records them: "+strings.Join(peaks, ", "))
	}
	return t.report(w, msgs, format, runErr)
}

// ownRanks are the ranks this process runs: every rank in one process, or
// the launcher's one.
func ownRanks(l zero.Launch, n int) []int {
	if l.Processes() {
		return []int{l.Rank}
	}
	out := make([]int, n)
	for r := range out {
		out[r] = r
	}
	return out
}
