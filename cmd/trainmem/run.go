package main

// The command line: a table of subcommands, each in a file of its own that
// registers itself (estimate.go, fit.go, ...). A subcommand parses its flags
// with its own flag.FlagSet and returns an error; bad input is a usageError,
// which main turns into exit status 2.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"trainmem/bench"
	"trainmem/model"
	"trainmem/model/files"
	"trainmem/zero"
)

// command is one subcommand.
type command struct {
	name    string
	summary string // one line for trainmem's help
	// run parses args (the flags after the subcommand's name) and writes
	// the answer to stdout; usage and flag help go to stderr.
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	// graceful commands stop cleanly when ctx ends (a signal: see
	// main.go): they finish the step in flight and write what finished.
	// Signals end the others at once.
	graceful bool
}

var commands = map[string]command{}

// register adds a subcommand; each subcommand file calls it from init.
func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("trainmem: subcommand " + c.name + " registered twice")
	}
	commands[c.name] = c
}

// usageError is bad input: a flag, value or argument that is not valid.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// usagef makes a usageError.
func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// badSetup makes a usageError of a setup's error; a shape too large
// (*model.SizeError) starts with the flags whose values it comes from.
func badSetup(err error) error {
	var se *model.SizeError
	if errors.As(err, &se) {
		var fl []string
		for _, f := range se.Factors {
			fl = append(fl, fmt.Sprintf("--%s %d", f.Name, f.Value))
		}
		return usagef("%s: %w", strings.Join(fl, " "), err)
	}
	return usageError{err}
}

// exitCode maps run's error to the process exit status: 0 for success; 2
// for bad input of every kind (a flag, a shape too large, a path refused
// before the work, an input file missing or invalid, a corpus shorter than
// a batch); 1 for a failure while running (a device error, a diverged run,
// out of memory on the simulated card); 128 + the signal's number for a run
// stopped by SIGINT, SIGTERM or SIGHUP (130, 143, 129), the shells'
// convention.
func exitCode(err error) int {
	var u usageError
	var in *files.InputError
	var path *files.PathError
	var sig *signalError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &sig):
		// A run a signal stopped, whatever the error that carries it
		// (an output FIFO no process read before it: exit 1 before).
		return 128 + sig.number()
	case errors.As(err, &u), errors.As(err, &in), errors.As(err, &path):
		return 2
	}
	// A run its machine cannot hold is refused before it starts, as a
	// shape too large is.
	var tooBig *bench.TooLargeError
	if errors.As(err, &tooBig) {
		return 2
	}
	// A rank stopped by a peer's signal exits as the signalled rank does.
	var stop *zero.StopError
	if errors.As(err, &stop) && stop.Signal > 0 {
		return 128 + stop.Signal
	}
	return 1
}

// run is trainmem: args are the arguments after the program name; ctx
// ends when the process is asked to stop.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	// Output that was not written is not reported as written: the first
	// failed write to stdout (a full disk, /dev/full, a closed pipe) fails
	// the command, which would otherwise exit 0 having said nothing.
	out := &files.FirstError{W: stdout}
	stdout = out
	defer func() {
		if out.Err != nil && err == nil {
			err = fmt.Errorf("writing the output: %w", out.Err)
		}
	}()
	if len(args) == 0 {
		usage(stderr)
		return usagef("no subcommand (valid: %s)", strings.Join(commandNames(), ", "))
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(rest) > 0 {
			if c, ok := commands[rest[0]]; ok {
				return c.run(ctx, []string{"-h"}, stdout, stdout)
			}
			return usagef("help: unknown subcommand %q (valid: %s)", rest[0], strings.Join(commandNames(), ", "))
		}
		usage(stdout)
		return nil
	}
	c, ok := commands[name]
	if !ok {
		return usagef("unknown subcommand %q (valid: %s)", name, strings.Join(commandNames(), ", "))
	}
	if err := c.run(ctx, rest, stdout, stderr); err != nil {
		if strings.HasPrefix(err.Error(), name+": ") {
			return err // a package named as the subcommand (train) said it already
		}
		return fmt.Errorf("%s: %w", name, err)
	}
	// A signal that came when nothing was left to cut short (a report's
	// last section, a sweep's last policy) still sets the exit status, as
	// the shells' convention has it: the outputs are whole, and the
	// message says so (a report stopped by SIGINT exited 0).
	var sig *signalError
	if ctx.Err() != nil && errors.As(context.Cause(ctx), &sig) {
		return fmt.Errorf("%s: finished and wrote its outputs whole, but %w", name, sig)
	}
	return nil
}

func commandNames() []string {
	var ns []string
	for n := range commands {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

func usage(w io.Writer) {
	fmt.Fprint(w, `trainmem answers "where did the GPU memory go?" when training a transformer.

usage: trainmem <subcommand> [flags]

subcommands:
`)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, n := range commandNames() {
		fmt.Fprintf(tw, "  %s\t%s\n", n, commands[n].summary)
	}
	tw.Flush()
	fmt.Fprint(w, "\nRun 'trainmem help <subcommand>' or 'trainmem <subcommand> -h' for its flags; docs/guide.md is the user guide.\n")
}

// parseFlags parses a subcommand's flags. stop says the subcommand has
// nothing more to do and returns err: after a parse error, which comes back
// as a one-line usage error (the flag package's own message, which names the
// flag and the value), and after -h, which prints the subcommand's usage to
// stderr and comes back as a nil error.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer, synopsis string) (stop bool, err error) {
	_, stop, err = parseFlagsArg(fs, args, stderr, synopsis, "")
	return stop, err
}

// parseFlagsArg is parseFlags for a subcommand that takes one argument,
// named argName in messages ("DIR"), before, between or after its flags;
// "" takes none.
func parseFlagsArg(fs *flag.FlagSet, args []string, stderr io.Writer, synopsis, argName string) (arg string, stop bool, err error) {
	fs.SetOutput(io.Discard) // errors are returned, not printed twice
	fs.Usage = func() {}
	for {
		err = fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			usage := fmt.Sprintf("usage: trainmem %s [flags]", fs.Name())
			if argName != "" {
				usage += " " + argName
			}
			fmt.Fprintf(stderr, "%s\n\n%s\n\nflags (each explained at length in %s):\n", usage, synopsis, guideFlags)
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return "", true, nil
		}
		if err != nil {
			// A flag that belongs to another subcommand says so.
			if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -"); ok {
				if why, ok := elsewhere(fs.Name(), strings.TrimPrefix(name, "-")); ok {
					return "", true, usagef("--%s: %s", strings.TrimPrefix(name, "-"), why)
				}
			}
			return "", true, usagef("%v (run 'trainmem %s -h' for the flags)", err, fs.Name())
		}
		if fs.NArg() == 0 {
			fs.SetOutput(stderr) // the notes on the flags' values go to stderr (setupFlags.lora)
			return arg, false, nil
		}
		if argName == "" || arg != "" {
			return "", true, usagef("unexpected argument %q (run 'trainmem %s -h' for the flags and arguments)", fs.Arg(0), fs.Name())
		}
		arg, args = fs.Arg(0), fs.Args()[1:]
	}
}
