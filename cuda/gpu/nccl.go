//go:build trainmem_cuda

package gpu

// NCCL, loaded at run time when ranks first need it: libnccl.so.2 by the
// loader's path, or the file TRAINMEM_NCCL names. NCCL is not in Debian, so
// nothing of it is linked or included: the few types and functions trainmem
// calls are declared below with the values of NCCL's published nccl.h
// (NVIDIA/nccl, src/nccl.h.in; the values are those of every NCCL 2 release
// since 2.12, checked in nccl_test.go). Communicators, streams and device
// pointers cross into C as 64-bit integers.
//
// Every collective is enqueued on the device's stream and waited for, so
// that it is done (and its errors known) when the call returns, as the
// host's collectives are.

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef int tmn_result;                                // ncclResult_t
typedef void *tmn_comm;                                // ncclComm_t
typedef struct { char internal[128]; } tmn_unique_id; // ncclUniqueId, NCCL_UNIQUE_ID_BYTES

// TMN_FN declares a function pointer type and records its prototype's
// text, which nccl_test.go checks against nccl.h's.
#define TMN_FN(ret, name, sym, args) typedef ret (*name) args; static const char *name##_proto = #ret " " sym #args;
TMN_FN(tmn_result, tmn_get_version_fn, "ncclGetVersion", (int *))
TMN_FN(tmn_result, tmn_get_unique_id_fn, "ncclGetUniqueId", (tmn_unique_id *))
TMN_FN(tmn_result, tmn_comm_init_rank_fn, "ncclCommInitRank", (tmn_comm *, int, tmn_unique_id, int))
TMN_FN(tmn_result, tmn_comm_init_all_fn, "ncclCommInitAll", (tmn_comm *, int, const int *))
TMN_FN(tmn_result, tmn_comm_destroy_fn, "ncclCommDestroy", (tmn_comm))
TMN_FN(tmn_result, tmn_comm_abort_fn, "ncclCommAbort", (tmn_comm))
TMN_FN(const char *, tmn_error_string_fn, "ncclGetErrorString", (tmn_result))
TMN_FN(tmn_result, tmn_async_error_fn, "ncclCommGetAsyncError", (tmn_comm, tmn_result *))
TMN_FN(tmn_result, tmn_broadcast_fn, "ncclBroadcast", (const void *, void *, size_t, int, int, tmn_comm, void *))
TMN_FN(tmn_result, tmn_reduce_fn, "ncclReduce", (const void *, void *, size_t, int, int, int, tmn_comm, void *))
TMN_FN(tmn_result, tmn_all_reduce_fn, "ncclAllReduce", (const void *, void *, size_t, int, int, tmn_comm, void *))
TMN_FN(tmn_result, tmn_reduce_scatter_fn, "ncclReduceScatter", (const void *, void *, size_t, int, int, tmn_comm, void *))
TMN_FN(tmn_result, tmn_all_gather_fn, "ncclAllGather", (const void *, void *, size_t, int, tmn_comm, void *))
TMN_FN(tmn_result, tmn_group_start_fn, "ncclGroupStart", (void))
TMN_FN(tmn_result, tmn_group_end_fn, "ncclGroupEnd", (void))
TMN_FN(tmn_result, tmn_send_fn, "ncclSend", (const void *, size_t, int, int, tmn_comm, void *))
TMN_FN(tmn_result, tmn_recv_fn, "ncclRecv", (void *, size_t, int, int, tmn_comm, void *))
#undef TMN_FN

// tmn_protos is every prototype, for the test.
static const char *tmn_protos(int i) {
	const char *p[] = {tmn_get_version_fn_proto, tmn_get_unique_id_fn_proto, tmn_comm_init_rank_fn_proto,
		tmn_comm_init_all_fn_proto, tmn_comm_destroy_fn_proto, tmn_comm_abort_fn_proto, tmn_error_string_fn_proto,
		tmn_async_error_fn_proto, tmn_broadcast_fn_proto, tmn_reduce_fn_proto, tmn_all_reduce_fn_proto,
		tmn_reduce_scatter_fn_proto, tmn_all_gather_fn_proto, tmn_group_start_fn_proto, tmn_group_end_fn_proto,
		tmn_send_fn_proto, tmn_recv_fn_proto};
	return i >= 0 && i < (int)(sizeof p / sizeof p[0]) ? p[i] : NULL;
}
static int tmn_unique_id_size(void) { return (int)sizeof(tmn_unique_id); }

static tmn_get_version_fn tmn_get_version_p;
static tmn_get_unique_id_fn tmn_get_unique_id_p;
static tmn_comm_init_rank_fn tmn_comm_init_rank_p;
static tmn_comm_init_all_fn tmn_comm_init_all_p;
static tmn_comm_destroy_fn tmn_comm_destroy_p;
static tmn_comm_abort_fn tmn_comm_abort_p;
static tmn_error_string_fn tmn_error_string_p;
static tmn_async_error_fn tmn_async_error_p;
static tmn_broadcast_fn tmn_broadcast_p;
static tmn_reduce_fn tmn_reduce_p;
static tmn_all_reduce_fn tmn_all_reduce_p;
static tmn_reduce_scatter_fn tmn_reduce_scatter_p;
static tmn_all_gather_fn tmn_all_gather_p;
static tmn_group_start_fn tmn_group_start_p;
static tmn_group_end_fn tmn_group_end_p;
static tmn_send_fn tmn_send_p;
static tmn_recv_fn tmn_recv_p;

// tmn_open loads name and every function; NULL on success, else why not.
static const char *tmn_open(const char *name) {
	void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		return e != NULL ? e : "dlopen failed";
	}
#define TMN_LOAD(var, type, sym) if ((var = (type)dlsym(h, sym)) == NULL) { dlclose(h); return "missing " sym; }
	TMN_LOAD(tmn_get_version_p, tmn_get_version_fn, "ncclGetVersion")
	TMN_LOAD(tmn_get_unique_id_p, tmn_get_unique_id_fn, "ncclGetUniqueId")
	TMN_LOAD(tmn_comm_init_rank_p, tmn_comm_init_rank_fn, "ncclCommInitRank")
	TMN_LOAD(tmn_comm_init_all_p, tmn_comm_init_all_fn, "ncclCommInitAll")
	TMN_LOAD(tmn_comm_destroy_p, tmn_comm_destroy_fn, "ncclCommDestroy")
	TMN_LOAD(tmn_comm_abort_p, tmn_comm_abort_fn, "ncclCommAbort")
	TMN_LOAD(tmn_error_string_p, tmn_error_string_fn, "ncclGetErrorString")
	TMN_LOAD(tmn_async_error_p, tmn_async_error_fn, "ncclCommGetAsyncError")
	TMN_LOAD(tmn_broadcast_p, tmn_broadcast_fn, "ncclBroadcast")
	TMN_LOAD(tmn_reduce_p, tmn_reduce_fn, "ncclReduce")
	TMN_LOAD(tmn_all_reduce_p, tmn_all_reduce_fn, "ncclAllReduce")
	TMN_LOAD(tmn_reduce_scatter_p, tmn_reduce_scatter_fn, "ncclReduceScatter")
	TMN_LOAD(tmn_all_gather_p, tmn_all_gather_fn, "ncclAllGather")
	TMN_LOAD(tmn_group_start_p, tmn_group_start_fn, "ncclGroupStart")
	TMN_LOAD(tmn_group_end_p, tmn_group_end_fn, "ncclGroupEnd")
	TMN_LOAD(tmn_send_p, tmn_send_fn, "ncclSend")
	TMN_LOAD(tmn_recv_p, tmn_recv_fn, "ncclRecv")
#undef TMN_LOAD
	return NULL;
}

static tmn_result tmn_get_version(int *v) { return tmn_get_version_p(v); }
static tmn_result tmn_get_unique_id(void *id) { return tmn_get_unique_id_p((tmn_unique_id *)id); }
static tmn_result tmn_comm_init_rank(unsigned long long *comm, int n, const void *id, int rank) {
	tmn_unique_id u;
	memcpy(&u, id, sizeof u);
	tmn_comm c = NULL;
	tmn_result r = tmn_comm_init_rank_p(&c, n, u, rank);
	*comm = (unsigned long long)c;
	return r;
}
static tmn_result tmn_comm_init_all(unsigned long long *comms, int n, const int *devs) {
	tmn_comm c[64];
	if (n > 64) return 4; // ncclInvalidArgument
	tmn_result r = tmn_comm_init_all_p(c, n, devs);
	for (int i = 0; i < n; i++) comms[i] = (unsigned long long)c[i];
	return r;
}
static tmn_result tmn_comm_destroy(unsigned long long c) { return tmn_comm_destroy_p((tmn_comm)c); }
static tmn_result tmn_comm_abort(unsigned long long c) { return tmn_comm_abort_p((tmn_comm)c); }
static const char *tmn_error_string(tmn_result r) { return tmn_error_string_p(r); }
static tmn_result tmn_async_error(unsigned long long c, tmn_result *r) { return tmn_async_error_p((tmn_comm)c, r); }
static tmn_result tmn_broadcast(unsigned long long s, unsigned long long r, size_t n, int dt, int root, unsigned long long c, unsigned long long st) {
	return tmn_broadcast_p((const void *)s, (void *)r, n, dt, root, (tmn_comm)c, (void *)st);
}
static tmn_result tmn_reduce(unsigned long long s, unsigned long long r, size_t n, int dt, int op, int root, unsigned long long c, unsigned long long st) {
	return tmn_reduce_p((const void *)s, (void *)r, n, dt, op, root, (tmn_comm)c, (void *)st);
}
static tmn_result tmn_all_reduce(unsigned long long s, unsigned long long r, size_t n, int dt, int op, unsigned long long c, unsigned long long st) {
	return tmn_all_reduce_p((const void *)s, (void *)r, n, dt, op, (tmn_comm)c, (void *)st);
}
static tmn_result tmn_reduce_scatter(unsigned long long s, unsigned long long r, size_t n, int dt, int op, unsigned long long c, unsigned long long st) {
	return tmn_reduce_scatter_p((const void *)s, (void *)r, n, dt, op, (tmn_comm)c, (void *)st);
}
static tmn_result tmn_all_gather(unsigned long long s, unsigned long long r, size_t n, int dt, unsigned long long c, unsigned long long st) {
	return tmn_all_gather_p((const void *)s, (void *)r, n, dt, (tmn_comm)c, (void *)st);
}
// tmn_send_recv is one group of a send (when has_send) and a receive (when
// has_recv), in one call so that the group is one thread's, as NCCL's
// group state is; *which says the call that failed (0 the group's start,
// 1 the send, 2 the receive, 3 the group's end).
static tmn_result tmn_send_recv(int has_send, unsigned long long s, size_t sn, int sdt, int to,
		int has_recv, unsigned long long r, size_t rn, int rdt, int from, unsigned long long c, unsigned long long st, int *which) {
	tmn_result e = tmn_group_start_p();
	if (e != 0) { *which = 0; return e; }
	if (has_send && (e = tmn_send_p((const void *)s, sn, sdt, to, (tmn_comm)c, (void *)st)) != 0) {
		*which = 1;
		tmn_group_end_p();
		return e;
	}
	if (has_recv && (e = tmn_recv_p((void *)r, rn, rdt, from, (tmn_comm)c, (void *)st)) != 0) {
		*which = 2;
		tmn_group_end_p();
		return e;
	}
	*which = 3;
	return tmn_group_end_p();
}
*/
import "C"

import (
	"fmt"
	"os"
	"sync"
	"unsafe"

	"gorgonia.org/cu"

	"trainmem/cuda"
)

// NCCL's values (nccl.h): ncclResult_t, ncclRedOp_t and ncclDataType_t.
const (
	ncclSuccess         = 0
	ncclInvalidArgument = 4

	ncclSum = 0
	ncclMax = 2
	ncclMin = 3

	ncclInt32    = 2
	ncclFloat16  = 6
	ncclFloat32  = 7
	ncclFloat64  = 8
	ncclBfloat16 = 9

	// NCCLUniqueIDBytes is the size of the id every rank of a communicator
	// must be given (NCCL_UNIQUE_ID_BYTES).
	NCCLUniqueIDBytes = 128
	// maxInitAll bounds ncclCommInitAll's GPUs (tmn_comm_init_all's array).
	maxInitAll = 64
)

var ncclResultNames = map[int]string{
	1: "ncclUnhandledCudaError", 2: "ncclSystemError", 3: "ncclInternalError", 4: "ncclInvalidArgument",
	5: "ncclInvalidUsage", 6: "ncclRemoteError", 7: "ncclInProgress", 8: "ncclTimeout",
}

// ncclLib is the NCCL this process uses, loaded once.
var ncclLib struct {
	sync.Mutex
	loaded  bool
	name    string
	version int
	err     error
}

// ncclLoad loads NCCL: TRAINMEM_NCCL's file, else libnccl.so.2.
func ncclLoad() error {
	ncclLib.Lock()
	defer ncclLib.Unlock()
	if ncclLib.loaded || ncclLib.err != nil {
		return ncclLib.err
	}
	name := os.Getenv("TRAINMEM_NCCL")
	if name == "" {
		name = "libnccl.so.2"
	}
	if err := ncclOpen(name); err != nil {
		ncclLib.err = err
		return err
	}
	var v C.int
	if err := ncclErr("ncclGetVersion", C.tmn_get_version(&v)); err != nil {
		ncclLib.err = err
		return err
	}
	ncclLib.loaded, ncclLib.name, ncclLib.version = true, name, int(v)
	return nil
}

// ncclOpen loads the library name and every function trainmem calls.
func ncclOpen(name string) error {
	cn := C.CString(name)
	e := C.tmn_open(cn)
	C.free(unsafe.Pointer(cn))
	if e != nil {
		return fmt.Errorf("cuda: no NCCL (%s: %s); install NCCL 2 (libnccl2, or the nvidia-nccl wheel) or set TRAINMEM_NCCL to libnccl.so.2's path", name, C.GoString(e))
	}
	return nil
}

// ncclPrototypes are the prototypes the binding declares, as written in
// its C, and the size of its ncclUniqueId.
func ncclPrototypes() ([]string, int) {
	var out []string
	for i := 0; ; i++ {
		p := C.tmn_protos(C.int(i))
		if p == nil {
			return out, int(C.tmn_unique_id_size())
		}
		out = append(out, C.GoString(p))
	}
}

// NCCLVersion is the loaded NCCL's version, e.g. "NCCL 2.21.5".
func NCCLVersion() (string, error) {
	if err := ncclLoad(); err != nil {
		return "", err
	}
	return "NCCL " + ncclVersionString(ncclLib.version), nil
}

// ncclVersionString decodes NCCL_VERSION_CODE: X·1000 + Y·100 + Z up to
// 2.8, X·10000 + Y·100 + Z after (nccl.h's NCCL_VERSION).
func ncclVersionString(v int) string {
	if v < 10000 {
		return fmt.Sprintf("%d.%d.%d", v/1000, v/100%10, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/10000, v/100%100, v%100)
}

func ncclErr(call string, r C.int) error {
	if r == ncclSuccess {
		return nil
	}
	name := ncclResultNames[int(r)]
	if name == "" {
		name = "unknown ncclResult_t"
	}
	msg := ""
	if ncclLib.loaded || call == "ncclGetVersion" {
		if s := C.tmn_error_string(r); s != nil {
			msg = ": " + C.GoString(s)
		}
	}
	return fmt.Errorf("cuda: %s: %s (%d)%s", call, name, int(r), msg)
}

// NCCLUniqueID makes the id of a new communicator (ncclGetUniqueId), for
// rank 0 to send to every other rank.
func NCCLUniqueID() ([NCCLUniqueIDBytes]byte, error) {
	var id [NCCLUniqueIDBytes]byte
	if err := ncclLoad(); err != nil {
		return id, err
	}
	return id, ncclErr("ncclGetUniqueId", C.tmn_get_unique_id(unsafe.Pointer(&id[0])))
}

// NCCLComm is one rank's NCCL communicator, on its device. Its
// collectives are NCCL's, on the device's stream; each returns when it is
// done.
type NCCLComm struct {
	h          C.ulonglong
	d          *Device
	rank, size int
	// Bytes is the device memory NCCL took for this communicator (its
	// buffers and channels, outside the allocator), measured with
	// cuMemGetInfo around its creation.
	Bytes int64
}

// NCCLInitRank joins the communicator of size ranks that id names as
// rank, on d (ncclCommInitRank: every rank calls it with the same id).
func NCCLInitRank(d *Device, id [NCCLUniqueIDBytes]byte, rank, size int) (*NCCLComm, error) {
	if err := ncclLoad(); err != nil {
		return nil, err
	}
	if err := d.enter("ncclCommInitRank"); err != nil {
		return nil, err
	}
	defer d.leave()
	free, _, _ := cu.MemInfo()
	c := &NCCLComm{d: d, rank: rank, size: size}
	if err := ncclErr("ncclCommInitRank", C.tmn_comm_init_rank(&c.h, C.int(size), unsafe.Pointer(&id[0]), C.int(rank))); err != nil {
		return nil, err
	}
	if after, _, err := cu.MemInfo(); err == nil {
		c.Bytes = max(free-after, 0)
	}
	return c, nil
}

// NCCLInitAll makes the communicators of one process driving every device
// of devs, rank i on devs[i] (ncclCommInitAll).
func NCCLInitAll(devs []*Device) ([]*NCCLComm, error) {
	if err := ncclLoad(); err != nil {
		return nil, err
	}
	n := len(devs)
	if n < 1 || n > maxInitAll {
		return nil, fmt.Errorf("cuda: ncclCommInitAll of %d GPUs (valid: 1 to %d)", n, maxInitAll)
	}
	ords := make([]C.int, n)
	seen := map[int]bool{}
	for i, d := range devs {
		o := d.card.ordinal
		if seen[o] {
			return nil, fmt.Errorf("cuda: ranks %d and another both on GPU %d: one process drives each GPU once", i, o)
		}
		seen[o] = true
		ords[i] = C.int(o)
	}
	d := devs[0]
	if err := d.enter("ncclCommInitAll"); err != nil {
		return nil, err
	}
	defer d.leave()
	free := make([]int64, n)
	for i, dv := range devs {
		free[i], _ = dv.freeMemory()
	}
	hs := make([]C.ulonglong, n)
	if err := ncclErr("ncclCommInitAll", C.tmn_comm_init_all(&hs[0], C.int(n), &ords[0])); err != nil {
		return nil, err
	}
	comms := make([]*NCCLComm, n)
	for i, dv := range devs {
		comms[i] = &NCCLComm{h: hs[i], d: dv, rank: i, size: n}
		if after, err := dv.freeMemory(); err == nil {
			comms[i].Bytes = max(free[i]-after, 0)
		}
	}
	return comms, nil
}

// freeMemory is the device's free memory (cuMemGetInfo in its context).
func (d *Device) freeMemory() (int64, error) {
	if err := cu.SetCurrentContext(d.card.ctx); err != nil {
		return 0, cuErr("cuCtxSetCurrent", err)
	}
	free, _, err := cu.MemInfo()
	return free, cuErr("cuMemGetInfo", err)
}

// NCCLOp is a reduction: NCCLSum, NCCLMin or NCCLMax.
type NCCLOp int

const (
	NCCLSum NCCLOp = ncclSum
	NCCLMin NCCLOp = ncclMin
	NCCLMax NCCLOp = ncclMax
)

// ncclType is dt's ncclDataType_t.
func ncclType(dt cuda.DType) (C.int, error) {
	switch dt {
	case cuda.F32:
		return ncclFloat32, nil
	case cuda.F16:
		return ncclFloat16, nil
	case cuda.BF16:
		return ncclBfloat16, nil
	case cuda.F64:
		return ncclFloat64, nil
	case cuda.I32:
		return ncclInt32, nil
	}
	return 0, fmt.Errorf("cuda: NCCL has no type for %s", dt)
}

// collective checks a collective's buffers (device memory; their dtype
// and lengths are zero's checks), enters the device, runs call with their addresses, the element type and
// the stream, and waits for the stream.
func (c *NCCLComm) collective(name string, send, recv *cuda.Buffer, call func(s, r C.ulonglong, dt C.int, st C.ulonglong) C.int) error {
	var dtype cuda.DType
	var addrs [2]C.ulonglong
	for i, b := range []*cuda.Buffer{send, recv} {
		if b != nil {
			dtype, addrs[i] = b.DType, C.ulonglong(b.Addr())
		}
	}
	dt, err := ncclType(dtype)
	if err := c.d.begin(name, err, send, recv); err != nil {
		return err
	}
	defer c.d.leave()
	if err := ncclErr(name, call(addrs[0], addrs[1], dt, C.ulonglong(uintptr(unsafe.Pointer(c.d.stream.C()))))); err != nil {
		return err
	}
	return c.wait(name)
}

// wait waits for the stream after call name: its own error, or NCCL's
// asynchronous one when the communicator has one.
func (c *NCCLComm) wait(name string) error {
	if err := c.d.stream.Synchronize(); err != nil {
		var async C.int
		if C.tmn_async_error(c.h, &async) == ncclSuccess && async != ncclSuccess {
			return ncclErr(name+" (asynchronous)", async)
		}
		return cuErr("cuStreamSynchronize after "+name, err)
	}
	return nil
}

// Broadcast is ncclBroadcast of root's send into every rank's recv.
func (c *NCCLComm) Broadcast(send, recv *cuda.Buffer, root int) error {
	return c.collective("ncclBroadcast", send, recv, func(s, r C.ulonglong, dt C.int, st C.ulonglong) C.int {
		return C.tmn_broadcast(s, r, C.size_t(recv.Len), dt, C.int(root), c.h, st)
	})
}

// Reduce is ncclReduce of every rank's send into root's recv.
func (c *NCCLComm) Reduce(send, recv *cuda.Buffer, op NCCLOp, root int) error {
	return c.collective("ncclReduce", send, recv, func(s, r C.ulonglong, dt C.int, st C.ulonglong) C.int {
		return C.tmn_reduce(s, r, C.size_t(send.Len), dt, C.int(op), C.int(root), c.h, st)
	})
}

// AllReduce is ncclAllReduce.
func (c *NCCLComm) AllReduce(send, recv *cuda.Buffer, op NCCLOp) error {
	return c.collective("ncclAllReduce", send, recv, func(s, r C.ulonglong, dt C.int, st C.ulonglong) C.int {
		return C.tmn_all_reduce(s, r, C.size_t(send.Len), dt, C.int(op), c.h, st)
	})
}

// ReduceScatter is ncclReduceScatter: recv holds recv.Len elements, send
// size·recv.Len.
func (c *NCCLComm) ReduceScatter(send, recv *cuda.Buffer, op NCCLOp) error {
	return c.collective("ncclReduceScatter", send, recv, func(s, r C.ulonglong, dt C.int, st C.ulonglong) C.int {
		return C.tmn_reduce_scatter(s, r, C.size_t(recv.Len), dt, C.int(op), c.h, st)
	})
}

// AllGather is ncclAllGather: send holds send.Len elements, recv
// size·send.Len.
func (c *NCCLComm) AllGather(send, recv *cuda.Buffer) error {
	return c.collective("ncclAllGather", send, recv, func(s, r C.ulonglong, dt C.int, st C.ulonglong) C.int {
		return C.tmn_all_gather(s, r, C.size_t(send.Len), dt, c.h, st)
	})
}

// SendRecv is ncclSend of send to rank to and ncclRecv of recv from rank
// from (nil: that half is not made), fused in one ncclGroupStart/
// ncclGroupEnd so that two ranks sending to each other progress; the
// stream is waited for. The peers must make the matching halves, of the
// same count and type (zero checks that before it calls: NCCL would hang).
func (c *NCCLComm) SendRecv(send *cuda.Buffer, to int, recv *cuda.Buffer, from int) error {
	const name = "ncclSend/ncclRecv"
	var sdt, rdt C.int
	var err error
	var hasSend, hasRecv C.int
	var saddr, raddr C.ulonglong
	var sn, rn C.size_t
	if send != nil {
		hasSend, saddr, sn = 1, C.ulonglong(send.Addr()), C.size_t(send.Len)
		sdt, err = ncclType(send.DType)
	}
	if recv != nil && err == nil {
		hasRecv, raddr, rn = 1, C.ulonglong(recv.Addr()), C.size_t(recv.Len)
		rdt, err = ncclType(recv.DType)
	}
	if err := c.d.begin(name, err, send, recv); err != nil {
		return err
	}
	defer c.d.leave()
	var which C.int
	r := C.tmn_send_recv(hasSend, saddr, sn, sdt, C.int(to), hasRecv, raddr, rn, rdt, C.int(from), c.h, C.ulonglong(uintptr(unsafe.Pointer(c.d.stream.C()))), &which)
	if err := ncclErr([4]string{"ncclGroupStart", "ncclSend", "ncclRecv", "ncclGroupEnd"}[min(max(int(which), 0), 3)], r); err != nil {
		return err
	}
	return c.wait(name)
}

// Destroy frees the communicator (ncclCommDestroy); Abort ends it with
// work still in flight (ncclCommAbort), as after another rank failed.
func (c *NCCLComm) Destroy() error {
	if err := c.d.enter("ncclCommDestroy"); err != nil {
		return err
	}
	defer c.d.leave()
	return ncclErr("ncclCommDestroy", C.tmn_comm_destroy(c.h))
}

func (c *NCCLComm) Abort() error {
	if err := c.d.enter("ncclCommAbort"); err != nil {
		return err
	}
	defer c.d.leave()
	return ncclErr("ncclCommAbort", C.tmn_comm_abort(c.h))
}
