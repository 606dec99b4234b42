package main

import (
	"io"
	"strings"
	"unicode/utf8"
)

// table lays out text columns: the first left-aligned (names), the others
// right-aligned (numbers), two spaces apart. Rows may be shorter than the
// widest; a row of one cell is a note that spans the table.
type table struct{ rows [][]string }

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) write(w io.Writer) error {
	var width []int
	for _, r := range t.rows {
		if len(r) == 1 {
			continue
		}
		for i, c := range r {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b, b2 strings.Builder
	for _, r := range t.rows {
		start := b.Len()
		for i, c := range r {
			pad := 0
			if len(r) > 1 {
				pad = width[i] - utf8.RuneCountInString(c)
			}
			switch {
			case i == 0:
				b.WriteString(c)
				if len(r) > 1 {
					b.WriteString(strings.Repeat(" ", pad))
				}
			default:
				b.WriteString("  ")
				b.WriteString(strings.Repeat(" ", pad))
				b.WriteString(c)
			}
		}
		line := strings.TrimRight(b.String()[start:], " ")
		b2.WriteString(line + "\n")
	}
	_, err := io.WriteString(w, b2.String())
	return err
}
