package train

import (
	"fmt"
	"io"
	"os"
	"strings"

	"trainmem/model"
)

// Progress draws a training run's progress: on a terminal a bar redrawn in
// place, elsewhere (a log file, CI) a line every twentieth of the run.
type Progress struct {
	w     io.Writer
	total int
	tty   bool
	every int
}

// NewProgress draws on w (nil draws nothing) for a run of total steps.
func NewProgress(w io.Writer, total int) *Progress {
	p := &Progress{w: w, total: total, every: max(1, total/20)}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

// Update shows a finished step.
func (p *Progress) Update(r Record) {
	if p.w == nil {
		return
	}
	if !p.tty && r.Step%p.every != 0 && r.Step != p.total && r.Step != 1 {
		return
	}
	const width = 24
	done := width * r.Step / max(1, p.total)
	bar := strings.Repeat("=", done) + strings.Repeat(" ", width-done)
	if done > 0 && done < width {
		bar = bar[:done-1] + ">" + bar[done:]
	}
	skip := ""
	if r.Skipped {
		skip = " (skipped: fp16 overflow)"
	}
	line := fmt.Sprintf("[%s] step %*d/%d  loss %.4f  %.1f ms/step  %s tok/s  mem %s, peak %s%s",
		bar, len(fmt.Sprint(p.total)), r.Step, p.total, r.Loss, r.StepMs, humanRate(r.TokensPerS),
		model.GiB(r.AllocatedBytes), model.GiB(r.PeakAllocatedBytes), skip)
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		if r.Step == p.total {
			fmt.Fprintln(p.w)
		}
		return
	}
	fmt.Fprintln(p.w, line)
}

// Done ends the bar early (an error, an interrupt).
func (p *Progress) Done() {
	if p.w != nil && p.tty {
		fmt.Fprintln(p.w)
	}
}

func humanRate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
