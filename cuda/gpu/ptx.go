//go:build trainmem_cuda

package gpu

import _ "embed"

// The kernels (kernels/kernels.cu), as PTX for each target in PTXTargets;
// `make ptx` regenerates them, `make ptx-check` proves them fresh.
var (
	//go:embed kernels/kernels_sm80.ptx
	ptxSM80 string
	//go:embed kernels/kernels_sm90.ptx
	ptxSM90 string
)

var embeddedPTX = map[int]string{80: ptxSM80, 90: ptxSM90}
