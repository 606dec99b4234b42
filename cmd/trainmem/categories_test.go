package main

import (
	"testing"

	"trainmem/cuda"
	"trainmem/model"
)

// The estimate's category names are package cuda's, which tags every
// allocation: estimate, simulate and measure must speak of the same things.
// (model does not import cuda, so the check lives here, above both.)
func TestCategoryNamesMatchCuda(t *testing.T) {
	for _, tc := range []struct {
		name string
		cat  cuda.Category
	}{
		{model.CatParams, cuda.Params},
		{model.CatGrads, cuda.Grads},
		{model.CatMaster, cuda.Master},
		{model.CatAdamM, cuda.AdamM},
		{model.CatAdamV, cuda.AdamV},
		{model.CatActivations, cuda.Activations},
		{model.CatGathered, cuda.Gathered},
	} {
		if tc.cat.String() != tc.name {
			t.Errorf("model says %q, cuda says %q", tc.name, tc.cat.String())
		}
	}
	var s model.States
	for i, n := range s.Named() {
		if n.Name != cuda.Category(i).String() {
			t.Errorf("States.Named()[%d] = %q, cuda.Category(%d) = %q", i, n.Name, i, cuda.Category(i))
		}
	}
}
