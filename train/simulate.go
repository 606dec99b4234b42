package train

import (
	"context"

	"trainmem/cuda"
	"trainmem/cuda/shape"
	"trainmem/model"
)

// Simulate runs training steps of setup on a device that keeps books only
// (cuda/shape): the real schedule through the real allocator, nothing
// computed. It returns the last step's record; a schedule that does not fit
// the device's capacity fails with the allocator's *cuda.OutOfMemoryError.
// Two steps are run by default because the first step fills the allocator's
// cache and the second shows the steady state. A tracer, when given,
// receives the steps' allocator events (Trainer.Trace).
func Simulate(dev cuda.Device, c model.Checked, steps int, trace cuda.Tracer) (Record, cuda.Stats, error) {
	if steps <= 0 {
		steps = 2
	}
	tr, err := New(dev, c, Options{Offload: ShapeOffload(c)})
	if err != nil {
		return Record{}, cuda.Stats{}, err
	}
	defer tr.Close()
	if trace != nil {
		if err := tr.Trace(trace); err != nil {
			return Record{}, cuda.Stats{}, err
		}
		defer tr.Trace(nil)
	}
	batches, err := OpenBatches(dev, "", c.Setup(), 1)
	if err != nil {
		return Record{}, cuda.Stats{}, err
	}
	defer batches.Close()
	looped, err := Loop(context.Background(), One(tr), steps, func(int, int) ([]int32, []int32, error) { return batches.Next() }, nil)
	var rec Record
	if looped.Last != nil {
		rec = looped.Last[0]
	}
	return rec, dev.Stats(), err
}

// ShapeOffload opens a simulated rank's offload device when c offloads
// (Options.Offload; nil otherwise): the host memory's books, a shape-only
// device of their own.
func ShapeOffload(c model.Checked) func() (cuda.Device, error) {
	if c.Setup().Offload == model.OffloadNone {
		return nil
	}
	return func() (cuda.Device, error) { return shape.New(0), nil }
}
