package bench

import (
	"fmt"
	"testing"

	"trainmem/model"
)

// TestFitMethods: the fine-tuner's fit of gpt2 at sequence 256 in bf16 on
// a 3 GiB card. Each row's micro-batch fits the card by the simulation and
// the next one does not; its card class holds micro-batch 1 and the class
// below does not; and, at one rank (16) for LoRA and QLoRA, the methods
// order as they must: QLoRA's model states below LoRA's below full
// fine-tuning's, 8-bit states below fp32 ones, and the micro-batches the
// other way round. (At QLoRA's default r 64 a small model's adapters can
// cost it more than its 4-bit base saves.)
func TestFitMethods(t *testing.T) {
	cfg, err := model.Preset("gpt2")
	if err != nil {
		t.Fatal(err)
	}
	s := model.Setup{Model: cfg, Batch: 1, Seq: 256, Precision: model.BF16, Optimizer: model.AdamW, Ranks: 1, TP: 1, PP: 1}
	const memory = 3 << 30
	r, err := FitMethods(checked(t, s), memory, model.Korthikanti, MethodAll, 16, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.rows) != 12 {
		t.Fatalf("%d rows, want 3 methods × 2 policies × 2 optimizers", len(r.rows))
	}
	fits := func(s model.Setup, b int, memory int64) bool {
		t.Helper()
		s.Batch = b
		c, err := s.Check()
		if err != nil {
			return false
		}
		ok, err := simFits(c, memory)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	byKey := map[string]methodRow{}
	for _, row := range r.rows {
		name := row.label()
		byKey[fmt.Sprintf("%s/%s/%s", row.method, row.setup.Checkpoint, row.setup.Optimizer)] = row
		if row.batch > 0 && !fits(row.setup, row.batch, memory) || !atLimit(row.setup, row.batch) && fits(row.setup, row.batch+1, memory) {
			t.Errorf("%s: micro-batch %d is not the largest that the simulation fits in 3 GiB", name, row.batch)
		}
		if row.card < 0 {
			t.Errorf("%s: no card holds micro-batch 1", name)
			continue
		}
		if !fits(row.setup, 1, Cards[row.card].Bytes) || row.card > 0 && fits(row.setup, 1, Cards[row.card-1].Bytes) {
			t.Errorf("%s: %s is not the smallest card that holds micro-batch 1", name, Cards[row.card].Name)
		}
		t.Logf("%s: states %s, micro-batch %d (formula %d), %s", name, model.Bytes(row.states), row.batch, row.formula, Cards[row.card].Name)
	}
	for _, p := range []string{"none", "full"} {
		for _, o := range []string{"adamw", "adamw8bit"} {
			full, lora, qlora := byKey["full/"+p+"/"+o], byKey["lora/"+p+"/"+o], byKey["qlora/"+p+"/"+o]
			if !(qlora.states < lora.states && lora.states < full.states) || !(qlora.batch >= lora.batch && lora.batch >= full.batch) {
				t.Errorf("%s, %s: states %d, %d, %d and micro-batches %d, %d, %d (full, lora, qlora) are out of order", p, o, full.states, lora.states, qlora.states, full.batch, lora.batch, qlora.batch)
			}
		}
		for _, m := range []string{"full", "lora", "qlora"} {
			if a, b := byKey[m+"/"+p+"/adamw"], byKey[m+"/"+p+"/adamw8bit"]; !(b.states < a.states) {
				t.Errorf("%s, %s: 8-bit states %d, not below fp32's %d", m, p, b.states, a.states)
			}
		}
	}
}
