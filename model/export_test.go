package model

// The test helpers that model's external tests (package model_test, which
// may import model/reference) share with its internal ones.
var (
	MustPreset = mustPreset
	TestParams = testParams
	TestBatch  = testBatch
	EvalGraph  = evalGraph
)
