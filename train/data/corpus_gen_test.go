package data

// The default corpus is generated, deterministically, by generateCorpus:
// short stories of a river village written from sentence templates and word
// lists made for trainmem (nothing is downloaded or copied). The test below
// keeps corpus.txt equal to the generator's output; regenerate it with
//
//	go test ./train/data -run TestCorpusUpToDate -update

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite corpus.txt from the generator")

// corpusBytes is the size the generator stops at: about 48 KB, tens of
// thousands of byte tokens, small in the binary and large enough that a
// small model does not just memorise it in 200 steps.
const corpusBytes = 48 << 10

type vocab struct {
	names, roles, places, objects, counted, animals, times, seasons, weathers,
	moods, tools, foods, colours, numbers, days, quotes []string
}

var words = vocab{
	names:   []string{"Anna", "Tom", "Mara", "Ben", "Lena", "Hugo", "Ida", "Sam", "Nora", "Paul", "Rosa", "Karl"},
	roles:   []string{"baker", "farmer", "miller", "smith", "weaver", "teacher", "fisher", "doctor", "potter", "carpenter"},
	places:  []string{"the mill", "the river", "the market", "the old bridge", "the school", "the forest", "the harbour", "the hill", "the garden", "the church", "the inn", "the well"},
	objects: []string{"bread", "apples", "nets", "wool", "letters", "tools", "books", "fish", "candles", "baskets", "eggs", "flowers"},
	animals: []string{"the dog", "the cat", "the old horse", "the goats", "the geese", "a fox", "the cows", "a small bird", "the sheep", "an owl"},
	times:   []string{"in the morning", "at noon", "in the evening", "at night", "before dawn", "after supper", "early in the day", "late in the afternoon"},
	counted: []string{"loaves", "apples", "eggs", "candles", "pears", "cups", "letters", "plums", "onions", "spoons"},
	seasons: []string{"spring", "summer", "autumn", "winter"},
	weathers: []string{"a cold wind blew from the north", "it rained all day", "the sky was clear and blue",
		"a thick fog hid the river", "a storm came over the hills"},
	moods:   []string{"happy", "tired", "quiet", "busy", "worried", "proud", "hungry", "calm"},
	tools:   []string{"a hammer", "a knife", "a spade", "a ladder", "a rope", "a needle", "a saw", "a bucket"},
	foods:   []string{"soup", "bread and cheese", "apple cake", "fish with potatoes", "porridge", "warm milk", "plum jam", "roast onions"},
	colours: []string{"red", "green", "blue", "yellow", "brown", "white", "grey", "black"},
	numbers: []string{"two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "twelve"},
	days:    []string{"Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"},
	quotes: []string{
		"The river is high today.", "Have you seen my basket?", "We should finish before the rain.",
		"The bread is still warm.", "Come and sit by the fire.", "I will help you tomorrow.",
		"The bridge needs new boards.", "Listen to the birds.", "Where did the goats go?",
		"It is a good day for fishing.", "Bring the lamp, it is getting dark.", "Thank you for the apples.",
	},
}

// seasonal weather, added to the common weathers for scenes of that season.
var seasonal = map[string][]string{
	"spring": {"the first flowers opened by the road", "warm rain fell on the fields", "the birds came back from the south"},
	"summer": {"the sun was hot", "the air was still and heavy", "the evenings were long and bright"},
	"autumn": {"the leaves turned yellow and red", "the wind shook the apple trees", "the nights grew cold"},
	"winter": {"snow lay on the roofs", "the river froze at the edges", "the days were short and dark"},
}

var work = map[string][]string{
	"baker":     {"baked bread for the whole street", "lit the oven before the sun rose", "sold warm rolls at the market"},
	"farmer":    {"ploughed the long field", "fed the animals", "carried hay into the barn"},
	"miller":    {"ground the wheat into flour", "mended the wheel of the mill", "weighed the sacks of grain"},
	"smith":     {"made new shoes for the horse", "mended a broken gate", "worked the iron until it glowed"},
	"weaver":    {"wove a blanket of red wool", "sat at the loom all day", "sold cloth to the travellers"},
	"teacher":   {"taught the children to read", "told the class a story about the sea", "wrote sums on the board"},
	"fisher":    {"rowed out on the river", "mended the nets on the shore", "brought home a basket of fish"},
	"doctor":    {"visited the sick old man", "gave the child some medicine", "walked to the farms on the hill"},
	"potter":    {"shaped a bowl on the wheel", "fired the cups in the kiln", "painted flowers on a jug"},
	"carpenter": {"built a new table", "fixed the roof of the school", "cut boards for the bridge"},
}

// gen writes the corpus from a seeded stream, so the same code gives the
// same bytes.
type gen struct {
	r *rand.Rand
	b strings.Builder
}

func (g *gen) pick(xs []string) string { return xs[g.r.IntN(len(xs))] }

func capitalise(s string) string { return strings.ToUpper(s[:1]) + s[1:] }

// sentence returns one sentence about who (a name), from a family of
// templates chosen at random.
func (g *gen) sentence(who, role string, weathers []string) string {
	w := words
	other := g.pick(w.names)
	for other == who {
		other = g.pick(w.names)
	}
	switch g.r.IntN(14) {
	case 0:
		return fmt.Sprintf("%s the %s went to %s %s.", who, role, g.pick(w.places), g.pick(w.times))
	case 1:
		return fmt.Sprintf("%s, %s carried %s to %s.", capitalise(g.pick(w.times)), who, g.pick(w.objects), g.pick(w.places))
	case 2:
		return fmt.Sprintf("%s %s.", who, g.pick(work[role]))
	case 3:
		return fmt.Sprintf("%s said to %s, \"%s\"", who, other, g.pick(w.quotes))
	case 4:
		return fmt.Sprintf("%s was %s, because %s.", who, g.pick(w.moods), g.pick(weathers))
	case 5:
		return fmt.Sprintf("There were %s %s in the basket, and %s counted them twice.", g.pick(w.numbers), g.pick(w.counted), who)
	case 6:
		return fmt.Sprintf("%s watched %s near %s.", who, g.pick(w.animals), g.pick(w.places))
	case 7:
		return fmt.Sprintf("For supper %s ate %s and drank a cup of tea.", who, g.pick(w.foods))
	case 8:
		return fmt.Sprintf("%s borrowed %s from the %s and promised to bring it back on %s.", who, g.pick(w.tools), g.pick(w.roles), g.pick(w.days))
	case 9:
		return fmt.Sprintf("%s painted the door %s, and the neighbours liked it.", who, g.pick(w.colours))
	case 10:
		return fmt.Sprintf("Even when %s, %s %s.", g.pick(weathers), who, g.pick(work[role]))
	case 11:
		return fmt.Sprintf("%s did not go to %s, because %s was %s.", who, g.pick(w.places), other, g.pick(w.moods))
	case 12:
		jobs := work[role]
		i := g.r.IntN(len(jobs))
		j := (i + 1 + g.r.IntN(len(jobs)-1)) % len(jobs)
		return fmt.Sprintf("On %s %s %s, and then %s.", g.pick(w.days), who, jobs[i], jobs[j])
	default:
		return fmt.Sprintf("%s walked home along the %s road and thought about %s.", who, g.pick(w.places)[4:], g.pick(w.objects))
	}
}

// paragraph tells a short scene about one person.
func (g *gen) paragraph() {
	w := words
	who, role := g.pick(w.names), g.pick(w.roles)
	season := g.pick(w.seasons)
	weathers := append(append([]string(nil), w.weathers...), seasonal[season]...)
	fmt.Fprintf(&g.b, "In %s, %s.", season, g.pick(weathers))
	n := 3 + g.r.IntN(4)
	for range n {
		g.b.WriteByte(' ')
		g.b.WriteString(g.sentence(who, role, weathers))
	}
	if g.r.IntN(3) == 0 {
		fmt.Fprintf(&g.b, " By the end of %s, %s had %s %s to sell.", season, who, g.pick(w.numbers), g.pick(w.counted))
	}
	g.b.WriteString("\n\n")
}

func generateCorpus() string {
	g := &gen{r: rand.New(rand.NewPCG(2024, 326))}
	g.b.WriteString("The River Village\n\n")
	g.b.WriteString("This is a book of small stories about a village by a river. " +
		"The people of the village bake, fish, weave and build, and they talk about the weather. " +
		"Nothing very important happens, and that is why they like it there.\n\n")
	for chapter := 1; g.b.Len() < corpusBytes; chapter++ {
		fmt.Fprintf(&g.b, "Chapter %d\n\n", chapter)
		for range 4 + g.r.IntN(3) {
			g.paragraph()
		}
	}
	return g.b.String()
}

func TestCorpusUpToDate(t *testing.T) {
	want := generateCorpus()
	if *update {
		if err := os.WriteFile("corpus.txt", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if DefaultCorpus() != want {
		t.Fatalf("corpus.txt (%d bytes) differs from the generator's output (%d bytes); run go test ./train/data -run TestCorpusUpToDate -update", len(DefaultCorpus()), len(want))
	}
}
