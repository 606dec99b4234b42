// Package train runs trainmem's GPT-2 for real or as a simulation: it
// compiles the gorgonia graph of package model into a schedule (schedule.go:
// passes from the node order to liveness; instructions in creation order,
// one slot per value instance, every value freed after its last use;
// checkpoint.go: the recomputation segments of the
// checkpoint policy; precision.go: each value's storage type), lowers every
// op to the kernels of a cuda.Device through the op's own Run (lower.go),
// and executes steps on the device (exec.go: forward, recompute, backward,
// the optimizer of optim.go with fp16 loss scaling), each leaving a Record
// of its allocator statistics (record.go). A Trainer is built from the
// model.Setup that estimate and simulate take. Run (run.go) is a whole
// training run with its data (batches.go: OpenBatches, the one data path of
// every run), checkpoints and streamed records; Simulate (simulate.go) the
// same schedule on the shape-only device.
//
// Error policy: every function returns errors; a step whose loss or
// gradients are not finite returns its complete record with a
// *DivergedError; the device's out-of-memory errors come back unchanged
// (errors.Is(err, cuda.ErrNoMemory)).
package train
