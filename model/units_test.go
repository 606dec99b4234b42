package model

import (
	"strconv"
	"strings"
	"testing"
)

func TestParseBytes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"80GiB", 80 << 30},
		{"80 GiB", 80 << 30},
		{"80gib", 80 << 30},
		{"24GB", 24e9},
		{"24gb", 24e9},
		{"1.5e9", 1500000000},
		{"1.5E9B", 1500000000},
		{"0.5GiB", 1 << 29},
		{"0.1GiB", 107374182}, // 107,374,182.4: the fraction of a byte is dropped
		{"512", 512},
		{"512B", 512},
		{"+1KiB", 1024},
		{"2.5e-3GB", 2500000},
		{"32e9", 32e9},
		{"1TB", 1e12},
		{"0", 0},
		{"9223372036854775807", 1<<63 - 1},
		{"1EiB", 1 << 60}, // the unit the limit's message names is accepted
		{"2EB", 2e18},
		{"7.5e2", 750}, // a whole number written with a fraction
	} {
		got, err := ParseBytes(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestParseBytesErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"80XB", `unknown unit "XB"`},
		{"", "no number"},
		{"GiB", "no number"},
		{"-1GB", "negative"},
		{"1e99", "exponent"},
		{"1e999999999", "exponent"},
		{"9223372036854775808", "2^63"},
		{"10000PiB", "2^63"},
		{"1.2.3", "unknown unit"},
		{"nan", "no number"},
		{"inf", "no number"},
		{"0x10", `unknown unit "x10"`},
		{"1.5", "1.5 bytes is not a whole number"}, // was 1 byte, silently
		{"2.5B", "not a whole number"},
		{"8EiB", "2^63"},
	} {
		_, err := ParseBytes(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseBytes(%q) error %v, want one containing %q", tc.in, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "valid") {
			t.Errorf("ParseBytes(%q) error %q: want one line that says what is valid", tc.in, err)
		}
	}
}

func TestParseCount(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"7.5e9", 7500000000},
		{"7.5B", 7500000000},
		{"7.5b", 7500000000},
		{"1.5G", 1500000000},
		{"124439808", 124439808},
		{"350M", 350000000},
		{"1T", 1e12},
		{"6k", 6000},
	} {
		got, err := ParseCount(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseCount(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"1.5", "7.5X", "-3", "", "1e40", "1.23456789e3"} {
		if _, err := ParseCount(bad); err == nil {
			t.Errorf("ParseCount(%q) accepted", bad)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		n       int64
		gb, gib string
	}{
		{0, "0 B", "0 B"},
		{999, "999 B", "999 B"},
		{1000, "1.00 KB", "1000 B"},
		{24921779200, "24.92 GB", "23.21 GiB"},
		{80 << 30, "85.90 GB", "80.00 GiB"},
		{999999, "1.00 MB", "976.56 KiB"},
		{1<<63 - 1, "9.22 EB", "8.00 EiB"},
	} {
		if got := GB(tc.n); got != tc.gb {
			t.Errorf("GB(%d) = %s, want %s", tc.n, got, tc.gb)
		}
		if got := GiB(tc.n); got != tc.gib {
			t.Errorf("GiB(%d) = %s, want %s", tc.n, got, tc.gib)
		}
	}
	if got := Bytes(24921779200); got != "24.92 GB (23.21 GiB)" {
		t.Errorf("Bytes = %s", got)
	}
}

// FuzzParseBytes: any string either parses to a non-negative size or fails
// with a one-line error that says what is valid; never a panic. A parsed
// size printed as a plain integer parses back to itself.
func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"80GiB", "24GB", "1.5e9", "0.1GiB", "80XB", "-1", "1e999999", "9223372036854775807", " 7 KiB ", "1e", "1.e3", ".5MB", "+", "e9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseBytes(s)
		if err != nil {
			if strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "valid") {
				t.Fatalf("ParseBytes(%q): error %q is not one line naming what is valid", s, err)
			}
		} else {
			if n < 0 {
				t.Fatalf("ParseBytes(%q) = %d < 0", s, n)
			}
			back, err := ParseBytes(strconv.FormatInt(n, 10))
			if err != nil || back != n {
				t.Fatalf("round trip of %d: %d, %v", n, back, err)
			}
		}
		c, err := ParseCount(s)
		if err == nil && c < 0 {
			t.Fatalf("ParseCount(%q) = %d < 0", s, c)
		}
	})
}
