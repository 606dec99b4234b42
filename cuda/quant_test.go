package cuda

import (
	"bufio"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestDynamicMaps checks the 8-bit code maps against bitsandbytes' own:
// testdata/dynamic_map_{signed,unsigned}.hex are the 256 values of
// create_dynamic_map(signed=True) and (signed=False) from bitsandbytes
// 0.50.1 (bitsandbytes/functional.py), run under torch 1.13.1's CPU
// kernels, as big-endian fp32 bit patterns, one a line.
func TestDynamicMaps(t *testing.T) {
	for _, tc := range []struct {
		m    CodeMap
		file string
	}{{DynamicSigned, "testdata/dynamic_map_signed.hex"}, {DynamicUnsigned, "testdata/dynamic_map_unsigned.hex"}} {
		f, err := os.Open(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		var want []float32
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			bits, err := strconv.ParseUint(strings.TrimSpace(sc.Text()), 16, 32)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, math.Float32frombits(uint32(bits)))
		}
		f.Close()
		if len(want) != 256 {
			t.Fatalf("%s: %d values", tc.file, len(want))
		}
		got := tc.m.Values()
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s[%d] = %.9g (%#08x), bitsandbytes' %.9g (%#08x)", tc.m, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
			}
		}
		for i := 1; i < 256; i++ {
			if !(got[i] > got[i-1]) {
				t.Errorf("%s is not strictly ascending at %d", tc.m, i)
			}
		}
	}
	if s, u := DynamicSigned.Values(), DynamicUnsigned.Values(); s[127] != 0 || s[255] != 1 || u[0] != 0 || u[255] != 1 {
		t.Errorf("0 and 1: signed[127] %g, signed[255] %g, unsigned[0] %g, unsigned[255] %g", s[127], s[255], u[0], u[255])
	}
}

// TestKernelTables checks the CUDA kernels' copies of the NF4 values and
// the code maps (gpu/kernels/quant.cuh) against Go's.
func TestKernelTables(t *testing.T) {
	src, err := os.ReadFile("gpu/kernels/quant.cuh")
	if err != nil {
		t.Fatal(err)
	}
	table := func(name string) []float64 {
		i := strings.Index(string(src), name)
		if i < 0 {
			t.Fatalf("quant.cuh has no %s", name)
		}
		body := string(src[i:])
		body = body[:strings.Index(body, "};")]
		var out []float64
		for _, m := range regexp.MustCompile(`-?[0-9][0-9.e+-]*f`).FindAllString(body[strings.Index(body, "{"):], -1) {
			v, err := strconv.ParseFloat(strings.TrimSuffix(m, "f"), 32)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
		return out
	}
	nf4 := table("NF4_VALUES[16] =")
	if len(nf4) != 16 {
		t.Fatalf("quant.cuh's NF4_VALUES has %d values", len(nf4))
	}
	for i, v := range NF4Values {
		if nf4[i] != float64(float32(v)) || float64(float32(v)) != v {
			t.Errorf("NF4 value %d: quant.cuh %g, Go %g (each must be exact in fp32)", i, nf4[i], v)
		}
	}
	maps := table("CODE_MAPS[2][256] =")
	if len(maps) != 512 {
		t.Fatalf("quant.cuh's CODE_MAPS has %d values", len(maps))
	}
	for k, m := range []CodeMap{DynamicSigned, DynamicUnsigned} {
		for i, v := range m.Values() {
			if float32(maps[k*256+i]) != v {
				t.Errorf("%s[%d]: quant.cuh %g, Go %g", m, i, maps[k*256+i], v)
			}
		}
	}
}

// TestNF4Bits checks the storage of NF4 with double quantization, the
// bits a weight QLoRA (Section 3, "Double Quantization") gives:
// 4 + 8/64 + 32/(64·256) = 4.127 for a count of whole second-level
// blocks.
func TestNF4Bits(t *testing.T) {
	n := 64 * 256 * 10
	bits := float64(8*(NF4Bytes(n)+Blocks(n, NF4Block)+4*Blocks(Blocks(n, NF4Block), Block8))) / float64(n)
	if want := 4 + 8.0/64 + 32.0/(64*256); bits != want {
		t.Errorf("%g bits a weight, want %g", bits, want)
	}
	if math.Abs(bits-4.127) > 0.0005 {
		t.Errorf("%g bits a weight, QLoRA's 4.127", bits)
	}
}
