package model

// PEFT's adapter_config.json as a LoRA of a model: the fields that decide
// the adapters (r, lora_alpha, target_modules, use_rslora) are read; a
// field whose value trainmem cannot honour is refused by name; the others
// (task_type, inference_mode, the base model's name, ...) do not change
// the memory or the arithmetic and are passed over. The names and defaults
// are PEFT's LoraConfig (peft/tuners/lora/config.py, PEFT 0.10 to 0.13).

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"trainmem/model/files"
)

// peftConfig is the part of an adapter_config.json that decides a LoRA; a
// pointer is nil where the file leaves the field out or sets it to null.
type peftConfig struct {
	PEFTType          string          `json:"peft_type"`
	R                 *int            `json:"r"`
	Alpha             *float64        `json:"lora_alpha"`
	Dropout           *float64        `json:"lora_dropout"`
	Targets           json.RawMessage `json:"target_modules"`
	Bias              *string         `json:"bias"`
	RSLoRA            *bool           `json:"use_rslora"`
	DoRA              *bool           `json:"use_dora"`
	ModulesToSave     json.RawMessage `json:"modules_to_save"`
	LayersToTransform json.RawMessage `json:"layers_to_transform"`
	RankPattern       json.RawMessage `json:"rank_pattern"`
	AlphaPattern      json.RawMessage `json:"alpha_pattern"`
}

// ReadPEFTConfig reads PEFT's adapter_config.json at path (--peft-config)
// as a LoRA of c, and notes what trainmem reads but does not model (a
// lora_dropout above 0). Errors are *files.InputError naming the file.
func ReadPEFTConfig(path string, c Config) (LoRA, []string, error) {
	f, size, err := files.OpenInput("--peft-config", path)
	if err != nil {
		return LoRA{}, nil, err
	}
	defer f.Close()
	if size > hfConfigBytes {
		return LoRA{}, nil, files.BadInput(path, fmt.Errorf("--peft-config %s: %d bytes, more than an adapter_config.json's %d at the most", path, size, hfConfigBytes))
	}
	data, err := io.ReadAll(io.LimitReader(f, size))
	if err != nil {
		return LoRA{}, nil, files.BadInput(path, fmt.Errorf("--peft-config %s: %w", path, err))
	}
	l, notes, err := ParsePEFTConfig(data, c)
	if err != nil {
		return LoRA{}, nil, files.BadInput(path, fmt.Errorf("--peft-config %s: %s", path, strings.TrimPrefix(err.Error(), "model: ")))
	}
	return l, notes, nil
}

// ParsePEFTConfig reads the bytes of an adapter_config.json
// (ReadPEFTConfig) as a LoRA of c.
func ParsePEFTConfig(data []byte, c Config) (LoRA, []string, error) {
	p, err := decodeObject[peftConfig](data, "PEFT's LoraConfig fields")
	if err != nil {
		return LoRA{}, nil, err
	}
	if p.PEFTType != "LORA" {
		return LoRA{}, nil, refuse("peft_type", fmt.Sprintf("%q", p.PEFTType), `trainmem runs LoRA adapters (valid: "LORA")`)
	}
	// LoraConfig's defaults: r 8, lora_alpha 8, bias "none".
	l := LoRA{Rank: 8, Alpha: 8}
	if p.R != nil {
		if *p.R < 1 {
			return LoRA{}, nil, refuse("r", *p.R, fmt.Sprintf("LoRA rank %d (valid: 1 to %d)", *p.R, MaxLoRARank))
		}
		l.Rank = *p.R
	}
	if p.Alpha != nil {
		l.Alpha = *p.Alpha
	}
	if p.RSLoRA != nil {
		l.RSLoRA = *p.RSLoRA
	}
	switch {
	case p.Bias != nil && *p.Bias != "none":
		return LoRA{}, nil, refuse("bias", fmt.Sprintf("%q", *p.Bias), `trainmem trains no biases beside the adapters (valid: "none")`)
	case p.DoRA != nil && *p.DoRA:
		return LoRA{}, nil, refuse("use_dora", true, "DoRA's magnitude vectors are not LoRA's (valid: false)")
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"modules_to_save", p.ModulesToSave}, {"layers_to_transform", p.LayersToTransform}, {"rank_pattern", p.RankPattern}, {"alpha_pattern", p.AlphaPattern}} {
		if s := strings.TrimSpace(string(f.raw)); s != "" && s != "null" && s != "{}" && s != "[]" {
			return LoRA{}, nil, refuse(f.name, s, "trainmem adapts every block alike and trains nothing but the adapters (valid: null or empty)")
		}
	}
	// target_modules: a list of names, "all-linear", or absent (PEFT's
	// default for the architecture); another string is a regular
	// expression, which trainmem does not match.
	l.Targets = c.DefaultLoRATargets()
	switch raw := strings.TrimSpace(string(p.Targets)); {
	case raw == "" || raw == "null":
	case raw[0] == '"':
		var s string
		if err := json.Unmarshal(p.Targets, &s); err != nil {
			return LoRA{}, nil, fmt.Errorf("model: target_modules: %v", jsonWords(err))
		}
		if s != "all-linear" {
			return LoRA{}, nil, refuse("target_modules", fmt.Sprintf("%q", s), `a regular expression, which trainmem does not match (valid: a list of module names, or "all-linear")`)
		}
		if l.Targets, err = c.ParseLoRATargets(s); err != nil {
			return LoRA{}, nil, err
		}
	default:
		var names []string
		if err := json.Unmarshal(p.Targets, &names); err != nil {
			return LoRA{}, nil, fmt.Errorf("model: target_modules: %v (valid: a list of module names)", jsonWords(err))
		}
		if l.Targets, err = c.ParseLoRATargets(strings.Join(names, ",")); err != nil {
			return LoRA{}, nil, err
		}
	}
	var notes []string
	if p.Dropout != nil && *p.Dropout > 0 {
		notes = append(notes, fmt.Sprintf("lora_dropout %g is not modelled: trainmem has no dropout, and PEFT keeps each adapted layer's dropped-out input for A's gradient (N·in values a layer more)", *p.Dropout))
	}
	c.LoRA = l
	if err := l.check(c); err != nil {
		return LoRA{}, nil, err
	}
	return l, notes, nil
}
