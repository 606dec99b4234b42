package zero

import (
	"testing"
	"time"

	"trainmem/cuda"
	"trainmem/cuda/shape"
	"trainmem/model"
)

// simulateTimed simulates s under set on H100s with a modelled clock over
// a DGX H100 network.
func simulateTimed(t *testing.T, s model.Setup, set Setting) []RankResult {
	t.Helper()
	h100, _ := cuda.GPUByKey("h100")
	nw, _ := NetworkByName("dgx-h100")
	set.Network = &nw
	c, err := s.Check()
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Simulate(func() cuda.Device {
		d := shape.New(0)
		if err := d.Model(h100.Roofline); err != nil {
			t.Fatal(err)
		}
		return d
	}, c, set, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func TestReplayedStep(t *testing.T) {
	gpt2, _ := model.Preset("gpt2")
	base := model.Setup{Model: gpt2, Batch: 4, Seq: 512, Precision: model.BF16, Optimizer: model.AdamW, Ranks: 1, TP: 1, PP: 1}
	for _, tc := range []struct {
		name string
		mod  func(*model.Setup, *Setting)
	}{
		{"ddp 4", func(s *model.Setup, set *Setting) { s.Ranks = 4 }},
		{"zero-2 4", func(s *model.Setup, set *Setting) { s.Ranks, s.ZeRO, set.Stage = 4, 2, 2 }},
		{"zero-3 4 prefetch", func(s *model.Setup, set *Setting) { s.Ranks, s.ZeRO, set.Stage, set.Prefetch = 4, 3, 3, true }},
		{"tp 2", func(s *model.Setup, set *Setting) { s.TP = 2 }},
		{"pp 4", func(s *model.Setup, set *Setting) { s.PP, s.MicroBatches = 4, 8 }},
		{"tp 2 pp 2 dp 2", func(s *model.Setup, set *Setting) { s.TP, s.PP, s.Ranks, s.MicroBatches = 2, 2, 2, 4 }},
	} {
		s, set := base, Setting{}
		tc.mod(&s, &set)
		rs := simulateTimed(t, s, set)
		for _, r := range rs {
			tm := r.Timing
			if tm == nil {
				t.Fatalf("%s: rank %d has no timing", tc.name, r.Rank)
			}
			if tm.Step != tm.Compute+tm.Comm+tm.Wait {
				t.Errorf("%s: rank %d: step %v ≠ compute %v + comm %v + wait %v", tc.name, r.Rank, tm.Step, tm.Compute, tm.Comm, tm.Wait)
			}
			t.Logf("%s: rank %d: step %v = compute %v + comm %v + wait %v; comm stream %v; record %v", tc.name, r.Rank, tm.Step, tm.Compute, tm.Comm, tm.Wait, tm.CommStream, time.Duration(r.Record.StepMs*1e6))
		}
	}
}

// totals are a timing's sums alone.
type totals struct{ Step, Compute, Comm, Wait, CommStream time.Duration }

func sums(t Timing) totals {
	return totals{Step: t.Step, Compute: t.Compute, Comm: t.Comm, Wait: t.Wait, CommStream: t.CommStream}
}

// The replay of hand-made logs against times worked out by hand: a
// collective on the compute stream starts when the later member reaches
// it; one on the communication stream starts when both have issued it
// and holds them only at the wait; a receive waits for the send's
// arrival, whichever rank the replay visits first.
func TestReplayByHand(t *testing.T) {
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	mk := func(n int) (*Group, []*Comm) {
		g := &Group{span: Span{N: n, Nodes: 1}}
		for i := range n {
			g.comms = append(g.comms, &Comm{g: g, rank: i, idx: i})
		}
		return g, g.comms
	}
	g, cs := mk(2)
	a, b := cs[0], cs[1]
	a.log = clockLog{on: true, end: us(17), events: []event{
		{kind: evCollective, coll: AllReduce, at: us(10), g: g, seq: 0, cost: us(5)},
		{kind: evAsync, at: us(12), g: g, seq: 1, cost: us(20), id: 0},
		{kind: evWait, at: us(15), id: 0},
	}}
	b.log = clockLog{on: true, end: us(9), events: []event{
		{kind: evCollective, coll: AllReduce, at: us(4), g: g, seq: 0, cost: us(5)},
		{kind: evAsync, at: us(9), g: g, seq: 1, cost: us(20), id: 0},
		{kind: evWait, at: us(9), id: 0},
	}}
	got, err := replay([]*Comm{a, b})
	if err != nil {
		t.Fatal(err)
	}
	want := []totals{
		{Step: us(42), Compute: us(17), Comm: us(25), Wait: 0, CommStream: us(20)},
		{Step: us(40), Compute: us(9), Comm: us(25), Wait: us(6), CommStream: us(20)},
	}
	for i := range want {
		if sums(got[i]) != want[i] {
			t.Errorf("rank %d: %+v, want %+v", i, sums(got[i]), want[i])
		}
	}
	// Rank 0's kernels at its clock's 12 µs ran after the collective that
	// held it to 15: at 17 on the step's clock; at 16, after the wait for
	// the communication stream (to 40), at 41. Rank 1 waited for rank 0
	// from 4 to 10.
	for _, c := range []struct{ x, want time.Duration }{{us(5), us(5)}, {us(12), us(17)}, {us(16), us(41)}} {
		if m := got[0].Map(c.x); m != c.want {
			t.Errorf("rank 0's reading %v on the step's clock: %v, want %v", c.x, m, c.want)
		}
	}
	if iv := got[1].Intervals; len(iv) == 0 || iv[0] != (Interval{Name: "wait for the group: all_reduce over 2", Stream: "waited", Start: us(4), End: us(10)}) {
		t.Errorf("rank 1's intervals %+v", iv)
	}
	// A receive before its send in the replay's order: rank 0 receives.
	h, ps := mk(2)
	ps[0].log = clockLog{on: true, end: us(4), events: []event{{kind: evRecv, at: us(1), g: h, seq: 0, peer: 1, cost: us(3)}}}
	ps[1].log = clockLog{on: true, end: us(6), events: []event{{kind: evSend, at: us(5), g: h, seq: 0, peer: 0, cost: us(3)}}}
	got, err = replay(ps)
	if err != nil {
		t.Fatal(err)
	}
	if w := (totals{Step: us(11), Compute: us(4), Wait: us(7)}); sums(got[0]) != w {
		t.Errorf("the receiver: %+v, want %+v", got[0], w)
	}
	if w := (totals{Step: us(6), Compute: us(6)}); sums(got[1]) != w {
		t.Errorf("the sender: %+v, want %+v", got[1], w)
	}
	// A collective one member never reaches is an error, not a hang.
	a.log.events, b.log.events = a.log.events[:1], nil
	if _, err := replay([]*Comm{a, b}); err == nil {
		t.Error("a collective only one member reaches replayed")
	}
}

// The simulation's replayed step and the formula's agree on the same card
// and network where both model the same kernels (flash attention: no
// softmax kernel in either): within 25% of each other for one GPU, data,
// tensor and pipeline parallelism and ZeRO-3.
func TestReplayBesideFormula(t *testing.T) {
	m, _ := model.Preset("gpt2-medium")
	m.Attention = model.AttentionFlash
	base := model.Setup{Model: m, Batch: 8, Seq: 1024, Precision: model.BF16, Optimizer: model.AdamW, Ranks: 1, TP: 1, PP: 1}
	h100, _ := cuda.GPUByKey("h100")
	nw, _ := NetworkByName("dgx-h100")
	for _, tc := range []struct {
		name string
		mod  func(*model.Setup, *Setting)
	}{
		{"one GPU", func(s *model.Setup, set *Setting) {}},
		{"ddp 8", func(s *model.Setup, set *Setting) { s.Ranks = 8 }},
		{"zero-3 8", func(s *model.Setup, set *Setting) { s.Ranks, s.ZeRO, set.Stage, set.Prefetch = 8, 3, 3, true }},
		{"tp 4 dp 2", func(s *model.Setup, set *Setting) { s.TP, s.Ranks = 4, 2 }},
		{"pp 4, 8 micro-batches", func(s *model.Setup, set *Setting) { s.PP, s.MicroBatches = 4, 8 }},
		{"tp 2 pp 2 dp 2, 4 micro-batches", func(s *model.Setup, set *Setting) { s.TP, s.PP, s.Ranks, s.MicroBatches = 2, 2, 2, 4 }},
	} {
		s, set := base, Setting{}
		tc.mod(&s, &set)
		rs := simulateTimed(t, s, set)
		var step time.Duration
		for _, r := range rs {
			step = max(step, r.Timing.Step)
		}
		st := stepTime(t, s, TimeOptions{Card: h100.Roofline, Network: nw})
		r := step.Seconds() / st.Step.Seconds()
		t.Logf("%s: simulated %v, formula %v (%.2f×)", tc.name, step, st.Step, r)
		if r < 0.75 || r > 1.25 {
			t.Errorf("%s: simulated step %v, the formula's %v: %.2f×, want within 25%%", tc.name, step, st.Step, r)
		}
	}
}
