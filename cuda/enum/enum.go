// Package enum is the one implementation of the text of trainmem's small
// enumerations: a uint8 type whose values index a table of names. String
// names a value (Type(n) for one past the table), Parse reads a name and
// refuses any other by naming the kind of value and the valid names, and
// MarshalText/UnmarshalText are the encoding pair, so that maps keyed by
// such a value are JSON objects keyed by name. Every layer has enums (cuda's
// memory categories and trace actions, model's formulas, precisions and
// shapes, zero's collectives, axes and engines), so it sits below the device
// contract and imports nothing of trainmem.
package enum

import (
	"fmt"
	"strings"
)

// Names is the table of an enumeration E: names[e] is e's name.
type Names[E ~uint8] struct {
	pkg   string // the errors' prefix: the package ("model")
	typ   string // the Go type, for a value past the table ("Precision(7)")
	what  string // the kind of value, in errors ("precision")
	names []string
}

// New is E's table: pkg and what make the errors' words ("model: unknown
// precision ..."), typ names a value past the table, names are the values'
// names in order, from 0.
func New[E ~uint8](pkg, typ, what string, names ...string) Names[E] {
	return Names[E]{pkg: pkg, typ: typ, what: what, names: names}
}

// String is e's name, or Type(e) for a value past the table.
func (n Names[E]) String(e E) string {
	if n.Valid(e) {
		return n.names[e]
	}
	return fmt.Sprintf("%s(%d)", n.typ, uint8(e))
}

// Valid reports whether e is in the table.
func (n Names[E]) Valid(e E) bool { return int(e) < len(n.names) }

// Check refuses a value past the table (a setting made in code, not
// parsed), naming the valid names.
func (n Names[E]) Check(e E) error {
	if n.Valid(e) {
		return nil
	}
	return fmt.Errorf("%s: unknown %s %s (valid: %s)", n.pkg, n.what, n.String(e), n.List())
}

// Lookup is the value named s, if one is.
func (n Names[E]) Lookup(s string) (E, bool) {
	for i, name := range n.names {
		if s == name {
			return E(i), true
		}
	}
	return 0, false
}

// Parse is the value named s; any other name is refused naming the valid
// ones.
func (n Names[E]) Parse(s string) (E, error) {
	if e, ok := n.Lookup(s); ok {
		return e, nil
	}
	return 0, fmt.Errorf("%s: unknown %s %q (valid: %s)", n.pkg, n.what, s, n.List())
}

// List is the names in order, comma-separated, for messages.
func (n Names[E]) List() string { return strings.Join(n.names, ", ") }

// Values is every value in order.
func (n Names[E]) Values() []E {
	vs := make([]E, len(n.names))
	for i := range vs {
		vs[i] = E(i)
	}
	return vs
}

// Marshal is e's name as text (encoding.TextMarshaler); a value past the
// table is an error, not a key no reader could parse.
func (n Names[E]) Marshal(e E) ([]byte, error) {
	if !n.Valid(e) {
		return nil, fmt.Errorf("%s: %s %d does not exist", n.pkg, n.what, uint8(e))
	}
	return []byte(n.names[e]), nil
}

// Unmarshal reads e from its name (encoding.TextUnmarshaler).
func (n Names[E]) Unmarshal(e *E, b []byte) error {
	v, err := n.Parse(string(b))
	*e = v
	return err
}
