package model

// A workaround for a quadratic cost in gorgonia v0.9.18's graph building.
//
// ExprGraph finds a node by ID through a cache, byID (ID → index in its
// node list), that it fills on a miss by scanning the list from the first
// node. Every node misses once, right after it is added: NewUniqueNode →
// fixEdges → SetEdge → Has(its own ID), and the scan walks past every
// earlier node to find it at the end. Building a graph of n nodes so costs
// O(n²): `trainmem simulate` of a 4096-layer model spent 67 s in that scan.
//
// The cure is to have the cache hold the entry before the scan is needed.
// addToAll gives a new node the ID counter and the index len(all), then
// increments the counter; while no node is removed, the next k nodes get
// IDs counter..counter+k-1 at indices len..len+k-1. An entry for an ID not
// yet given is invisible: node() answers nil for an index at or past the
// end of the list, which is its answer for an unknown ID. So seeding the
// cache for the nodes about to be made changes no answer, only the cost.
// Removal (gorgonia removes nodes without edges at the start of
// Backpropagate, and pooled duplicates that were never added) would shift
// indices; trainmem's graphs have no node without edges, and after the
// build checkGraphIndex verifies, through the public API, that every node
// is found under its own ID, so a wrong entry could not go unnoticed.
//
// The node maps (byID, byHash, to) and the node list grow as nodes are
// added; when the graph's node count is known (Build measures it on
// graphs of one and two layers), presize makes them at that size first,
// which at thousands of layers saves a tenth of the build.
//
// The cache is an unexported field, reached with reflect and unsafe. If a
// gorgonia version lacks the fields, or types them otherwise, seeding does
// nothing and the build is only slower (graph_index_test.go fails on the
// pinned version if seeding stops working).

import (
	"fmt"
	"reflect"
	"unsafe"

	G "gorgonia.org/gorgonia"
)

// seedGraphIndex turns the seeding on; tests turn it off to compare.
var seedGraphIndex = true

// graphIndex is the view of an ExprGraph's node cache.
type graphIndex struct {
	byID    map[int64]int
	counter *uint
	g       *G.ExprGraph
	seeded  int64 // IDs below this have been seeded
}

// newGraphIndex finds g's cache, or returns nil when this gorgonia version
// does not have the expected fields.
func newGraphIndex(g *G.ExprGraph) *graphIndex {
	v := reflect.ValueOf(g).Elem()
	f, c := v.FieldByName("byID"), v.FieldByName("counter")
	if !f.IsValid() || !c.IsValid() || f.Type() != reflect.TypeOf(map[int64]int(nil)) || c.Kind() != reflect.Uint {
		return nil
	}
	m := *(*map[int64]int)(unsafe.Pointer(f.UnsafeAddr()))
	if m == nil {
		return nil
	}
	return &graphIndex{byID: m, counter: (*uint)(unsafe.Pointer(c.UnsafeAddr())), g: g}
}

// presize makes the graph's node maps and list at the size of a graph of n
// nodes before the first is added, so that they never grow.
func (x *graphIndex) presize(n int) {
	if x == nil || n <= 0 || len(x.g.AllNodes()) > 0 {
		return
	}
	v := reflect.ValueOf(x.g).Elem()
	set := func(name string, m any) {
		f := v.FieldByName(name)
		if f.IsValid() && f.Type() == reflect.TypeOf(m) {
			reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Set(reflect.ValueOf(m))
		}
	}
	byID := make(map[int64]int, n)
	set("byID", byID)
	x.byID = byID
	set("byHash", make(map[uint32]*G.Node, n))
	set("to", make(map[*G.Node]G.Nodes, n))
	set("all", make(G.Nodes, 0, n))
}

// ahead seeds the cache for the next k nodes.
func (x *graphIndex) ahead(k int) {
	if x == nil {
		return
	}
	id, idx := int64(*x.counter), len(x.g.AllNodes())
	for j := range k {
		if _, ok := x.byID[id+int64(j)]; !ok {
			x.byID[id+int64(j)] = idx + j
		}
	}
	x.seeded = max(x.seeded, id+int64(k))
}

// trim drops the entries seeded for IDs that were never given.
func (x *graphIndex) trim() {
	if x == nil {
		return
	}
	for id := int64(*x.counter); id < x.seeded; id++ {
		delete(x.byID, id)
	}
	x.seeded = int64(*x.counter)
}

// checkGraphIndex verifies that every node of g is found under its own ID.
func checkGraphIndex(g *G.ExprGraph) error {
	for i, n := range g.AllNodes() {
		if got, ok := g.Node(n.ID()).(*G.Node); !ok || got != n {
			return fmt.Errorf("model: gorgonia's node index is inconsistent: node %d (%q, ID %d) is not found under its ID", i, n.Name(), n.ID())
		}
	}
	return nil
}
