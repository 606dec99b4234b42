// Command trainmem answers "where did the GPU memory go?" when training a
// transformer: the literature's closed-form estimate, a shape-only
// simulation of the real schedule, and measured runs, side by side.
//
// main only runs run and turns its error into an exit status: 0 for
// success, 2 for bad input (one line naming the bad value and what is
// valid), 1 for a failure while running, 128 + the signal's number for a
// run stopped by a signal (see exitCode).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"trainmem/model/files"
)

func main() {
	ctx := context.Background()
	if len(os.Args) > 1 {
		if c, ok := commands[os.Args[1]]; ok && c.graceful {
			var stop func()
			ctx, stop = withSignals(os.Stderr)
			defer stop()
		}
	}
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	var said reportedError
	if err != nil && !errors.As(err, &said) {
		fmt.Fprintln(os.Stderr, "trainmem:", err)
	}
	os.Exit(exitCode(err))
}

// reportedError is an error already written to stderr, where it had to be
// said early (before MPI_Finalize): main does not write it again.
type reportedError struct{ error }

func (e reportedError) Unwrap() error { return e.error }

// withSignals is how a long run stops: the first SIGINT, SIGTERM or SIGHUP
// (Ctrl-C, a batch scheduler's preemption, a closed terminal) ends ctx with
// a *signalError cause, so that the run finishes the step in flight, writes
// its finished records and its checkpoint, and exits with 128 + the
// signal's number; a second signal exits at once with that status, after
// removing the temporary file of any write in progress (the files being
// replaced stay as they were).
func withSignals(stderr io.Writer) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, append([]os.Signal{syscall.SIGINT, syscall.SIGTERM}, hangup...)...)
	go func() {
		first, ok := <-ch
		if !ok {
			return
		}
		s := &signalError{first}
		fmt.Fprintf(stderr, "\ntrainmem: %s: finishing the step in flight, then writing what finished (%s again stops at once)\n", s.name(), s.name())
		cancel(s)
		files.Interrupt(s) // an output FIFO that no process reads holds nothing up
		again, ok := <-ch
		if !ok {
			return
		}
		files.RemoveTemps()
		s = &signalError{again}
		fmt.Fprintf(stderr, "trainmem: %s again: stopped at once\n", s.name())
		os.Exit(128 + s.number())
	}()
	return ctx, func() {
		signal.Stop(ch)
		cancel(nil)
	}
}

// signalError is the cause of a run stopped by a signal.
type signalError struct{ sig os.Signal }

func (e *signalError) Error() string { return "stopped by " + e.name() }

func (e *signalError) name() string {
	switch e.sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	if len(hangup) > 0 && e.sig == hangup[0] {
		return "SIGHUP"
	}
	return e.sig.String()
}

// SignalNumber is the signal's number, which travels with a stop to the
// other ranks of a run over processes (bench.Signalled).
func (e *signalError) SignalNumber() int { return e.number() }

func (e *signalError) number() int {
	if s, ok := e.sig.(syscall.Signal); ok {
		return int(s)
	}
	return 0
}
