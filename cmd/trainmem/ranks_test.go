package main

import (
	"encoding/json"
	"strings"
	"testing"

	"trainmem/model"
	"trainmem/zero"
)

// simulate --ranks N runs every rank: each rank's model states are the
// setting's share, beside the ZeRO paper's, and each rank's traffic is the
// ring's.
func TestSimulateRanks(t *testing.T) {
	cfg, err := model.Preset("tiny")
	if err != nil {
		t.Fatal(err)
	}
	phi := int(cfg.NumParams())
	const N = 3
	for _, tc := range []struct {
		args         []string
		master, sent int // bytes per rank: master's peak, all traffic sent in the step (flags aside)
	}{
		{[]string{"--zero", "1"}, 4 * zero.ShardLen(phi, N), 2 * 2 * (N - 1) * zero.ShardLen(phi, N)},
		{[]string{"--zero", "0"}, 4 * phi, -1},
		{[]string{"--zero", "2", "--bucket-mb", "1000000"}, 4 * zero.ShardLen(phi, N), 2 * 2 * (N - 1) * zero.ShardLen(phi, N)},
		{[]string{"--data-parallel", "ps"}, -1, -1},
	} {
		args := append([]string{"simulate", "--preset", "tiny", "--batch", "2", "--seq", "16", "--precision", "bf16", "--ranks", "3", "--format", "json"}, tc.args...)
		out, _ := mustRun(t, args...)
		var doc struct {
			Ranks []struct {
				PeakRequested map[string]int64 `json:"peak_requested"`
				Traffic       []struct {
					Collective string `json:"collective"`
					SentBytes  int64  `json:"sent_bytes"`
				} `json:"traffic"`
			} `json:"ranks"`
			States *struct {
				Master int64 `json:"master"`
			} `json:"zero_paper_states"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if len(doc.Ranks) != N {
			t.Fatalf("%v: %d ranks, want %d", tc.args, len(doc.Ranks), N)
		}
		for r, rk := range doc.Ranks {
			m := rk.PeakRequested["master"]
			switch {
			case tc.master >= 0 && m != int64(tc.master):
				t.Errorf("%v rank %d: master %d bytes, want %d", tc.args, r, m, tc.master)
			case tc.master < 0 && (r == 0) != (m > 0): // the parameter server: rank 0 only
				t.Errorf("%v rank %d: master %d bytes", tc.args, r, m)
			}
			if doc.States != nil && m != doc.States.Master {
				t.Errorf("%v rank %d: master %d bytes, the ZeRO paper's %d", tc.args, r, m, doc.States.Master)
			}
			var sent int64
			for _, tr := range rk.Traffic {
				if tr.Collective == "reduce_scatter" || tr.Collective == "all_gather" {
					sent += tr.SentBytes
				}
			}
			if tc.sent >= 0 && sent != int64(tc.sent) {
				t.Errorf("%v rank %d: sent %d bytes in the step, want %d", tc.args, r, sent, tc.sent)
			}
		}
	}
	out, _ := mustRun(t, "simulate", "--preset", "tiny", "--batch", "2", "--seq", "16", "--ranks", "4", "--zero", "1")
	for _, want := range []string{"setting ZeRO-1 over 4 ranks", "0-3 ", "ZeRO paper", "reduce_scatter", "all_gather"} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
}

func TestRanksFlagsRefused(t *testing.T) {
	base := []string{"simulate", "--preset", "tiny", "--batch", "2", "--seq", "16", "--ranks", "2"}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--zero", "3", "--bucket-mb", "4"}, []string{"ZeRO-3 gathers and reduces a unit", "no bucket size"}},
		{[]string{"--zero", "4"}, []string{"--zero 4", "valid: 0, 1, 2, 3"}},
		{[]string{"--data-parallel", "ps", "--zero", "1"}, []string{"--data-parallel ps and --zero 1", "drop --zero"}},
		{[]string{"--data-parallel", "ddp"}, []string{`"ddp"`, "valid: ps"}},
		{[]string{"--zero", "1", "--bucket-mb", "4"}, []string{"--bucket-mb", "ZeRO-1"}},
		{[]string{"--data-parallel", "ps", "--bucket-mb", "4"}, []string{"--bucket-mb", "parameter server"}},
		{[]string{"--bucket-mb", "-1"}, []string{"positive number of MiB"}},
	} {
		wantUsage(t, append(append([]string(nil), base...), tc.args...), tc.want...)
	}
	wantUsage(t, []string{"train", "--ranks", "2"}, "--ranks", "trainmem simulate --ranks N")
}

// validate --ranks N sets, per rank and category, the ZeRO paper's model
// states, the simulation and the measurement side by side: measured equals
// simulated byte for byte on every rank, in every category and in the
// traffic, for every setting.
func TestValidateRanks(t *testing.T) {
	for _, set := range [][]string{{"--zero", "0", "--bucket-mb", "0.1"}, {"--zero", "1"}, {"--zero", "2", "--bucket-mb", "0.1"}, {"--zero", "3"}, {"--data-parallel", "ps"}} {
		args := append([]string{"validate", "--preset", "tiny", "--batch", "2", "--seq", "16", "--precision", "bf16", "--ranks", "3", "--steps", "2", "--format", "json"}, set...)
		out, _ := mustRun(t, args...)
		var doc struct {
			Ranks []struct {
				Rank      int              `json:"rank"`
				Simulated map[string]int64 `json:"simulated_peak_requested"`
				Measured  map[string]int64 `json:"measured_peak_requested"`
				SimSent   int64            `json:"simulated_sent_bytes"`
				MeasSent  *int64           `json:"measured_sent_bytes"`
			} `json:"ranks"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("%v: %v", set, err)
		}
		if len(doc.Ranks) != 3 {
			t.Fatalf("%v: %d ranks, want 3", set, len(doc.Ranks))
		}
		for _, r := range doc.Ranks {
			if len(r.Measured) == 0 || r.MeasSent == nil || *r.MeasSent != r.SimSent || r.SimSent == 0 {
				t.Errorf("%v rank %d: sent %d simulated, %v measured", set, r.Rank, r.SimSent, r.MeasSent)
			}
			for c, v := range r.Simulated {
				if r.Measured[c] != v {
					t.Errorf("%v rank %d %s: simulated %d, measured %d", set, r.Rank, c, v, r.Measured[c])
				}
			}
		}
	}
	out, _ := mustRun(t, "validate", "--preset", "tiny", "--batch", "2", "--seq", "16", "--ranks", "64", "--zero", "3", "--no-measure")
	for _, want := range []string{"ranks simulated: 0, 1, 2, 32, 62, 63", "zero_paper", "gathered", "the ZeRO paper, Section 7"} {
		if !strings.Contains(out, want) {
			t.Errorf("validate --ranks 64 --no-measure lacks %q:\n%s", want, out)
		}
	}
}
