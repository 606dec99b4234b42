package train

import (
	"os"
	"strconv"
	"testing"

	"trainmem/cuda/shape"
	"trainmem/model"
)

func BenchmarkZZSim(b *testing.B) {
	L, _ := strconv.Atoi(os.Getenv("ZZL"))
	s := model.Setup{Model: model.Config{Name: "narrow", Layers: L, Hidden: 64, Heads: 4, Vocab: 256, Context: 64},
		Batch: 1, Seq: 64, Ranks: 1, TP: 1, PP: 1}
	c := checked(b, s)
	for b.Loop() {
		if _, _, err := Simulate(shape.New(0), c, 1, nil); err != nil {
			b.Fatal(err)
		}
	}
}
