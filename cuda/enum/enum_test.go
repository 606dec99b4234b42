package enum

import (
	"encoding/json"
	"testing"
)

type color uint8

var colorNames = New[color]("paint", "color", "colour", "red", "green", "blue")

func (c color) String() string                { return colorNames.String(c) }
func (c color) MarshalText() ([]byte, error)  { return colorNames.Marshal(c) }
func (c *color) UnmarshalText(b []byte) error { return colorNames.Unmarshal(c, b) }

func TestNames(t *testing.T) {
	for i, want := range []string{"red", "green", "blue", "color(3)"} {
		if got := color(uint8(i)).String(); got != want {
			t.Errorf("color(%d) = %q, want %q", i, got, want)
		}
	}
	if got := color(255).String(); got != "color(255)" {
		t.Errorf("a value past the table is %q, want color(255)", got)
	}
	for _, c := range colorNames.Values() {
		got, err := colorNames.Parse(c.String())
		if err != nil || got != c {
			t.Errorf("Parse(%q) = %v, %v; want %v", c.String(), got, err, c)
		}
	}
	if _, err := colorNames.Parse("mauve"); err == nil || err.Error() != `paint: unknown colour "mauve" (valid: red, green, blue)` {
		t.Errorf("Parse(mauve) = %v", err)
	}
	if _, ok := colorNames.Lookup("Red"); ok {
		t.Error("Lookup is case-sensitive: Red is not red")
	}
	if got := colorNames.List(); got != "red, green, blue" {
		t.Errorf("List = %q", got)
	}
}

// A map keyed by the enum is a JSON object keyed by name, both ways; a
// value past the table is refused, not written as a key no reader parses.
func TestNamesText(t *testing.T) {
	b, err := json.Marshal(map[color]int{0: 1, 2: 3})
	if err != nil || string(b) != `{"blue":3,"red":1}` {
		t.Fatalf("Marshal = %s, %v", b, err)
	}
	var back map[color]int
	if err := json.Unmarshal(b, &back); err != nil || back[0] != 1 || back[2] != 3 || len(back) != 2 {
		t.Fatalf("Unmarshal = %v, %v", back, err)
	}
	if _, err := json.Marshal(map[color]int{7: 1}); err == nil {
		t.Error("a value past the table was marshalled")
	} else if _, err := colorNames.Marshal(7); err.Error() != "paint: colour 7 does not exist" {
		t.Errorf("Marshal(7) = %v", err)
	}
	if err := json.Unmarshal([]byte(`{"mauve":1}`), &back); err == nil {
		t.Error("an unknown name was read")
	}
}
