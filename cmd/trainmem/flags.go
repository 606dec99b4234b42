package main

// Flag values of trainmem's own: integers that say what they take, and a
// --format that lists only what its subcommand writes.

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"trainmem/bench"
	"trainmem/model"
)

// intValue is an integer flag whose error says an integer is wanted (the
// flag package's says "parse error"), also for a number such as 1e3.
type intValue struct{ p *int }

func (v intValue) String() string {
	if v.p == nil {
		return "0"
	}
	return strconv.Itoa(*v.p)
}

func (v intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err == nil {
		*v.p = n
		return nil
	}
	if f, ferr := strconv.ParseFloat(s, 64); ferr == nil && f == float64(int64(f)) && f >= -1e18 && f <= 1e18 {
		return fmt.Errorf("not an integer: write %d", int64(f))
	}
	if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
		return fmt.Errorf("out of range for an integer")
	}
	return fmt.Errorf("not an integer (e.g. 8)")
}

// intVar defines an integer flag; usage names the value in backquotes
// (flag.UnquoteUsage), e.g. "micro-batch per rank, `b`".
func intVar(fs *flag.FlagSet, p *int, name string, value int, usage string) {
	*p = value
	fs.Var(intValue{p}, name, usage)
}

// unsetBool is a boolean flag whose default is someone else's (a preset's
// choice): unset, it has no value of its own, so its help names that default
// in the usage, not flag's "(default true)".
type unsetBool struct{ v, set bool }

func (b *unsetBool) String() string {
	if b == nil || !b.set {
		return ""
	}
	return strconv.FormatBool(b.v)
}

func (b *unsetBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("not a boolean (valid: true, false)")
	}
	b.v, b.set = v, true
	return nil
}

// IsBoolFlag lets --bias stand alone for --bias=true.
func (b *unsetBool) IsBoolFlag() bool { return true }

// uint64Value is a non-negative integer flag (a seed).
type uint64Value struct{ p *uint64 }

func (v uint64Value) String() string {
	if v.p == nil {
		return "0"
	}
	return strconv.FormatUint(*v.p, 10)
}

func (v uint64Value) Set(s string) error {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("not a non-negative integer (valid: 0 to %d)", uint64(1<<64-1))
	}
	*v.p = n
	return nil
}

func uint64Var(fs *flag.FlagSet, p *uint64, name string, value uint64, usage string) {
	*p = value
	fs.Var(uint64Value{p}, name, usage)
}

// parsedVar defines a flag read by parse (model.ParsePrecision, ...): a
// name parse refuses is the flag's error, its message naming the valid
// values.
func parsedVar[T any](fs *flag.FlagSet, p *T, name, usage string, parse func(string) (T, error)) {
	fs.Func(name, usage, func(s string) error {
		v, err := parse(s)
		*p = v
		return err
	})
}

// formulaVar defines --formula, the activation formula: zero_paper or
// korthikanti (the default); purpose says what the subcommand uses it for
// ("to fit by").
func formulaVar(fs *flag.FlagSet, p *model.Formula, purpose string) {
	*p = model.Korthikanti
	parsedVar(fs, p, "formula", "activation formula "+purpose+": zero_paper, korthikanti or trainmem (the exact one) (default korthikanti)", model.ParseFormula)
}

// formatFlag is --format: text (for people, the default) or another of the
// formats its subcommand writes.
type formatFlag struct {
	v     string
	valid []string
}

// newFormatFlag defines --format on fs with the formats the subcommand
// writes, text first.
func newFormatFlag(fs *flag.FlagSet, valid ...string) *formatFlag {
	f := &formatFlag{v: valid[0], valid: valid}
	fs.Var(f, "format", "output: "+strings.Join(valid, ", ")+" (`format`)")
	return f
}

func (f *formatFlag) String() string {
	if f == nil {
		return ""
	}
	return f.v
}

func (f *formatFlag) Set(s string) error {
	for _, v := range f.valid {
		if s == v {
			f.v = s
			return nil
		}
	}
	return fmt.Errorf("unknown format %q (valid: %s)", s, strings.Join(f.valid, ", "))
}

// given reports whether the named flag was given on the command line.
func given(fs *flag.FlagSet, name string) bool {
	seen := false
	fs.Visit(func(fl *flag.Flag) { seen = seen || fl.Name == name })
	return seen
}

// parseMemory reads --memory, a device's capacity: a positive size.
func parseMemory(s string) (int64, error) {
	n, err := model.ParseBytes(s)
	if err == nil && n <= 0 {
		err = fmt.Errorf("%q must be positive (e.g. 80GiB, 24GB)", s)
	}
	return n, err
}

// writeReport writes rep in the format --format chose: text, json or csv
// (a report without a CSV writer is never offered csv).
func writeReport(w io.Writer, format string, rep bench.Report) error {
	switch format {
	case "json":
		return rep.WriteJSON(w)
	case "csv":
		c, ok := rep.(bench.CSVReport)
		if !ok {
			return fmt.Errorf("internal: %T has no CSV writer", rep)
		}
		return c.WriteCSV(w)
	case "summary":
		c, ok := rep.(bench.SummaryReport)
		if !ok {
			return usagef("--format summary is one device's memory summary; this report has none (valid: text, json)")
		}
		return c.WriteSummary(w)
	}
	return rep.WriteText(w)
}
