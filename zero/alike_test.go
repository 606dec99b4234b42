package zero

import (
	"fmt"
	"reflect"
	"testing"

	"trainmem/cuda"
	"trainmem/cuda/shape"
	"trainmem/model"
)

// TestSimulateAlikeRanks: a simulation that runs one rank of each alike
// kind (the same stage, the same vocabulary rows, the parameter server or
// not) and gives the others its record and statistics with their own
// traffic reports exactly what running every rank does: every rank's
// record, allocator statistics and traffic, in all and by group.
func TestSimulateAlikeRanks(t *testing.T) {
	cfg := tinyCfg
	cfg.Layers = 4
	odd := cfg
	odd.Vocab = 257 // two tensor-parallel ranks hold 129 and 128 rows
	for _, tc := range []struct {
		cfg           model.Config
		dp, tp, pp, m int
		set           Setting
		sp            bool
	}{
		{cfg: cfg, dp: 3, tp: 2, pp: 2, m: 3, set: Setting{Stage: 1}},
		{cfg: odd, dp: 2, tp: 2, pp: 3, m: 4, set: Setting{Stage: 0, BucketBytes: 16 << 10}},
		{cfg: odd, dp: 4, tp: 1, pp: 2, m: 2, set: Setting{PS: true}},
		{cfg: odd, dp: 3, tp: 2, pp: 1, m: 1, set: Setting{Stage: 3, Prefetch: true}},
		{cfg: cfg, dp: 5, tp: 1, pp: 1, m: 1, set: Setting{Stage: 2}},
		{cfg: cfg, dp: 12, tp: 4, pp: 1, m: 1, set: Setting{Stage: 1}, sp: true},
		{cfg: odd, dp: 2, tp: 4, pp: 2, m: 2, set: Setting{Stage: 1, Native: true}},
	} {
		s := setupOf(tc.cfg, 2, 16, tc.dp, tc.set.Stage, model.BF16, model.AdamW)
		s.TP, s.PP, s.MicroBatches, s.SequenceParallel = tc.tp, tc.pp, tc.m, tc.sp
		name := fmt.Sprintf("%v %s V=%d m %d", LayoutOf(s), tc.set, tc.cfg.Vocab, tc.m)
		sim := func(every bool) []RankResult {
			simulateEvery = every
			defer func() { simulateEvery = false }()
			res, err := Simulate(func() cuda.Device { return shape.New(0) }, checked(t, s), tc.set, 2, nil)
			if err != nil {
				t.Fatal(name, err)
			}
			return res
		}
		once, every := sim(false), sim(true)
		if len(once) != len(every) {
			t.Fatalf("%s: %d ranks reported, %d when every one runs", name, len(once), len(every))
		}
		for i := range every {
			a, b := once[i], every[i]
			if a.Rank != b.Rank || a.Stats != b.Stats || !reflect.DeepEqual(a.Record, b.Record) || a.Traffic != b.Traffic || a.AxisTraffic != b.AxisTraffic {
				t.Errorf("%s rank %d: standing for it\n%+v\nrunning it\n%+v", name, b.Rank, a, b)
			}
		}
		run, _ := representatives(LayoutOf(s), s, tc.set, LayoutOf(s).SimulatedRanks())
		t.Logf("%s: %d ranks reported, %d run", name, len(every), len(run))
	}
}
