package train_test

import (
	"fmt"

	"trainmem/cuda"
	"trainmem/cuda/shape"
	"trainmem/model"
	"trainmem/train"
)

// A trainer runs the real schedule of a setup on a device: here tiny's on
// the shape-only device, which computes nothing (nil tokens) and keeps the
// allocator's books exactly as a real device would. A step's record says
// where the memory went; the peak's activations are exactly what the
// implementation-exact formula counts.
func ExampleTrainer_Step() {
	tiny, _ := model.Preset("tiny")
	s, err := model.Setup{Model: tiny, Batch: 8, Seq: 64, Precision: model.FP32, Optimizer: model.Adam, Ranks: 1, TP: 1, PP: 1}.Check()
	if err != nil {
		fmt.Println(err)
		return
	}
	dev := shape.New(0)
	defer dev.Close()
	tr, err := train.New(dev, s, train.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tr.Close()
	for range 2 { // the first step fills the allocator's cache
		if _, err := tr.Step(nil, nil); err != nil {
			fmt.Println(err)
			return
		}
	}
	st := dev.Stats()
	e, _ := s.EstimateBy(model.Exact)
	fmt.Println("peak allocated:", st.AllocatedBytes.Peak)
	fmt.Println("model states:", st.CategoryRequested[cuda.Params].Peak+st.CategoryRequested[cuda.Grads].Peak+st.CategoryRequested[cuda.AdamM].Peak+st.CategoryRequested[cuda.AdamV].Peak, "bytes,", 16*tiny.NumParams(), "by 16 a parameter")
	fmt.Println("activations:", st.CategoryRequested[cuda.Activations].Peak, "bytes; the implementation-exact formula says", e.ActivationBytes(model.Exact))
	// Output:
	// peak allocated: 8507904
	// model states: 1929216 bytes, 1929216 by 16 a parameter
	// activations: 6053888 bytes; the implementation-exact formula says 6053888
}
