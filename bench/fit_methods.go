package bench

// The fine-tuner's fit: for a card, each way of fine-tuning a model (full,
// LoRA, QLoRA, each with and without checkpointing and 8-bit optimizer
// states), the largest micro-batch that fits at the sequence, by the
// simulation (and the formula beside it), and the smallest card class
// each needs at micro-batch 1.

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"sync"

	"trainmem/cuda/enum"
	"trainmem/model"
)

// Method is a way of fine-tuning: every weight trained, LoRA, or QLoRA.
type Method uint8

const (
	MethodFull Method = iota
	MethodLoRA
	MethodQLoRA
	MethodAll // every method (fit --method all)
)

var methodNames = enum.New[Method]("bench", "Method", "method", "full", "lora", "qlora", "all")

func (m Method) String() string { return methodNames.String(m) }

// ParseMethod reads --method: full, lora, qlora or all.
func ParseMethod(s string) (Method, error) { return methodNames.Parse(s) }

// Method defaults: the ranks the LoRA and QLoRA papers' own runs use
// (Hu et al. 2021 adapt at small ranks, 16 a common choice; Dettmers et
// al. 2023 train QLoRA at r 64 on every linear layer, Appendix B), on
// every linear layer, unless --lora-rank and --lora-targets say otherwise.
const (
	DefaultLoRARank  = 16
	DefaultQLoRARank = 64
)

// Card is a class of card by its memory: the bytes, and cards of it.
type Card struct {
	Name  string
	Bytes int64
}

// Cards are the card classes fit names, smallest first: NVIDIA's
// datasheets' capacities (GB on the sheets, GiB as the cards report
// them: an "80GB" A100 reports 80 GiB; the H200's 141 GB is decimal),
// before the CUDA context and libraries take their share (validate's
// context row on a GPU).
var Cards = []Card{
	{"16 GiB (T4, V100 16GB, RTX 4080)", 16 << 30},
	{"24 GiB (RTX 3090/4090, A10G, L4)", 24 << 30},
	{"32 GiB (V100 32GB, RTX 5090)", 32 << 30},
	{"40 GiB (A100 40GB)", 40 << 30},
	{"48 GiB (RTX 6000 Ada, A6000, L40S)", 48 << 30},
	{"80 GiB (A100 80GB, H100)", 80 << 30},
	{"141 GB (H200)", 141e9},
}

// methodRow is one way of fine-tuning and what fits.
type methodRow struct {
	setup   model.Setup   // at micro-batch 1
	checked model.Checked // setup, checked
	method  Method
	formula int // the formula's largest micro-batch
	batch   int // the simulation's
	states  int64
	card    int // the index in Cards of the smallest card micro-batch 1 fits, -1: none
}

// FitMethodsReport is the fine-tuner's fit of a model on a card.
type FitMethodsReport struct {
	Setup   model.Setup
	Memory  int64
	Formula model.Formula
	rows    []methodRow
}

// methodSetup is base (a model and its setup, whatever it fine-tuned)
// fine-tuned by m, at policy p with optimizer o: LoRA and QLoRA with the
// given rank and targets (0 and "": the defaults).
func methodSetup(base model.Setup, m Method, rank int, targets string, p model.Checkpoint, o model.Optimizer) (model.Setup, error) {
	s := base
	s.Batch, s.Checkpoint, s.Optimizer = 1, p, o
	s.Model.Freeze, s.Model.LoRA, s.Model.Quantize = model.Freeze{}, model.LoRA{}, model.QuantNone
	if m == MethodFull {
		return s, nil
	}
	if rank == 0 {
		rank = DefaultLoRARank
		if m == MethodQLoRA {
			rank = DefaultQLoRARank
		}
	}
	if targets == "" {
		targets = "all-linear"
	}
	t, err := s.Model.ParseLoRATargets(targets)
	if err != nil {
		return s, err
	}
	s.Model.LoRA = model.LoRA{Rank: rank, Alpha: base.Model.LoRA.Alpha, Targets: t, RSLoRA: base.Model.LoRA.RSLoRA}
	if s.Model.LoRA.Alpha == 0 {
		s.Model.LoRA.Alpha = model.DefaultLoRAAlpha
	}
	if m == MethodQLoRA {
		s.Model.Quantize = model.QuantNF4
	}
	return s, nil
}

// FitMethods answers, for c's model, sequence and precision and a card of
// memory bytes, each method (all, with MethodAll) with and without full
// checkpointing, with c's optimizer rule and its 8-bit form: the largest
// micro-batch by the simulation and by formula, and the smallest card
// class fitting micro-batch 1. rank and targets are the LoRA's (0, "":
// each method's default). progress gets a line a row.
func FitMethods(c model.Checked, memory int64, formula model.Formula, method Method, rank int, targets string, progress io.Writer) (*FitMethodsReport, error) {
	if err := c.Err(); err != nil {
		return nil, err
	}
	base := c.Setup()
	if base.ParamsOnly() {
		return nil, fmt.Errorf("bench: fit --method fine-tunes a model's layers, and --params gives a bare count: give --preset or a shape")
	}
	methods := []Method{method}
	if method == MethodAll {
		methods = []Method{MethodFull, MethodLoRA, MethodQLoRA}
	}
	rule := base.Optimizer.Rule()
	if rule != model.Adam && rule != model.AdamW {
		return nil, fmt.Errorf("bench: fit --method compares Adam's states with their 8-bit form, and --optimizer is %s (valid: adam, adamw)", base.Optimizer)
	}
	eight := model.Adam8bit
	if rule == model.AdamW {
		eight = model.AdamW8bit
	}
	var rows []methodRow
	for _, m := range methods {
		for _, p := range []model.Checkpoint{{Kind: model.CheckpointNone}, {Kind: model.CheckpointFull}} {
			for _, o := range []model.Optimizer{rule, eight} {
				s, err := methodSetup(base, m, rank, targets, p, o)
				if err != nil {
					return nil, err
				}
				c, err := s.Check()
				if err != nil {
					return nil, fmt.Errorf("bench: fit --method %s: %w", m, err)
				}
				r := methodRow{setup: s, checked: c, method: m, card: -1}
				if r.formula, _, err = s.MaxBatch(memory, formula); err != nil {
					return nil, err
				}
				e1, err := c.Estimate()
				if err != nil {
					return nil, err
				}
				r.states = e1.States.Total()
				rows = append(rows, r)
			}
		}
	}
	var mu sync.Mutex
	err := onCores(len(rows), func(i int) error {
		r := &rows[i]
		var err error
		if r.batch, err = simulatedMaxBatch(r.setup, memory, r.formula); err != nil {
			return err
		}
		for k, card := range Cards {
			ok, err := simFits(r.checked, card.Bytes)
			if err != nil {
				return err
			}
			if ok {
				r.card = k
				break
			}
		}
		if progress != nil {
			mu.Lock()
			fmt.Fprintf(progress, "fit: simulated %s: micro-batch %d\n", r.label(), r.batch)
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &FitMethodsReport{Setup: base, Memory: memory, Formula: formula, rows: rows}, nil
}

// label names a row's method, policy and optimizer.
func (r methodRow) label() string {
	return fmt.Sprintf("%s, checkpoint %s, %s", r.methodText(), r.setup.Checkpoint, r.setup.Optimizer)
}

// methodText is the method with its adapters: "qlora r 64 (nf4)".
func (r methodRow) methodText() string {
	l := r.setup.Model.LoRA
	switch r.method {
	case MethodLoRA:
		return fmt.Sprintf("lora r %d", l.Rank)
	case MethodQLoRA:
		return fmt.Sprintf("qlora r %d", l.Rank)
	}
	return "full"
}

// cardText is the smallest card class's name, or what none is.
func (r methodRow) cardText() string {
	if r.card < 0 {
		return "none of them (over " + Cards[len(Cards)-1].Name + ")"
	}
	return Cards[r.card].Name
}

// WriteText writes a row a method, policy and optimizer.
func (r *FitMethodsReport) WriteText(w io.Writer) error {
	s := r.Setup
	fmt.Fprintln(w, modelLine(s))
	fmt.Fprintf(w, "fine-tuning on %s a rank, sequence %d, %s: the largest micro-batch that fits, by the simulation / by the %s formula, and the smallest card that holds micro-batch 1 (by the simulation)\n\n",
		model.Bytes(r.Memory), s.Seq, precisionPhrase(s), r.Formula)
	var t Table
	t.Add("method", "trained", "checkpoint", "optimizer", "model states", "micro-batch", "smallest card")
	for _, row := range r.rows {
		t.Add(row.methodText(), model.Comma(row.setup.Model.NumTrained()), row.setup.Checkpoint.String(), row.setup.Optimizer.String(),
			model.Bytes(row.states), fmt.Sprintf("%s / %s", batchText(row.setup, row.batch, false), batchText(row.setup, row.formula, false)), row.cardText())
	}
	if err := t.Write(w); err != nil {
		return err
	}
	for _, m := range []Method{MethodLoRA, MethodQLoRA} {
		for _, row := range r.rows {
			if row.method == m {
				fmt.Fprintf(w, "  %s: %s\n", m, row.setup.Model.FrozenBy())
				break
			}
		}
	}
	fmt.Fprintf(w, "  0: nothing fits, not even micro-batch 1. Cards: the datasheets' memory, before the CUDA context and libraries (a few hundred MB) take theirs.\n")
	return nil
}

// fitMethodDoc is one row in JSON.
type fitMethodDoc struct {
	Method                 string   `json:"method"`
	LoRARank               int      `json:"lora_rank,omitempty"`
	LoRATargets            []string `json:"lora_targets,omitempty"`
	Quantize               string   `json:"quantize,omitempty"`
	Trained                int64    `json:"trained_params"`
	Checkpoint             string   `json:"checkpoint"`
	Optimizer              string   `json:"optimizer"`
	ModelStatesBytes       int64    `json:"model_states_bytes"`
	SimulatedMaxMicroBatch int      `json:"simulated_max_micro_batch"`
	MaxMicroBatch          int      `json:"max_micro_batch"`
	SmallestCard           string   `json:"smallest_card,omitempty"`
	SmallestCardBytes      int64    `json:"smallest_card_bytes,omitempty"`
}

func (r methodRow) doc() fitMethodDoc {
	d := fitMethodDoc{Method: r.method.String(), Trained: r.setup.Model.NumTrained(), Checkpoint: r.setup.Checkpoint.String(),
		Optimizer: r.setup.Optimizer.String(), ModelStatesBytes: r.states, SimulatedMaxMicroBatch: r.batch, MaxMicroBatch: r.formula}
	if l := r.setup.Model.LoRA; l.On() {
		d.LoRARank, d.LoRATargets = l.Rank, l.Targets.Names(r.setup.Model)
	}
	if q := r.setup.Model.Quantize; q != model.QuantNone {
		d.Quantize = q.String()
	}
	if r.card >= 0 {
		d.SmallestCard, d.SmallestCardBytes = Cards[r.card].Name, Cards[r.card].Bytes
	}
	return d
}

// WriteJSON writes the rows with exact bytes.
func (r *FitMethodsReport) WriteJSON(w io.Writer) error {
	doc := struct {
		fitHead
		Results []fitMethodDoc `json:"results"`
	}{fitHead: fitHeadOf(r.Setup, r.Memory, r.Formula, "max_micro_batch_by_method")}
	for _, row := range r.rows {
		doc.Results = append(doc.Results, row.doc())
	}
	return writeJSON(w, doc)
}

// WriteCSV writes a row a method, policy and optimizer.
func (r *FitMethodsReport) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	cw.Write([]string{"method", "lora_rank", "quantize", "trained_params", "checkpoint", "optimizer", "model_states_bytes", "simulated_max_micro_batch", "max_micro_batch", "smallest_card_bytes"})
	for _, row := range r.rows {
		d := row.doc()
		cw.Write([]string{d.Method, strconv.Itoa(d.LoRARank), d.Quantize, strconv.FormatInt(d.Trained, 10), d.Checkpoint, d.Optimizer,
			strconv.FormatInt(d.ModelStatesBytes, 10), strconv.Itoa(d.SimulatedMaxMicroBatch), strconv.Itoa(d.MaxMicroBatch), strconv.FormatInt(d.SmallestCardBytes, 10)})
	}
	cw.Flush()
	return cw.Error()
}

// MethodList is the methods --method takes, for messages.
func MethodList() string { return methodNames.List() }
