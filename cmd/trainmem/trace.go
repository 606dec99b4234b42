package main

// --memory-trace: every allocator event of a run's last step (or of the
// step that ran out of memory) for the viewers: PyTorch's memory snapshot
// and a Chrome trace.

import (
	"flag"
	"fmt"
	"io"

	"trainmem/bench"
	"trainmem/model/files"
)

// traceFlag is --memory-trace FILE.
type traceFlag struct{ base string }

func addTraceFlag(fs *flag.FlagSet) *traceFlag {
	t := &traceFlag{}
	fs.StringVar(&t.base, "memory-trace", "", "write every allocator event of the last step (or of the one that ran out of memory) to `FILE`.pickle, PyTorch's memory snapshot (open it at pytorch.org/memory_viz), and FILE.json, a Chrome trace (ui.perfetto.dev), each atomically")
	return t
}

// paths are the files --memory-trace writes, for files.Check.
func (t *traceFlag) paths() []files.Path {
	if t.base == "" {
		return nil
	}
	snap, chrome := bench.TraceFiles(t.base)
	return []files.Path{{Flag: "--memory-trace", Name: snap}, {Flag: "--memory-trace", Name: chrome}}
}

// recorder is the trace to record into, nil without the flag.
func (t *traceFlag) recorder() *bench.MemoryTrace {
	if t.base == "" {
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
	if err := rec.Write(t.base); err != nil {
		if runErr != nil {
			return runErr
		}
		return fmt.Errorf("the memory trace was not written: %w", err)
	}
	snap, chrome := bench.TraceFiles(t.base)
	msg := fmt.Sprintf("memory trace of step %d written to %s (drop it on pytorch.org/memory_viz) and %s (open it at ui.perfetto.dev)", rec.Step, snap, chrome)
	if runErr != nil {
		return fmt.Errorf("%w (%s: what filled the device, up to the failed request)", runErr, msg)
	}
	if format != "json" {
		fmt.Fprintf(w, "\n%s\n", msg)
	}
	return nil
}
