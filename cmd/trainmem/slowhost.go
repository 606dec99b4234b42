package main

// No silent slow path: a host without OpenBLAS multiplies in pure Go, about
// 8x slower; when a step of the run's model would take more than a few
// seconds so, trainmem says so once, with what to install.

import (
	"fmt"
	"io"
	"sync"

	"trainmem/cuda"
	"trainmem/model"
)

// pureGoFLOPSPerCore is gonum's pure-Go GEMM on GPT-2 shapes, per core
// (about 20 GFLOP/s on 2 cores of these machines; OpenBLAS reaches
// 150-170), the figure the note's estimate divides by.
const pureGoFLOPSPerCore = 10e9

// slowStepSeconds is the estimated step time beyond which the note is
// given.
const slowStepSeconds = 3

var slowHostOnce sync.Once

// slowHostNote is the note for a run of s on a host that fell back to pure
// Go for why (nil: it did not) on threads cores; "" when the step is quick
// enough or OpenBLAS is there.
func slowHostNote(why error, s model.Setup, threads int) string {
	if why == nil || threads <= 0 {
		return ""
	}
	e, err := s.Estimate()
	if err != nil {
		return ""
	}
	secs := e.Recompute.Step / (pureGoFLOPSPerCore * float64(threads))
	if secs < slowStepSeconds {
		return ""
	}
	return fmt.Sprintf("trainmem: note: the host multiplies matrices in pure Go, because OpenBLAS did not load (%v): a step of %s will take about %.0f s; "+
		"OpenBLAS makes it about 8x faster: install libopenblas0-pthread (Debian, Ubuntu: apt-get install libopenblas0-pthread; Fedora, RHEL: dnf install openblas-threads; "+
		"Arch: pacman -S openblas; macOS: brew install openblas), or set TRAINMEM_BLAS=go to choose pure Go and leave this note out", why, s.Model.Name, secs)
}

// noteSlowHost gives the note once a process, for dev (a host device) and
// the run's setup.
func noteSlowHost(w io.Writer, dev cuda.Device, s model.Setup) {
	h, ok := dev.(interface {
		PureGoFallback() error
		Threads() int
	})
	if !ok || w == nil {
		return
	}
	if note := slowHostNote(h.PureGoFallback(), s, h.Threads()); note != "" {
		slowHostOnce.Do(func() { fmt.Fprintln(w, note) })
	}
}
