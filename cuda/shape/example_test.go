package shape_test

import (
	"fmt"

	"trainmem/cuda"
	"trainmem/cuda/shape"
)

// A device of the contract: allocations go through the caching allocator
// (rounded to 512-byte blocks; a small one in a 2 MiB segment, a large one
// in a segment of its own rounded to 2 MiB), tagged by category, and the
// statistics say where the memory went; frees keep the segments cached.
// The shape-only device stores nothing, so 4 GiB cost a few bytes of
// books.
func ExampleDevice() {
	dev := shape.New(0)
	defer dev.Close()
	w, _ := dev.Alloc(cuda.Params, cuda.BF16, 1000) // 2,000 bytes, a 2,048-byte block
	a, _ := dev.Alloc(cuda.Activations, cuda.F32, 1<<30)
	st := dev.Stats()
	fmt.Println("requested:", st.RequestedBytes.Current)
	fmt.Println("allocated:", st.AllocatedBytes.Current)
	fmt.Println("params:", st.CategoryAllocated[cuda.Params].Current)
	fmt.Println("reserved:", st.ReservedBytes.Current, "in", st.Segment.Current, "segments")
	dev.Free(a)
	dev.Free(w)
	fmt.Println("after the frees:", dev.Stats().AllocatedBytes.Current, "allocated,", dev.Stats().ReservedBytes.Current, "cached")
	// Output:
	// requested: 4294969296
	// allocated: 4294969344
	// params: 2048
	// reserved: 4297064448 in 2 segments
	// after the frees: 0 allocated, 4297064448 cached
}
