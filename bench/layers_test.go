package bench

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDevicesByCapability: above the device contract, code asks what a
// device can do (Computes, cuda.OnMachineMemory, cuda.PeakReporter,
// cuda.TimeModel), never which one it is, so that a new device needs no
// change here. Before, bench and train type-switched on *host.Device and
// *shape.Device and read "shape" in a device's name.
func TestDevicesByCapability(t *testing.T) {
	asks := regexp.MustCompile(`\.\((\*(host|shape|gpu)\.Device)\)|case \*(host|shape|gpu)\.Device|Contains\([^)]*"shape"\)`)
	for _, dir := range []string{".", "../train", "../zero"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") || strings.HasSuffix(f, "nccl.go") { // NCCL's group is the CUDA device's own
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range asks.FindAllString(string(b), -1) {
				t.Errorf("%s asks which device it holds: %s", f, m)
			}
		}
	}
}
