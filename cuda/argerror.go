package cuda

import "fmt"

// ArgError is a bad argument of a setting or a call: what the argument
// is, the value given, what is wrong with it and what is valid. Its Error
// is "pkg: what value: problem (valid: ...)". A caller that knows where
// the argument came from (a flag, a config field) takes Detail, the words
// without the package, or the fields, through errors.As: nothing matches
// the message's text. Every layer's range errors are ArgErrors (cuda's
// rooflines, model's shapes, setups and clusters); it lives in the
// contract, the lowest package, so that all of them can make one.
type ArgError struct {
	Pkg     string // the package that refuses it: "cuda", "model"
	What    string // the argument, in the package's words: "batch", "GPUs a node"
	Value   string // as given: "0", "1e-308 TFLOP/s"
	Problem string // "out of range", "must be a positive integer"
	Valid   string // what is valid ("1 to 65536"); "" when Problem says it
}

// Argf makes an ArgError; value is formatted with %v.
func Argf(pkg, what string, value any, problem, valid string) *ArgError {
	return &ArgError{Pkg: pkg, What: what, Value: fmt.Sprint(value), Problem: problem, Valid: valid}
}

func (e *ArgError) Error() string { return e.Pkg + ": " + e.Detail() }

// Detail is the error without its package: "what value: problem (valid:
// ...)".
func (e *ArgError) Detail() string {
	s := e.What + " " + e.Value + ": " + e.Problem
	if e.Valid != "" {
		s += " (valid: " + e.Valid + ")"
	}
	return s
}
