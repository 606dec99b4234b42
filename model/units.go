package model

// Byte sizes and counts as people write them ("80GiB", "24GB", "1.5e9",
// "7.5B parameters") and as trainmem prints them.
//
// Two conventions meet here and both are kept apart on purpose: GB is 10^9
// bytes, as the source articles and the ZeRO paper count (its "120 GB" for
// 7.5B parameters is 16 · 7.5e9 bytes); GiB is 2^30 bytes, as PyTorch's
// memory reports and nvidia-smi's MiB count. Parsing is exact (decimal
// arithmetic, no float64 rounding), so "1.5e9" is 1,500,000,000 and
// "0.5GiB" is 536,870,912.

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
)

// multiplier is a unit or suffix of a number and the multiple it stands for.
type multiplier struct {
	name string
	mult int64
}

// multipleOf is what the unit name stands for among units, matched
// case-insensitively: 1 for no unit, 0 for a name not among them.
func multipleOf(units []multiplier, name string) int64 {
	if name == "" {
		return 1
	}
	for _, u := range units {
		if strings.EqualFold(name, u.name) {
			return u.mult
		}
	}
	return 0
}

// byteUnits are the units ParseBytes accepts, matched case-insensitively.
var byteUnits = []multiplier{
	{"B", 1},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"PB", 1e15}, {"EB", 1e18},
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"PiB", 1 << 50}, {"EiB", 1 << 60},
}

// countUnits are the suffixes ParseCount accepts, matched case-insensitively
// (B and G both mean 10^9: "7.5B parameters").
var countUnits = []multiplier{
	{"K", 1e3}, {"M", 1e6}, {"B", 1e9}, {"G", 1e9}, {"T", 1e12},
}

const validByteUnits = "B, KB, MB, GB, TB, PB, EB, KiB, MiB, GiB, TiB, PiB, EiB"

// maxExponent bounds the decimal exponent a size may carry: 10^30 bytes is
// already far beyond int64, and a bound keeps "1e999999999" from costing
// the big-number arithmetic any time.
const maxExponent = 30

// ParseBytes reads a byte size: a non-negative decimal number (digits, an
// optional fraction, an optional exponent: "80", "1.5e9", "0.5") followed by
// an optional unit: B, KB, MB, GB, TB, PB, EB (powers of 10) or KiB, MiB,
// GiB, TiB, PiB, EiB (powers of 2), in any letter case, with or without a
// space. A fraction of a byte left by a larger unit is dropped ("0.1GiB" is
// 107,374,182 bytes); a fraction of a number of bytes ("1.5", "2.5B") is an
// error, since it is more likely a missing unit than a wish for one byte.
// Sizes beyond 2^63-1 bytes are an error.
func ParseBytes(s string) (int64, error) {
	r, unit, err := splitNumber(s)
	if err != nil {
		return 0, fmt.Errorf("model: bad size %q: %v (valid: a number with an optional unit %s, e.g. 80GiB, 24GB, 1.5e9)", s, err, validByteUnits)
	}
	mult := multipleOf(byteUnits, unit)
	if mult == 0 {
		return 0, fmt.Errorf("model: bad size %q: unknown unit %q (valid units: %s)", s, unit, validByteUnits)
	}
	if mult == 1 && !r.IsInt() {
		num := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), unit))
		return 0, fmt.Errorf("model: bad size %q: %s bytes is not a whole number of bytes (valid: whole bytes, or a unit: %sGiB, %sGB)", s, num, num, num)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	n := new(big.Int).Quo(r.Num(), r.Denom()) // floor: r is non-negative
	if !n.IsInt64() {
		return 0, fmt.Errorf("model: bad size %q: more than 2^63-1 bytes (valid: up to 9223372036854775807 bytes, just under 8EiB)", s)
	}
	return n.Int64(), nil
}

// ParseCount reads a whole count such as a parameter count: a non-negative
// decimal number with an optional exponent and an optional suffix K (10^3),
// M (10^6), B or G (10^9), T (10^12) in any letter case: "7.5e9", "7.5B",
// "124439808". The value must be a whole number.
func ParseCount(s string) (int64, error) {
	r, unit, err := splitNumber(s)
	if err != nil {
		return 0, fmt.Errorf("model: bad count %q: %v (valid: a whole number, e.g. 7.5e9, 7.5B, 124439808)", s, err)
	}
	mult := multipleOf(countUnits, unit)
	if mult == 0 {
		return 0, fmt.Errorf("model: bad count %q: unknown suffix %q (valid: none, K, M, B or G, T)", s, unit)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("model: bad count %q: not a whole number (it is %s)", s, r.FloatString(3))
	}
	if !r.Num().IsInt64() {
		return 0, fmt.Errorf("model: bad count %q: more than 2^63-1 (valid: a whole number up to 9.2e18)", s)
	}
	return r.Num().Int64(), nil
}

// splitNumber parses the leading decimal number of s exactly and returns it
// with the rest of s, spaces trimmed.
func splitNumber(s string) (*big.Rat, string, error) {
	t := strings.TrimSpace(s)
	i := 0
	digits := func() int {
		start := i
		for i < len(t) && t[i] >= '0' && t[i] <= '9' {
			i++
		}
		return i - start
	}
	if i < len(t) && t[i] == '+' {
		i++
	}
	intDigits := digits()
	fracDigits := 0
	if i < len(t) && t[i] == '.' {
		i++
		fracDigits = digits()
	}
	if intDigits+fracDigits == 0 {
		if strings.HasPrefix(t, "-") {
			return nil, "", errors.New("negative")
		}
		return nil, "", errors.New("no number")
	}
	mantissa := t[:i]
	exp := 0
	// An exponent only where 'e' is followed by digits, so that a unit
	// cannot be mistaken for one.
	if i < len(t) && (t[i] == 'e' || t[i] == 'E') {
		j := i + 1
		if j < len(t) && (t[j] == '+' || t[j] == '-') {
			j++
		}
		k := j
		for k < len(t) && t[k] >= '0' && t[k] <= '9' {
			k++
		}
		if k > j {
			if k-j > 3 {
				return nil, "", fmt.Errorf("exponent %s out of range (at most %d)", t[i+1:k], maxExponent)
			}
			e := 0
			for _, c := range t[j:k] {
				e = e*10 + int(c-'0')
			}
			if t[i+1] == '-' {
				e = -e
			}
			if e > maxExponent || e < -maxExponent {
				return nil, "", fmt.Errorf("exponent %d out of range (at most %d)", e, maxExponent)
			}
			exp = e
			i = k
		}
	}
	if len(mantissa) > 64 {
		return nil, "", errors.New("too many digits")
	}
	r, ok := new(big.Rat).SetString(strings.TrimPrefix(mantissa, "+"))
	if !ok {
		return nil, "", fmt.Errorf("cannot read %q as a number", mantissa)
	}
	if exp != 0 {
		p := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(abs(exp))), nil))
		if exp > 0 {
			r.Mul(r, p)
		} else {
			r.Quo(r, p)
		}
	}
	return r, strings.TrimSpace(t[i:]), nil
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// GB formats n bytes in powers of 10 (B, KB, MB, GB, TB), two decimals:
// 24921779200 → "24.92 GB". This is the articles' and the ZeRO paper's unit.
func GB(n int64) string { return scaled(n, 1000, []string{"B", "KB", "MB", "GB", "TB", "PB", "EB"}) }

// GiB formats n bytes in powers of 2 (B, KiB, MiB, GiB, TiB), two decimals:
// 24921779200 → "23.21 GiB". This is PyTorch's unit.
func GiB(n int64) string {
	return scaled(n, 1024, []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"})
}

// Bytes formats n bytes both ways: "24.92 GB (23.21 GiB)".
func Bytes(n int64) string { return GB(n) + " (" + GiB(n) + ")" }

func scaled(n int64, base float64, units []string) string {
	if n < 0 {
		return "-" + scaled(-n, base, units) // -2^63 cannot occur for byte counts
	}
	if n < int64(base) {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	i := 0
	for v >= base && i < len(units)-1 {
		v /= base
		i++
	}
	// Carry 999.996 KB up to "1.00 MB" rather than printing "1000.00 KB".
	if math.Round(v*100)/100 >= base && i < len(units)-1 {
		v /= base
		i++
	}
	return fmt.Sprintf("%.2f %s", v, units[i])
}
