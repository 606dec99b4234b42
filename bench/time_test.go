package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"trainmem/cuda"
	"trainmem/cuda/host"
	"trainmem/cuda/shape"
	"trainmem/model"
	"trainmem/train"
	"trainmem/zero"
)

// fit --objective time: every layout's micro-batch is one that fits by an
// independent simulation, the next divisor past its largest does not,
// its time is the formula's for that micro-batch, the layouts come
// fastest first, and a layout whose data ranks do not divide the global
// batch is refused by name.
func TestFitTime(t *testing.T) {
	s := setup(t, "tiny", 1, 64, model.BF16, model.Adam, "none")
	s.Model.Layers, s.Model.Hidden, s.Model.Vocab = 4, 256, 4096
	const gpus, global = 4, 24
	const memory = 64 << 20
	a100, _ := cuda.GPUByKey("a100")
	nw, _ := zero.NetworkByName("dgx-a100")
	opts := zero.TimeOptions{Card: a100.Roofline, Network: nw}
	rep, err := FitTime(checked(t, s), gpus, global, memory, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	fitsAt := func(tp, pp, dp, b int) bool {
		u := s
		u.TP, u.PP, u.Ranks, u.Batch, u.MicroBatches = tp, pp, dp, b, max(1, min(pp, global/dp/b))
		_, err := zero.Simulate(func() cuda.Device { return shape.New(memory) }, checked(t, u), zero.Setting{}, 2, nil)
		if err != nil && !strings.Contains(err.Error(), "out of memory") {
			t.Fatal(err)
		}
		return err == nil
	}
	var fitting, refused int
	for i, c := range rep.cells {
		if c.micro == 0 {
			refused++
			if c.why == "" {
				t.Errorf("tp %d × pp %d × dp %d: no micro-batch and no reason", c.tp, c.pp, c.dp)
			}
			continue
		}
		fitting++
		if i > 0 && rep.cells[i-1].micro > 0 && rep.cells[i-1].st.Step > c.st.Step {
			t.Errorf("layout %d (%v) is faster than the one before it (%v)", i, c.st.Step, rep.cells[i-1].st.Step)
		}
		if !fitsAt(c.tp, c.pp, c.dp, c.largest) || c.micro > c.largest || (global/c.dp)%c.micro != 0 {
			t.Errorf("tp %d × pp %d × dp %d: micro-batch %d (largest %d) does not fit by simulation or divide the replica's %d", c.tp, c.pp, c.dp, c.micro, c.largest, global/c.dp)
		}
		for b := c.largest + 1; b <= global/c.dp; b++ {
			if (global/c.dp)%b == 0 {
				if fitsAt(c.tp, c.pp, c.dp, b) {
					t.Errorf("tp %d × pp %d × dp %d: micro-batch %d fits, past the largest found, %d", c.tp, c.pp, c.dp, b, c.largest)
				}
				break
			}
		}
		u := s
		u.TP, u.PP, u.Ranks, u.Batch, u.MicroBatches = c.tp, c.pp, c.dp, c.micro, global/(c.dp*c.micro)
		st, err := zero.StepTimeOf(checked(t, u), opts)
		if err != nil || st.Step != c.st.Step {
			t.Errorf("tp %d × pp %d × dp %d: step %v, the formula's %v (%v)", c.tp, c.pp, c.dp, c.st.Step, st.Step, err)
		}
	}
	if fitting < 2 || refused < 1 {
		t.Errorf("%d layouts fit and %d are refused: want a ranking and a refusal at %d bytes", fitting, refused, memory)
	}
	var text, js bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"fastest layouts of 4 GPUs", "why the others lose", "tokens/s"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Layouts []timeFitDoc `json:"layouts"`
	}
	if err := json.Unmarshal(js.Bytes(), &doc); err != nil || len(doc.Layouts) != len(rep.cells) || doc.Layouts[0].StepTime == nil {
		t.Errorf("JSON: %v, %d layouts: %s", err, len(doc.Layouts), js.String())
	}
	// A global batch no data-parallel degree above 1 divides but 1 and 3.
	rep, err = FitTime(checked(t, s), gpus, 3, memory, opts, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.cells {
		if c.dp == 2 || c.dp == 4 {
			if !strings.Contains(c.why, "not a multiple of dp") {
				t.Errorf("dp %d with global batch 3: %q", c.dp, c.why)
			}
		}
	}
}

// The host card with its executor's cost: the calibration step's
// instructions timed, the launch at least the bare kernel's, the source
// saying how it was found.
func TestHostCard(t *testing.T) {
	d, err := host.New(host.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	bare, err := d.Card()
	if err != nil {
		t.Fatal(err)
	}
	r, err := HostCard(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Check(); err != nil || r.Eff.Launch < bare.Eff.Launch/2 || r.Eff.SMs != 0 {
		t.Fatalf("host card %+v (%v)", r, err)
	}
	t.Logf("%s", r.Source)
}

// validate on the host sets the measured step beside the model's on the
// host as a card, and with a profile every measured op family beside its
// predicted time; a run with nothing measured has no time check.
func TestValidateTime(t *testing.T) {
	s := setup(t, "tiny", 4, 32, model.FP32, model.Adam, "none")
	d, err := host.New(host.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	o := runOf(checked(t, s), 3, nil, zero.Setting{})
	o.Profile = &Profile{}
	r, err := Validate(context.Background(), on(d), o)
	if err != nil {
		t.Fatal(err)
	}
	tc := r.Time
	if tc == nil || !(tc.MeasuredMs > 0) || !(tc.PredictedMs > 0) || !strings.HasPrefix(tc.Card, "host") || len(tc.Ops) == 0 {
		t.Fatalf("time check %+v", tc)
	}
	seen := map[string]bool{}
	for _, op := range tc.Ops {
		seen[op.Op+"/"+op.Phase] = true
		if !(op.PredictedMs > 0) {
			t.Errorf("%s in %s: measured %.3f ms, no prediction", op.Op, op.Phase, op.MeasuredMs)
		}
	}
	for _, want := range []string{"Linear/forward", "LinearBackwardW/backward", "adam/optimizer"} {
		if !seen[want] {
			t.Errorf("no %s among %v", want, tc.Ops)
		}
	}
	// Spearman's ρ from the ranks the table shows: 1 − 6Σd²/(n(n²−1)).
	var d2 float64
	for i, r := range tc.predictedRanks() {
		d2 += float64((r - i - 1) * (r - i - 1))
	}
	n := float64(len(tc.Ops))
	if want := 1 - 6*d2/(n*(n*n-1)); tc.RankCorrelation != want || !(want >= -1 && want <= 1) {
		t.Errorf("rank correlation %v, want %v", tc.RankCorrelation, want)
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil || !strings.Contains(text.String(), "time a step: measured") || !strings.Contains(text.String(), "rank measured") ||
		!strings.Contains(text.String(), "Spearman's ρ") {
		t.Errorf("text (%v):\n%s", err, text.String())
	}
	if r, err := Validate(context.Background(), nil, runOf(checked(t, s), 2, nil, zero.Setting{})); err != nil || r.Time != nil {
		t.Errorf("nothing measured: time %+v (%v)", r.Time, err)
	}
}

// validate of host ranks in one process sets each rank's measured step
// beside its replayed one: the collectives on the link timed after the
// run (trainmem's ring over memory), the kernels on the host as a card
// shared by the ranks (each runs as many threads as the machine has
// cores, so two take turns: each has half), the step's split into kernels
// and collectives; the text and the JSON carry it.
func TestValidateRanksTime(t *testing.T) {
	s := setup(t, "tiny", 2, 32, model.FP32, model.Adam, "none")
	s.Ranks = 2
	where := &Where{New: func() (cuda.Device, error) { return host.New(host.Options{Threads: runtime.NumCPU()}) }}
	r, err := Validate(context.Background(), where, runOf(checked(t, s), 3, nil, zero.Setting{}))
	if err != nil {
		t.Fatal(err)
	}
	tc := r.Time
	if tc == nil || len(tc.Ranks) != 2 || !strings.Contains(tc.Network, "trainmem's ring") || !strings.Contains(tc.Card, "shared: 0.50") {
		t.Fatalf("time check %+v", tc)
	}
	var slowest [2]float64
	for i, rt := range tc.Ranks {
		if rt.Rank != i || !(rt.MeasuredMs > 0) || !(rt.PredictedMs > 0) || !(rt.ComputeMs > 0) || !(rt.CommMs > 0) || rt.ComputeMs+rt.CommMs > rt.PredictedMs*1.0001 {
			t.Errorf("rank %d: %+v", i, rt)
		}
		slowest = [2]float64{max(slowest[0], rt.MeasuredMs), max(slowest[1], rt.PredictedMs)}
	}
	if slowest != [2]float64{tc.MeasuredMs, tc.PredictedMs} {
		t.Errorf("the step %v and %v, want the slowest rank's %v", tc.MeasuredMs, tc.PredictedMs, slowest)
	}
	var text, js bytes.Buffer
	if err := r.WriteText(&text); err != nil || !strings.Contains(text.String(), "time a step: measured") || !strings.Contains(text.String(), "collectives  waited") {
		t.Errorf("text (%v):\n%s", err, text.String())
	}
	var doc struct {
		Time *TimeCheck `json:"time"`
	}
	if err := r.WriteJSON(&js); err != nil || json.Unmarshal(js.Bytes(), &doc) != nil || doc.Time == nil || len(doc.Time.Ranks) != 2 {
		t.Errorf("JSON (%v): %s", err, js.String())
	}
}

// A simulated rank's Chrome trace over ranks runs on the replayed step's
// clock: its collectives and waits on a thread of their own, every event
// within the replayed step, the communication stream's collectives on
// another thread under data parallelism.
func TestTraceStreams(t *testing.T) {
	s := setup(t, "tiny", 2, 32, model.BF16, model.Adam, "none")
	s.TP, s.PP, s.Ranks, s.MicroBatches = 2, 2, 2, 4
	h100, _ := cuda.GPUByKey("h100")
	nw, _ := zero.NetworkByName("dgx-h100")
	traces := RankTraces{}
	o := Options{Setting: zero.Setting{Network: &nw}}
	o.Setup, o.Steps = checked(t, s), 2
	rep, err := Simulate(onCard(h100.Roofline), 0, o, traces)
	if err != nil {
		t.Fatal(err)
	}
	for _, rr := range rep.Ranks {
		tr := traces[rr.Rank]
		if tr == nil || tr.Timing == nil || rr.Timing == nil {
			t.Fatalf("rank %d: trace %v, timing %v", rr.Rank, tr, rr.Timing)
		}
		var b bytes.Buffer
		if err := tr.WriteChrome(&b); err != nil {
			t.Fatal(err)
		}
		var doc struct {
			TraceEvents []struct {
				Name string   `json:"name"`
				Ph   string   `json:"ph"`
				Ts   float64  `json:"ts"`
				Dur  *float64 `json:"dur"`
				Tid  int      `json:"tid"`
				Cat  string   `json:"cat"`
			} `json:"traceEvents"`
		}
		if err := json.Unmarshal(b.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		threads := map[int]int{}
		step := float64(rr.Timing.Step.Nanoseconds()) / 1e3
		for _, e := range doc.TraceEvents {
			if e.Ph == "M" {
				continue
			}
			threads[e.Tid]++
			end := e.Ts
			if e.Dur != nil {
				end += *e.Dur
			}
			if e.Ts < 0 || end > step+1 {
				t.Errorf("rank %d: %s (thread %d) at %.3f–%.3f µs, outside the replayed step of %.3f µs", rr.Rank, e.Name, e.Tid, e.Ts, end, step)
				break
			}
		}
		if threads[3] == 0 || threads[4] == 0 || threads[2] == 0 {
			t.Errorf("rank %d: events by thread %v: want ops (2), collectives and waits (3), the communication stream (4)", rr.Rank, threads)
		}
	}
}

// The report's ZeRO streams: rank 0's step at each stage over 4 ranks of
// gpt2 on the default card and its network, one row a stage with its two
// lanes; the caption gives each stage's step and collectives from the
// replayed steps, which say what the stages do: DDP and ZeRO-2 reduce
// buckets beside the backward pass, ZeRO-1 reduces after it (nothing
// beside the kernels), ZeRO-3 gathers every unit (more of the step held
// by collectives than DDP's).
func TestStageStreams(t *testing.T) {
	s := setup(t, "gpt2", 4, 256, model.BF16, model.Adam, "none")
	s.Ranks = 4
	g, _ := cuda.GPUByKey(cuda.DefaultGPU)
	nw := zero.DefaultNetwork(g.Key)
	o := Options{Setting: zero.Setting{Network: &nw}}
	o.Setup, o.Steps = checked(t, s), 2
	rep, err := SweepStages(onCard(g.Roofline), o)
	if err != nil {
		t.Fatal(err)
	}
	fig, caption, err := stageStreams(rep, 4, g, nw)
	if err != nil {
		t.Fatal(err)
	}
	svg, err := renderSVG(fig)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ZeRO-0 (DDP): compute", "ZeRO-1: compute", "ZeRO-2: compute", "ZeRO-3: compute", "collective (overlapped)", "time in the step (ms)"} {
		if !bytes.Contains(svg, []byte(want)) {
			t.Errorf("the figure has no %q", want)
		}
	}
	var tm [4]*zero.Timing
	for stage := range 4 {
		u := s
		u.ZeRO = stage
		res, err := zero.SimulateWith(onCard(g.Roofline), checked(t, u), zero.Setting{Stage: stage, Network: &nw}, 2, nil, train.Options{})
		if err != nil {
			t.Fatal(err)
		}
		tm[stage] = res[0].Timing
		want := fmt.Sprintf("%s %s (collectives holding the kernels %s, beside them %s)", zero.Setting{Stage: stage}, durText(tm[stage].Step), durText(tm[stage].Comm), durText(tm[stage].CommStream))
		if !strings.Contains(caption, want) {
			t.Errorf("the caption has no %q:\n%s", want, caption)
		}
	}
	if !(tm[0].CommStream > 0 && tm[2].CommStream > 0 && tm[1].CommStream == 0 && tm[3].Comm > tm[0].Comm) {
		t.Errorf("beside the kernels %v %v %v; holding them at ZeRO-0 %v, ZeRO-3 %v", tm[0].CommStream, tm[1].CommStream, tm[2].CommStream, tm[0].Comm, tm[3].Comm)
	}
}
