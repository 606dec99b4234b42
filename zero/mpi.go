//go:build trainmem_mpi

package zero

// The MPI link: every message is MPI point-to-point on MPI_COMM_WORLD
// (MPI_Isend and MPI_Irecv of bytes), polled with MPI_Test so that every
// wait has the link's timeout and names the rank it waited for. The ring
// of ring.go runs over it as over TCP: the same bytes, the same staging,
// the same order of reductions as in one process. MPI is initialised with
// MPI_THREAD_SERIALIZED, and every call is made under one lock; the
// process's main goroutine stays on the main thread (init below), which
// opens and closes MPI.

/*
#cgo pkg-config: ompi-c
#include <mpi.h>
#include <stdlib.h>

static int tm_init(int *provided) {
	int err = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, provided);
	if (err == MPI_SUCCESS) {
		MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	}
	return err;
}
static int tm_rank(int *rank) { return MPI_Comm_rank(MPI_COMM_WORLD, rank); }
static int tm_size(int *size) { return MPI_Comm_size(MPI_COMM_WORLD, size); }
static int tm_isend(void *buf, int count, int to, MPI_Request *req) {
	return MPI_Isend(buf, count, MPI_BYTE, to, 0, MPI_COMM_WORLD, req);
}
static int tm_irecv(void *buf, int count, int from, MPI_Request *req) {
	return MPI_Irecv(buf, count, MPI_BYTE, from, 0, MPI_COMM_WORLD, req);
}
// tm_test tests one request: *done is 1 once it completed, and *count is
// the bytes a receive got.
static int tm_test(MPI_Request *req, int *done, int *count) {
	MPI_Status st;
	int err = MPI_Test(req, done, &st);
	if (err == MPI_SUCCESS && *done && count != NULL) {
		err = MPI_Get_count(&st, MPI_BYTE, count);
	}
	return err;
}
static int tm_cancel(MPI_Request *req) {
	if (*req == MPI_REQUEST_NULL) return MPI_SUCCESS;
	MPI_Cancel(req);
	return MPI_Request_free(req);
}
static void tm_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }
static int tm_finalize(void) { return MPI_Finalize(); }
static void tm_error_string(int code, char *buf) {
	int n = 0;
	MPI_Error_string(code, buf, &n);
	buf[n < MPI_MAX_ERROR_STRING ? n : MPI_MAX_ERROR_STRING - 1] = 0;
}
static int tm_max_error_string(void) { return MPI_MAX_ERROR_STRING; }
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
	"unsafe"
)

// The main goroutine stays on the main thread, which MPI_Init_thread and
// MPI_Finalize must both run on.
func init() { runtime.LockOSThread() }

// HaveMPI says whether this build has the MPI link.
const HaveMPI = true

// mpiChunk is the most bytes one MPI message carries (MPI counts are C
// ints): longer messages travel as several, cut alike on both sides.
const mpiChunk = 1 << 30

// MPILink is a Link over MPI.
type MPILink struct {
	rank, size int
	timeout    time.Duration
	mu         sync.Mutex // every MPI call
	done       bool
}

var mpiOnce struct {
	sync.Mutex
	opened bool
}

// OpenMPI initialises MPI (once a process, from its main goroutine) and
// returns the link of MPI_COMM_WORLD: rank and size are MPI's. Every wait
// for another rank fails after timeout (DefaultTimeout when 0), naming it.
func OpenMPI(timeout time.Duration) (*MPILink, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	mpiOnce.Lock()
	defer mpiOnce.Unlock()
	if mpiOnce.opened {
		return nil, fmt.Errorf("zero: MPI is opened once a process")
	}
	var provided C.int
	if err := mpiError("MPI_Init_thread", C.tm_init(&provided)); err != nil {
		return nil, err
	}
	mpiOnce.opened = true
	if provided < C.MPI_THREAD_SERIALIZED {
		C.tm_finalize()
		return nil, fmt.Errorf("zero: this MPI gives thread level %d, and trainmem needs MPI_THREAD_SERIALIZED (%d)", int(provided), int(C.MPI_THREAD_SERIALIZED))
	}
	var rank, size C.int
	if err := mpiError("MPI_Comm_rank", C.tm_rank(&rank)); err != nil {
		return nil, err
	}
	if err := mpiError("MPI_Comm_size", C.tm_size(&size)); err != nil {
		return nil, err
	}
	return &MPILink{rank: int(rank), size: int(size), timeout: timeout}, nil
}

func mpiError(what string, code C.int) error {
	if code == C.MPI_SUCCESS {
		return nil
	}
	buf := (*C.char)(C.malloc(C.size_t(C.tm_max_error_string())))
	defer C.free(unsafe.Pointer(buf))
	C.tm_error_string(code, buf)
	return fmt.Errorf("zero: %s: %s (MPI error %d)", what, C.GoString(buf), int(code))
}

func (l *MPILink) Rank() int    { return l.rank }
func (l *MPILink) Size() int    { return l.size }
func (l *MPILink) Name() string { return MPI.String() }

// op is one posted message: a chunk sent or received, its request, the
// chunk's length and the peer.
type op struct {
	req  C.MPI_Request
	n    int
	peer int
	recv bool
}

// post posts b to or from peer as chunks of at most mpiChunk bytes.
func (l *MPILink) post(ops []op, pin *runtime.Pinner, peer int, b []byte, recv bool) ([]op, error) {
	for lo := 0; lo < len(b) || lo == 0; lo += mpiChunk {
		n := min(mpiChunk, len(b)-lo)
		var p unsafe.Pointer
		if n > 0 {
			pin.Pin(&b[lo])
			p = unsafe.Pointer(&b[lo])
		}
		ops = append(ops, op{n: n, peer: peer, recv: recv})
		o := &ops[len(ops)-1]
		var code C.int
		l.mu.Lock()
		if recv {
			code = C.tm_irecv(p, C.int(n), C.int(peer), &o.req)
		} else {
			code = C.tm_isend(p, C.int(n), C.int(peer), &o.req)
		}
		err := mpiError(map[bool]string{true: "MPI_Irecv", false: "MPI_Isend"}[recv], code)
		l.mu.Unlock()
		if err != nil {
			return ops[:len(ops)-1], err
		}
		if len(b) == 0 {
			break
		}
	}
	return ops, nil
}

// wait polls ops until all are done, or the timeout: then it names the
// rank waited for.
func (l *MPILink) wait(ops []op) error {
	deadline := time.Now().Add(l.timeout)
	pause := 10 * time.Microsecond
	left := len(ops)
	finished := make([]bool, len(ops))
	for left > 0 {
		l.mu.Lock()
		for i := range ops {
			if finished[i] {
				continue
			}
			var done, count C.int
			cnt := (*C.int)(nil)
			if ops[i].recv {
				cnt = &count
			}
			if err := mpiError("MPI_Test", C.tm_test(&ops[i].req, &done, cnt)); err != nil {
				l.mu.Unlock()
				return err
			}
			if done != 0 {
				finished[i] = true
				left--
				if ops[i].recv && int(count) != ops[i].n {
					l.mu.Unlock()
					return fmt.Errorf("zero: rank %d sent %d bytes where rank %d expected %d (the ranks' schedules differ)", ops[i].peer, int(count), l.rank, ops[i].n)
				}
			}
		}
		l.mu.Unlock()
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			l.mu.Lock()
			for i := range ops {
				if !finished[i] {
					C.tm_cancel(&ops[i].req)
				}
			}
			l.mu.Unlock()
			for i := range ops {
				if !finished[i] {
					return fmt.Errorf("zero: rank %d waited %v for rank %d, which did not answer (is it stuck? --timeout sets the wait)", l.rank, l.timeout, ops[i].peer)
				}
			}
		}
		time.Sleep(pause)
		pause = min(2*pause, time.Millisecond)
	}
	return nil
}

func (l *MPILink) check(peer int) error {
	l.mu.Lock()
	done := l.done
	l.mu.Unlock()
	if done {
		return fmt.Errorf("zero: the MPI link of rank %d is closed", l.rank)
	}
	if peer < 0 || peer >= l.size || peer == l.rank {
		return fmt.Errorf("zero: rank %d: no rank %d to talk to (valid: 0 to %d but itself)", l.rank, peer, l.size-1)
	}
	return nil
}

// Send implements Link.
func (l *MPILink) Send(to int, b []byte) error { return l.Exchange(to, b, -1, nil) }

// Recv implements Link.
func (l *MPILink) Recv(from int, b []byte) error { return l.Exchange(-1, nil, from, b) }

// Exchange implements Link.
func (l *MPILink) Exchange(to int, out []byte, from int, in []byte) error {
	var pin runtime.Pinner
	defer pin.Unpin()
	var ops []op
	var err error
	if out != nil {
		if err = l.check(to); err == nil {
			ops, err = l.post(ops, &pin, to, out, false)
		}
	}
	if in != nil && err == nil {
		if err = l.check(from); err == nil {
			ops, err = l.post(ops, &pin, from, in, true)
		}
	}
	if werr := l.wait(ops); err == nil {
		err = werr
	}
	if err != nil && len(ops) > 0 {
		// MPI may still read or write a buffer of a request that did not
		// complete, which the caller is about to get back: the rank cannot
		// go on. Its error is printed and the job ended (mpirun ends every
		// rank, naming this one).
		l.Abort(err)
	}
	return err
}

// Abort implements Link: it writes err to stderr, since it does not
// return, and calls MPI_Abort, after which the launcher (mpirun) ends every
// rank, saying which rank aborted.
func (l *MPILink) Abort(err error) {
	fmt.Fprintf(os.Stderr, "trainmem: rank %d: %v\n", l.rank, err)
	l.mu.Lock()
	if !l.done { // after MPI_Finalize, MPI_Abort is not allowed
		C.tm_abort(1)
	}
	os.Exit(1) // MPI_Abort should not return
}

// Close implements Link: MPI_Finalize, from the main goroutine.
func (l *MPILink) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return nil
	}
	l.done = true
	return mpiError("MPI_Finalize", C.tm_finalize())
}
