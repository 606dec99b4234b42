// Package bench is trainmem's reports: the three answers (estimate,
// simulate, measure) side by side for one setup, and the checkpointing
// trade-off across policies. It runs nothing of its own: the estimate is
// package model's closed forms, the simulation is package train's schedule
// on the shape device (cuda/shape), the measurement the same schedule on a
// computing device.
//
// Validate answers "where did the memory go, and how far off is each
// formula?": one row per memory category, one column per formula, then the
// simulated and measured bytes, and under the table a line for every
// difference that says what causes it, computed from the setup's numbers.
// Formulas are compared with requested bytes (tensor sizes); the allocator's
// rounding, caching and (on a GPU) the CUDA context are rows of their own.
//
// Sweep answers "what does checkpointing cost and save?": every policy on
// one setup, with activation memory estimated, simulated and measured, and
// the measured step time against no checkpointing.
//
// Error policy: functions return errors; an error names what failed (the
// setup, the device, the step). Nothing panics on bad input.
package bench
