//go:build trainmem_cuda

package gpu

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"trainmem/cuda"
)

// ncclH is what trainmem relies on in NCCL's published header: the
// prototypes of the functions it calls and the values of the enums it
// passes, as nccl.h declares them (NVIDIA/nccl, src/nccl.h.in at commit
// 021e8045ff77a8a9fba909617a0129d3c3d44def, NCCL 2.29; unchanged since
// 2.12 for every line below).
var ncclH = struct {
	protos []string
	values map[string]int
}{
	protos: []string{
		"ncclResult_t ncclGetVersion(int *version)",
		"ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId)",
		"ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank)",
		"ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist)",
		"ncclResult_t ncclCommDestroy(ncclComm_t comm)",
		"ncclResult_t ncclCommAbort(ncclComm_t comm)",
		"const char* ncclGetErrorString(ncclResult_t result)",
		"ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)",
		"ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream)",
		"ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)",
		"ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)",
		"ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)",
		"ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)",
		"ncclResult_t ncclGroupStart()",
		"ncclResult_t ncclGroupEnd()",
		"ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream)",
		"ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream)",
	},
	values: map[string]int{
		"ncclSuccess": 0, "ncclInvalidArgument": 4, "ncclTimeout": 8,
		"ncclSum": 0, "ncclMax": 2, "ncclMin": 3,
		"ncclInt32": 2, "ncclFloat16": 6, "ncclFloat32": 7, "ncclFloat64": 8, "ncclBfloat16": 9,
		"NCCL_UNIQUE_ID_BYTES": 128,
	},
}

// abi reduces a prototype to its name and what the C calling convention
// sees of each parameter and the result: int (every NCCL enum is an int),
// size_t, a pointer (handles and streams are pointers), or the 128-byte
// id passed by value.
func abi(proto string) string {
	m := regexp.MustCompile(`^(.*?)\s*(\w+|"\w+")\s*\((.*)\)$`).FindStringSubmatch(strings.TrimSpace(proto))
	if m == nil {
		return "unparsed: " + proto
	}
	kind := func(t string) string {
		t = strings.TrimSpace(t)
		fields := strings.Fields(strings.ReplaceAll(t, "*", " * "))
		ptr := strings.Contains(t, "*")
		base := ""
		for _, f := range fields {
			if f != "const" && f != "*" {
				base = f
				break
			}
		}
		switch {
		case ptr || base == "ncclComm_t" || base == "tmn_comm" || base == "cudaStream_t":
			return "ptr"
		case base == "ncclUniqueId" || base == "tmn_unique_id":
			return "id"
		case base == "size_t":
			return "size_t"
		}
		return "int" // int, ncclResult_t, ncclDataType_t, ncclRedOp_t, tmn_result
	}
	var params []string
	if args := strings.TrimSpace(m[3]); args != "" && args != "void" { // "()" and "(void)": none
		for _, p := range strings.Split(args, ",") {
			params = append(params, kind(p)) // a parameter's name follows its type: kind reads the type
		}
	}
	ret := kind(m[1])
	if strings.Contains(m[1], "char") {
		ret = "string"
	}
	return ret + " " + strings.Trim(m[2], `"`) + "(" + strings.Join(params, ", ") + ")"
}

// The binding's declarations are nccl.h's, as the calling convention sees
// them, function by function, and its values are nccl.h's: what can be
// checked of the call table without NCCL or a GPU.
func TestNCCLCallTable(t *testing.T) {
	ours, idSize := ncclPrototypes()
	if len(ours) != len(ncclH.protos) {
		t.Fatalf("the binding declares %d functions, nccl.h's list has %d", len(ours), len(ncclH.protos))
	}
	for i, want := range ncclH.protos {
		if a, b := abi(ours[i]), abi(want); a != b {
			t.Errorf("%s\n  binding: %s\n  nccl.h:  %s", ours[i], a, b)
		}
	}
	for name, got := range map[string]int{
		"ncclSuccess": ncclSuccess, "ncclInvalidArgument": ncclInvalidArgument, "ncclTimeout": 8,
		"ncclSum": int(NCCLSum), "ncclMax": int(NCCLMax), "ncclMin": int(NCCLMin),
		"ncclInt32": ncclInt32, "ncclFloat16": ncclFloat16, "ncclFloat32": ncclFloat32, "ncclFloat64": ncclFloat64, "ncclBfloat16": ncclBfloat16,
		"NCCL_UNIQUE_ID_BYTES": idSize,
	} {
		if want := ncclH.values[name]; got != want {
			t.Errorf("%s: the binding says %d, nccl.h %d", name, got, want)
		}
	}
	if ncclResultNames[8] != "ncclTimeout" || NCCLUniqueIDBytes != idSize {
		t.Errorf("names or id size disagree: %q, %d vs %d", ncclResultNames[8], NCCLUniqueIDBytes, idSize)
	}
	// The checker tells a wrong declaration: a swapped or missing
	// parameter changes the ABI string.
	if abi("ncclResult_t ncclReduce(const void* s, void* r, size_t n, ncclDataType_t d, int root, ncclComm_t c, cudaStream_t st)") == abi(ncclH.protos[9]) {
		t.Error("the ABI check does not see a missing parameter")
	}
}

// NCCL_VERSION's two encodings, and a missing library named with what
// would fix it.
func TestNCCLVersionAndLoad(t *testing.T) {
	for code, want := range map[int]string{2804: "2.8.4", 21105: "2.11.5", 22105: "2.21.5", 22903: "2.29.3"} {
		if got := ncclVersionString(code); got != want {
			t.Errorf("version %d: %s, want %s", code, got, want)
		}
	}
	err := ncclOpen("/nonexistent/libnccl.so.2")
	if err == nil || !strings.Contains(err.Error(), "/nonexistent/libnccl.so.2") || !strings.Contains(err.Error(), "TRAINMEM_NCCL") {
		t.Errorf("a missing NCCL: %v", err)
	}
}

// NCCL on two GPUs (a machine's, or make test-cuda-emu's emulated pair):
// every collective trainmem calls and its point-to-point, through ncclCommInitAll and through
// ncclCommInitRank with rank 0's unique id, against values computed here;
// and NCCL's own memory measured.
func TestNCCLOnTwoGPUs(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("no CUDA device: %v", err)
	}
	var devs [2]*Device
	for i := range devs {
		d, err := New(Options{Ordinal: i})
		if err != nil {
			t.Skipf("NCCL's ranks need 2 GPUs: %v", err)
		}
		defer d.Close()
		devs[i] = d
	}
	if _, err := NCCLVersion(); err != nil {
		t.Skipf("no NCCL: %v", err)
	}
	upload := func(d *Device, dt cuda.DType, v []float32) *cuda.Buffer {
		b, err := d.Alloc(cuda.Grads, dt, len(v))
		if err == nil {
			err = d.Upload(b, v)
		}
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	download := func(d *Device, b *cuda.Buffer) []float32 {
		v := make([]float32, b.Len)
		if err := d.Download(v, b); err != nil {
			t.Fatal(err)
		}
		return v
	}
	same := func(what string, got, want []float32) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: got %v, want %v", what, got, want)
		}
	}
	// both runs f(rank) on the two ranks at once, as ranks must.
	both := func(f func(r int) error) {
		t.Helper()
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := range 2 {
			wg.Add(1)
			go func() { defer wg.Done(); errs[r] = f(r) }()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			t.Fatal(err)
		}
	}
	check := func(how string, comms []*NCCLComm) {
		for r, c := range comms {
			if c.Bytes <= 0 {
				t.Errorf("%s rank %d: NCCL's own memory not measured (%d bytes)", how, r, c.Bytes)
			}
		}
		in := [2][]float32{{1, 2, 3, 4}, {10, 20, 30, 40}}
		var bufs [2]*cuda.Buffer
		both(func(r int) error {
			bufs[r] = upload(devs[r], cuda.F32, in[r])
			return comms[r].AllReduce(bufs[r], bufs[r], NCCLSum)
		})
		for r := range 2 {
			same(fmt.Sprintf("%s all-reduce rank %d", how, r), download(devs[r], bufs[r]), []float32{11, 22, 33, 44})
		}
		var outs [2]*cuda.Buffer
		both(func(r int) error {
			bufs[r] = upload(devs[r], cuda.BF16, in[r])
			outs[r] = upload(devs[r], cuda.BF16, []float32{0, 0})
			return comms[r].ReduceScatter(bufs[r], outs[r], NCCLMax)
		})
		same(how+" reduce-scatter (max) rank 0", download(devs[0], outs[0]), []float32{10, 20})
		same(how+" reduce-scatter (max) rank 1", download(devs[1], outs[1]), []float32{30, 40})
		both(func(r int) error {
			bufs[r] = upload(devs[r], cuda.F16, []float32{float32(r + 1), float32(r + 5)})
			outs[r] = upload(devs[r], cuda.F16, []float32{0, 0, 0, 0})
			return comms[r].AllGather(bufs[r], outs[r])
		})
		same(how+" all-gather rank 1", download(devs[1], outs[1]), []float32{1, 5, 2, 6})
		both(func(r int) error {
			bufs[r] = upload(devs[r], cuda.F32, in[r])
			return comms[r].Broadcast(bufs[r], bufs[r], 1)
		})
		same(how+" broadcast from rank 1 to rank 0", download(devs[0], bufs[0]), in[1])
		both(func(r int) error {
			bufs[r] = upload(devs[r], cuda.F32, in[r])
			outs[r] = upload(devs[r], cuda.F32, []float32{0, 0, 0, 0})
			return comms[r].Reduce(bufs[r], outs[r], NCCLMin, 0)
		})
		same(how+" reduce (min) to rank 0", download(devs[0], outs[0]), in[0])
		// Point-to-point: each rank sends to the other while it receives
		// from it, in one fused group (either would wait forever alone),
		// then a lone half each way.
		both(func(r int) error {
			bufs[r] = upload(devs[r], cuda.F32, in[r])
			outs[r] = upload(devs[r], cuda.F32, []float32{0, 0, 0, 0})
			return comms[r].SendRecv(bufs[r], 1-r, outs[r], 1-r)
		})
		same(how+" send_recv rank 0", download(devs[0], outs[0]), in[1])
		same(how+" send_recv rank 1", download(devs[1], outs[1]), in[0])
		both(func(r int) error {
			if r == 0 {
				return comms[0].SendRecv(upload(devs[0], cuda.BF16, []float32{7, 8}), 1, nil, 0)
			}
			outs[1] = upload(devs[1], cuda.BF16, []float32{0, 0})
			return comms[1].SendRecv(nil, 0, outs[1], 0)
		})
		same(how+" send from rank 0 to rank 1", download(devs[1], outs[1]), []float32{7, 8})
		for _, c := range comms {
			if err := c.Destroy(); err != nil {
				t.Error(err)
			}
		}
	}
	comms, err := NCCLInitAll(devs[:])
	if err != nil {
		t.Fatal(err)
	}
	check("ncclCommInitAll", comms)
	id, err := NCCLUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	comms = make([]*NCCLComm, 2)
	both(func(r int) (err error) {
		comms[r], err = NCCLInitRank(devs[r], id, r, 2)
		return err
	})
	check("ncclCommInitRank", comms)
}
