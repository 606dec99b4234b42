package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// train --profile prints the table after the run, --format json the
// profile alone; validate --profile after its report; and where there is no
// one device's measured run, it is refused naming why.
func TestProfileFlag(t *testing.T) {
	out, _ := mustRun(t, "train", "--batch", "2", "--seq", "32", "--steps", "3", "--profile")
	for _, want := range []string{"profile of host", "over 2 step(s)", "Linear", "forward", "backward", "optimizer", "GFLOP/s", "of peak"} {
		if !strings.Contains(out, want) {
			t.Errorf("train --profile lacks %q:\n%s", want, out)
		}
	}
	out, _ = mustRun(t, "train", "--batch", "2", "--seq", "32", "--steps", "2", "--profile", "--format", "json")
	var doc struct {
		Steps int `json:"steps"`
		Rows  []struct {
			Op    string  `json:"op"`
			Calls int     `json:"calls"`
			FLOPs float64 `json:"flops"`
		} `json:"rows"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || doc.Steps != 1 || len(doc.Rows) == 0 {
		t.Errorf("train --profile --format json: %v, %+v", err, doc)
	}
	out, _ = mustRun(t, "validate", "--batch", "2", "--seq", "32", "--steps", "2", "--profile")
	if !strings.Contains(out, "profile of host") || !strings.Contains(out, "LinearBackwardW") {
		t.Errorf("validate --profile: %s", out)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"train", "--format", "json"}, "--format json is the profile's: give --profile"},
		{[]string{"train", "--ranks", "2", "--profile"}, "--profile times one device's steps"},
		{[]string{"validate", "--no-measure", "--profile"}, "--profile times one device's measured run"},
	} {
		if _, errOut, code := runArgs(t, c.args...); code != 2 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, want 2 and %q: %s", c.args, code, c.want, errOut)
		}
	}
}
