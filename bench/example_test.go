package bench_test

import (
	"bytes"
	"fmt"
	"strings"

	"trainmem/bench"
	"trainmem/model"
)

// A report renders itself, in text for people and as CSV or JSON for
// programs: here the estimate for GPT-2 (124M) in bf16 under ZeRO-2 over
// 8 ranks, as CSV, of which the model states' rows: the weights whole
// (2Φ), the gradients and the fp32 states a rank's eighth (2Φ/8, 4Φ/8).
func ExampleEstimateReport_WriteCSV() {
	gpt2, _ := model.Preset("gpt2")
	s, err := model.Setup{Model: gpt2, Batch: 4, Seq: 1024, Precision: model.BF16, Optimizer: model.AdamW, Ranks: 8, ZeRO: 2, TP: 1, PP: 1}.Check()
	if err != nil {
		fmt.Println(err)
		return
	}
	rep, err := bench.Estimate(s, model.Korthikanti, model.Cluster{})
	if err != nil {
		fmt.Println(err)
		return
	}
	var csv bytes.Buffer
	if err := rep.WriteCSV(&csv); err != nil {
		fmt.Println(err)
		return
	}
	for _, line := range strings.Split(csv.String(), "\n") {
		if strings.HasPrefix(line, "section,") || strings.HasPrefix(line, "model_states,") {
			fmt.Println(line)
		}
	}
	// Output:
	// section,name,bytes
	// model_states,params,248879616
	// model_states,grads,31109952
	// model_states,master,62219904
	// model_states,adam_m,62219904
	// model_states,adam_v,62219904
	// model_states,total,466649280
}
