package zero

// What the collectives cost in time: NCCL's algorithms (ring, tree, and
// NVLink SHARP on NVSwitch systems) and protocols (LL, LL128, Simple)
// over a network of nodes, each a number of GPUs joined by NVLink, the
// nodes joined by InfiniBand or Ethernet, costed as NCCL's own tuner costs
// them (src/graph/tuning.cc: a latency of a base per algorithm and
// protocol plus one per hop, and the bytes over the bus bandwidth), with
// nccl-tests' bus-bandwidth rules (doc/PERFORMANCE.md) saying how much
// each collective moves: an all-reduce of S bytes over n ranks moves
// 2(n-1)/n·S over each rank's links, a reduce-scatter or all-gather whose
// whole buffer is S bytes (n-1)/n·S, a broadcast or reduce S. A layout's
// axes sit on the network as Megatron-LM places its groups (Layout: the
// tensor ranks consecutive, so within a node; the data ranks next; the
// pipeline stages strided over the whole run), and a group's links are the
// ones its ranks cross.

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"trainmem/cuda"
	"trainmem/cuda/enum"
)

// LinkSpeed is a kind of connection: its bandwidth in bytes/s one way, the
// fraction of it a collective reaches, and its latency a hop under each
// protocol (NCCL's hwLat).
type LinkSpeed struct {
	Bandwidth  float64
	Efficiency float64
}

// Network is where ranks sit and how they are joined: GPUsPerNode GPUs a
// node over NVLink (Intra: a GPU's bandwidth one way to the switch or its
// peers), the nodes over a network (Inter: a node's NICs together, one
// way; each GPU has its share, 1/GPUsPerNode, as each GPU of a DGX has its
// own NIC), NVLS the bus bandwidth of an all-reduce inside a node by
// NVLink SHARP (0 where the switch has none), and PCIe a GPU's bandwidth
// one way to the host (offload copies).
type Network struct {
	Name        string
	GPUsPerNode int
	Intra       LinkSpeed
	Inter       LinkSpeed
	NVLS        float64
	PCIe        LinkSpeed
	Source      string
	// Ring, when set, is a link between host ranks timed for trainmem's
	// own ring (HostNetwork): every collective costs what the ring takes
	// on it, not what NCCL would.
	Ring *HostRing
}

// The sources of the systems' numbers.
const (
	dgxA100Sheet = "NVIDIA DGX A100 datasheet (2020): 8 A100 over NVLink 3 and NVSwitch, 600 GB/s a GPU both ways; 8 single-port ConnectX-6 HDR InfiniBand, 200 Gb/s each; PCIe Gen4 x16 to the host"
	dgxH100Sheet = "NVIDIA DGX H100 datasheet (2023): 8 H100 over NVLink 4 and NVSwitch, 900 GB/s a GPU both ways; 8 ConnectX-7 NDR InfiniBand, 400 Gb/s each; PCIe Gen5 x16"
	p4dSheet     = "AWS p4d.24xlarge: 8 A100 over NVLink 3 and NVSwitch, 400 Gb/s of EFA a node; PCIe Gen4"
	p5Sheet      = "AWS p5.48xlarge: 8 H100 over NVLink 4 and NVSwitch, 3,200 Gb/s of EFA a node; PCIe Gen5"
	// nvlinkEff is the fraction of NVLink's bandwidth NCCL's ring reaches:
	// about 370 of 450 GB/s on an H100 node (S. Jeaugey, NVIDIA, in
	// nccl-tests issue #212); 8 A100s reach 232 GB/s of 300 (OCI's
	// published all_reduce_perf at 10 GiB).
	nvlinkEff = 0.8
	// netEff is the fraction of a node's InfiniBand or RoCE bandwidth
	// NCCL's ring reaches: 191.76 GB/s of 200 across two 8-A100 nodes over
	// RoCE (OCI's published all_reduce_perf).
	netEff = 0.96
	// nvlsH100 is NVLink SHARP's all-reduce bus bandwidth on 8 H100s:
	// about 480 GB/s (S. Jeaugey, nccl-tests issue #212).
	nvlsH100 = 480e9
	// pcieEff: a pinned copy over PCIe reaches about 80% of the link
	// (Gen4 x16: 25 of 32 GB/s; Gen5 x16: 50 of 64 GB/s, NVIDIA's
	// nvbandwidth on H100 systems).
	pcieEff = 0.8
)

// Networks are the named systems --network takes.
var Networks = []Network{
	{"dgx-a100", 8, LinkSpeed{300e9, nvlinkEff}, LinkSpeed{8 * 25e9, netEff}, 0, LinkSpeed{32e9, pcieEff}, dgxA100Sheet, nil},
	{"dgx-h100", 8, LinkSpeed{450e9, nvlinkEff}, LinkSpeed{8 * 50e9, netEff}, nvlsH100, LinkSpeed{64e9, pcieEff}, dgxH100Sheet, nil},
	{"p4d", 8, LinkSpeed{300e9, nvlinkEff}, LinkSpeed{50e9, netEff}, 0, LinkSpeed{32e9, pcieEff}, p4dSheet, nil},
	{"p5", 8, LinkSpeed{450e9, nvlinkEff}, LinkSpeed{400e9, netEff}, nvlsH100, LinkSpeed{64e9, pcieEff}, p5Sheet, nil},
}

// DefaultNetwork is the system a layout sits on when none is named, for
// a card: a DGX of its generation.
func DefaultNetwork(card string) Network {
	n, _ := NetworkByName("dgx-h100")
	if strings.HasPrefix(card, "a100") || strings.HasPrefix(card, "a800") {
		n, _ = NetworkByName("dgx-a100")
	}
	return n
}

// NetworkByName is the named system, if one is.
func NetworkByName(name string) (Network, bool) {
	for _, n := range Networks {
		if strings.EqualFold(n.Name, name) {
			return n, true
		}
	}
	return Network{}, false
}

// NetworkNames lists the names --network takes, for messages.
func NetworkNames() string {
	var s []string
	for _, n := range Networks {
		s = append(s, n.Name)
	}
	return strings.Join(s, ", ")
}

// ParseNetwork reads --network: a system's name, or numbers
// "nvlink=GB/s,net=GB/s" (a GPU's NVLink one way; a node's network one
// way), optionally with pcie=GB/s and gpus=G, each at the named systems'
// efficiencies.
func ParseNetwork(s string) (Network, error) {
	if n, ok := NetworkByName(s); ok {
		return n, nil
	}
	valid := NetworkNames() + ", or nvlink=GB/s,net=GB/s[,pcie=GB/s][,gpus=G]"
	if !strings.Contains(s, "=") {
		return Network{}, cuda.Argf("zero", "network", strconv.Quote(s), "unknown", valid)
	}
	n := Network{Name: s, GPUsPerNode: 8, Intra: LinkSpeed{0, nvlinkEff}, Inter: LinkSpeed{0, netEff}, PCIe: LinkSpeed{32e9, pcieEff}, Source: "given: " + s}
	for _, kv := range strings.Split(s, ",") {
		k, v, _ := strings.Cut(kv, "=")
		what := "network " + strconv.Quote(s) + ": " + k
		f, err := strconv.ParseFloat(v, 64)
		if k == "gpus" {
			if err != nil || f != math.Trunc(f) || f < 1 || f > 1024 {
				return Network{}, cuda.Argf("zero", what, strconv.Quote(v), "not a whole number in range", "1 to 1024")
			}
			n.GPUsPerNode = int(f)
			continue
		}
		var to *float64
		switch k {
		case "nvlink":
			to = &n.Intra.Bandwidth
		case "net":
			to = &n.Inter.Bandwidth
		case "pcie":
			to = &n.PCIe.Bandwidth
		default:
			return Network{}, cuda.Argf("zero", "network "+strconv.Quote(s)+": key", strconv.Quote(k), "unknown", "nvlink, net, pcie, gpus")
		}
		switch {
		case err != nil:
			return Network{}, cuda.Argf("zero", what, strconv.Quote(v), "not a number of GB/s", "0.001 to 1e6")
		case !(f >= 0.001 && f <= 1e6):
			return Network{}, cuda.Argf("zero", what, strconv.Quote(v), "out of range", "0.001 to 1e6 GB/s")
		}
		*to = f * 1e9
	}
	if n.Intra.Bandwidth == 0 || n.Inter.Bandwidth == 0 {
		return Network{}, cuda.Argf("zero", "network", strconv.Quote(s), "needs both nvlink= and net=", valid)
	}
	return n, nil
}

// Algorithm is one of NCCL's collective algorithms.
type Algorithm uint8

const (
	Ring Algorithm = iota
	Tree
	NVLS     // NVLink SHARP: the reduction in the NVSwitch, inside a node
	NVLSTree // NVLink SHARP inside each node, a tree between nodes
	numAlgorithms
)

var algorithmNames = enum.New[Algorithm]("zero", "Algorithm", "algorithm", "ring", "tree", "nvls", "nvls_tree")

func (a Algorithm) String() string { return algorithmNames.String(a) }

// Protocol is one of NCCL's protocols: LL moves 4 bytes of data in 8
// (half the bandwidth, the least latency), LL128 120 in 128, Simple all.
type Protocol uint8

const (
	LL Protocol = iota
	LL128
	Simple
	numProtocols
)

var protocolNames = enum.New[Protocol]("zero", "Protocol", "protocol", "LL", "LL128", "Simple")

func (p Protocol) String() string { return protocolNames.String(p) }

// NCCL's latencies in µs (src/graph/tuning.cc, NCCL 2.18 to 2.30): a base
// per algorithm and protocol, and one a hop over NVLink and over the
// network; the protocols' shares of the bandwidth.
var (
	baseLat = [numAlgorithms][numProtocols]float64{
		Ring: {6.6, 14.0, 8.4}, Tree: {6.8, 14.0, 8.4}, NVLS: {0, 0, 25}, NVLSTree: {0, 0, 25}}
	nvlinkLat = [numAlgorithms][numProtocols]float64{
		Ring: {0.6, 1.9, 3.4}, Tree: {0.6, 1.25, 4.0}, NVLS: {0, 0, 0}, NVLSTree: {0, 0, 0}}
	netLat = [numAlgorithms][numProtocols]float64{
		Ring: {2.7, 4.0, 14.0}, Tree: {5.0, 8.5, 14.0}, NVLS: {0, 0, 0}, NVLSTree: {0, 0, 14.0}}
	protoBW = [numProtocols]float64{LL: 0.5, LL128: 0.92, Simple: 1}
)

// llMaxBW caps LL's bus bandwidth (tuning.cc's llMaxBws, one node):
// 87.7 GB/s on Ampere, 141 on Hopper; across nodes 22.5 and 45.
func (nw Network) llMaxBW(nodes int) float64 {
	hopper := nw.NVLS > 0 || nw.Intra.Bandwidth >= 450e9
	switch {
	case hopper && nodes == 1:
		return 141e9
	case hopper:
		return 45e9
	case nodes == 1:
		return 87.7e9
	}
	return 22.5e9
}

// The pipeline's fill: NCCL moves a buffer in chunks through the ring or
// tree, so a collective takes the time of its bytes plus that of filling
// the pipeline, which grows with the chunks until they reach their full
// size. trainmem models it as the bytes' own time again, up to a most:
// half the bandwidth for small buffers, a fixed cost for large ones. The
// most is fitted to the published all_reduce_perf tables the tests
// reproduce: 8 A100s in a node, whose middle sizes take about 150 µs more
// than their bytes at full bandwidth, over the ring's 14 steps (a deeper
// pipeline fills longer: about 10.7 µs a step); 2 p5 nodes, about 400 µs.
const (
	fillNVLinkStep = 150e-6 / 14
	fillNetwork    = 400e-6
)

// Span is where a collective's ranks sit: N ranks over Nodes nodes, the
// same number on each (K = N/Nodes), every GPU of those nodes busy with a
// group like it at the same time (so a group's share of a node's network
// is its K GPUs' NICs).
type Span struct {
	N, Nodes int
}

// K is the group's ranks a node.
func (g Span) K() int { return g.N / g.Nodes }

// BusFactor is how many times the buffer of S bytes crosses each rank's
// links in the collective (nccl-tests' bus-bandwidth factor): bus
// bandwidth = S/t · BusFactor.
func BusFactor(c Collective, n int) float64 {
	if n <= 1 {
		return 0
	}
	switch c {
	case AllReduce:
		return 2 * float64(n-1) / float64(n)
	case ReduceScatter, AllGather:
		return float64(n-1) / float64(n)
	}
	return 1 // broadcast, reduce, send/recv
}

// Cost is a collective's modelled time and how NCCL would run it.
type Cost struct {
	Time      time.Duration
	Algorithm Algorithm
	Protocol  Protocol
	// Latency is the fixed part; BusBW the bus bandwidth it moves the
	// bytes at (bytes/s).
	Latency time.Duration
	BusBW   float64
}

// Cost is the time of collective c of a buffer of S bytes (nccl-tests'
// S: the all-reduce's or broadcast's buffer, the all-gather's output,
// the reduce-scatter's input; the message of a send/recv) over group g on
// the network: the fastest of NCCL's algorithms and protocols for it, each
// its latency plus BusFactor·S over its bus bandwidth. One rank, or no
// bytes, costs nothing.
func (nw Network) Cost(c Collective, S int64, g Span) Cost {
	if g.N <= 1 && c != SendRecv || S <= 0 {
		return Cost{}
	}
	if nw.Ring != nil {
		return nw.Ring.cost(c, S, g.N)
	}
	best := Cost{Time: time.Duration(math.MaxInt64)}
	for a := range numAlgorithms {
		for p := range numProtocols {
			lat, bw := nw.algorithm(c, g, a, p)
			if bw <= 0 {
				continue
			}
			f := BusFactor(c, g.N)
			if c == SendRecv {
				f = 1
			}
			move := f * float64(S) / bw
			fill := fillNVLinkStep * ringSteps(c, g.N)
			if g.Nodes > 1 {
				fill = fillNetwork
			}
			s := lat*1e-6 + move + min(move, fill)
			t := time.Duration(math.Ceil(s * 1e9))
			if t < best.Time {
				best = Cost{Time: t, Algorithm: a, Protocol: p, Latency: time.Duration(lat * 1e3), BusBW: bw}
			}
		}
	}
	return best
}

// ringSteps is the steps of c's ring over n ranks: 2(n-1) for an
// all-reduce, n-1 for the others, 1 for a send.
func ringSteps(c Collective, n int) float64 {
	switch c {
	case SendRecv:
		return 1
	case AllReduce:
		return 2 * float64(n-1)
	}
	return float64(n - 1)
}

// algorithm is algorithm a's latency in µs and bus bandwidth in bytes/s
// for c over g under protocol p; bandwidth 0 when NCCL has no such
// algorithm for it.
func (nw Network) algorithm(c Collective, g Span, a Algorithm, p Protocol) (lat, bw float64) {
	k := g.K()
	intra := nw.Intra.Bandwidth * nw.Intra.Efficiency
	// The group's share of each node's network: its K GPUs' NICs.
	inter := nw.Inter.Bandwidth * nw.Inter.Efficiency * float64(k) / float64(nw.GPUsPerNode)
	// The bus bandwidth of a ring through the group: its slowest link.
	ring := math.Inf(1)
	if k > 1 {
		ring = intra
	}
	if g.Nodes > 1 {
		ring = min(ring, inter)
	}
	if c == SendRecv {
		// One hop: over NVLink inside a node, else over one GPU's NIC.
		if a != Ring {
			return 0, 0
		}
		if g.Nodes > 1 {
			return baseLat[Ring][p] + netLat[Ring][p], nw.protocolBW(inter/float64(k), p, g.Nodes)
		}
		return baseLat[Ring][p] + nvlinkLat[Ring][p], nw.protocolBW(intra, p, 1)
	}
	steps, interSteps := ringSteps(c, g.N), float64(g.Nodes-1)
	if c == AllReduce {
		interSteps *= 2
	}
	switch a {
	case Ring:
		lat = baseLat[Ring][p] + (steps-interSteps)*nvlinkLat[Ring][p] + interSteps*netLat[Ring][p]
		return lat, nw.protocolBW(ring, p, g.Nodes)
	case Tree:
		// A chain inside each node, a double binary tree between them:
		// all-reduce only, at the ring's bandwidth (NCCL 2.4's trees keep
		// the full bandwidth) and a latency logarithmic in the nodes.
		if c != AllReduce || g.Nodes < 2 {
			return 0, 0
		}
		lat = baseLat[Tree][p] + 2*(float64(k-1)*nvlinkLat[Tree][p]+math.Log2(float64(g.Nodes))*netLat[Tree][p])
		return lat, nw.protocolBW(ring, p, g.Nodes)
	case NVLS, NVLSTree:
		// The switch reduces: an all-reduce of the whole node's group,
		// Simple only. NVLSTree: each node's switch, then a tree between
		// the nodes whose bytes cross each node once, not 2(n-1)/n
		// times, so its bus bandwidth is BusFactor times the network's.
		if nw.NVLS <= 0 || c != AllReduce || p != Simple || k != nw.GPUsPerNode {
			return 0, 0
		}
		if a == NVLS {
			if g.Nodes != 1 {
				return 0, 0
			}
			return baseLat[NVLS][p], nw.NVLS
		}
		if g.Nodes < 2 {
			return 0, 0
		}
		lat = baseLat[NVLSTree][p] + 2*math.Log2(float64(g.Nodes))*netLat[NVLSTree][p]
		return lat, min(nw.NVLS, BusFactor(AllReduce, g.N)*inter)
	}
	return 0, 0
}

// protocolBW is a bus bandwidth bw under protocol p: its share, and LL's
// cap.
func (nw Network) protocolBW(bw float64, p Protocol, nodes int) float64 {
	bw *= protoBW[p]
	if p == LL {
		bw = min(bw, nw.llMaxBW(nodes))
	}
	return bw
}

// String names the network for reports.
func (nw Network) String() string {
	if nw.Ring != nil {
		return fmt.Sprintf("%s (%d ranks: trainmem's ring, %v a collective, %v a step, %.2f GB/s)", nw.Name, nw.GPUsPerNode, nw.Ring.Call.Round(100*time.Nanosecond), nw.Ring.Step.Round(100*time.Nanosecond), nw.Ring.Bandwidth/1e9)
	}
	return fmt.Sprintf("%s (%d GPUs a node, NVLink %.0f GB/s, network %.0f GB/s a node)", nw.Name, nw.GPUsPerNode, nw.Intra.Bandwidth/1e9, nw.Inter.Bandwidth/1e9)
}

// GroupOf is where axis a's groups of the layout sit on nodes of
// perNode GPUs: the ranks of rank 0's group, and the nodes they span.
// Every group of an axis sits alike (the axes' strides are the same for
// each), so rank 0's stands for all.
func (l Layout) GroupOf(a Axis, perNode int) Span {
	d := l.Degree(a)
	if d <= 1 {
		return Span{N: 1, Nodes: 1}
	}
	s := l.stride(a)
	if s >= perNode {
		return Span{N: d, Nodes: d}
	}
	// s < perNode: perNode/s of the group's ranks share a node (the
	// strides and node sizes of a layout are products of its degrees;
	// where they are not multiples, count).
	if perNode%s == 0 {
		k := min(d, perNode/s)
		if d%k == 0 {
			return Span{N: d, Nodes: d / k}
		}
	}
	nodes := map[int]bool{}
	for i := range d {
		nodes[i*s/perNode] = true
	}
	return Span{N: d, Nodes: len(nodes)}
}
