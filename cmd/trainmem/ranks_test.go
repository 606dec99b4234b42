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
