// The emulated GPU's NCCL: the calls trainmem makes (cuda/gpu/nccl.go),
// with nccl.h's prototypes and values, for ranks in one process: a clique
// of ncclCommInitAll, or ranks joining with ncclCommInitRank from threads
// of one process (a second process's ranks cannot be reached: its
// ncclCommInitRank times out with ncclSystemError, saying so). Each
// communicator takes 2 MiB of its GPU's memory, as NCCL's buffers do, so
// that trainmem's measure of them has something to measure.
//
// A collective's ranks meet at the clique's barrier; the last to arrive
// checks that every rank made the same call (ncclInvalidUsage otherwise,
// where NCCL would hang) and that every buffer lies inside one allocation
// of the emulated device (ncclInvalidArgument), then runs the call for all
// ranks: reductions in fp32 (fp64 for doubles; int32 sums wrap) over the
// ranks in order, rounding to the storage type after each, as a chain of
// NCCL's kernels would; results are computed before any is written, so
// in-place calls read their inputs whole.

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

extern "C" int tmemu_device_range(unsigned long long p, unsigned long long n); // fakecuda.cpp

#define API extern "C" __attribute__((visibility("default")))

// nccl.h's values.
enum { ok = 0, systemError = 2, internalError = 3, invalidArgument = 4, invalidUsage = 5 };
enum { opSum = 0, opProd = 1, opMax = 2, opMin = 3 };
enum { tInt32 = 2, tFloat16 = 6, tFloat32 = 7, tFloat64 = 8, tBfloat16 = 9 };
enum kind_t { BROADCAST, REDUCE, ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER };
static const char *kind_names[] = {"ncclBroadcast", "ncclReduce", "ncclAllReduce", "ncclReduceScatter", "ncclAllGather"};

typedef struct { char internal[128]; } ncclUniqueId;

static void nccl_log(const char *call, const std::string &why) {
	fprintf(stderr, "trainmem emulated NCCL: %s: %s\n", call, why.c_str());
}

struct post {
	kind_t kind;
	const void *send;
	void *recv;
	size_t count; // the call's count argument
	int dt, op, root;
};

struct clique;
struct ncclComm {
	clique *c;
	int rank;
	CUdeviceptr buffers;
	int device;
};

// p2p is a send offered to its receiver (ncclSend within a group): its
// buffer, until the receiver has copied it or found it wrong.
struct clique;
struct p2p {
	const void *buf;
	size_t count;
	int dt;
	clique *c;
	bool done = false;
	int verdict = ok;
};

struct clique {
	int n;
	std::vector<ncclComm> comms;
	std::vector<post> posts;
	int joined = 0, arrived = 0, alive = 0;
	unsigned long long gen = 0;
	int verdict = ok;
	std::map<std::pair<int, int>, std::vector<p2p *>> offers; // (from, to) → the sends in flight, in order
	std::mutex mu;
	std::condition_variable cv;
};

static std::mutex cliques_mu;
static std::map<std::string, clique *> by_id; // ncclCommInitRank's cliques, by id
static unsigned long long next_id;

static int type_size(int dt) {
	switch (dt) {
	case tInt32: case tFloat32: return 4;
	case tFloat16: case tBfloat16: return 2;
	case tFloat64: return 8;
	}
	return 0;
}

static double load(const void *p, int dt, size_t i) {
	switch (dt) {
	case tInt32: return (double)((const int32_t *)p)[i];
	case tFloat16: return (double)__half2float(((const __half *)p)[i]);
	case tBfloat16: return (double)__bfloat162float(((const __nv_bfloat16 *)p)[i]);
	case tFloat64: return ((const double *)p)[i];
	}
	return (double)((const float *)p)[i];
}

// rounded is v as dt stores it.
static double rounded(double v, int dt) {
	switch (dt) {
	case tInt32: return (double)(int32_t)(uint32_t)(int64_t)v;
	case tFloat16: return (double)__half2float(__float2half_rn((float)v));
	case tBfloat16: return (double)__bfloat162float(__float2bfloat16_rn((float)v));
	case tFloat64: return v;
	}
	return (double)(float)v;
}

static void store(void *p, int dt, size_t i, double v) {
	switch (dt) {
	case tInt32: ((int32_t *)p)[i] = (int32_t)(uint32_t)(int64_t)v; return;
	case tFloat16: ((__half *)p)[i] = __float2half_rn((float)v); return;
	case tBfloat16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); return;
	case tFloat64: ((double *)p)[i] = v; return;
	}
	((float *)p)[i] = (float)v;
}

// combine is one hop of a reduction, in the type's arithmetic.
static double combine(double a, double b, int op, int dt) {
	double v;
	switch (op) {
	case opMax: v = b > a ? b : a; break;
	case opMin: v = b < a ? b : a; break;
	case opProd: v = dt == tFloat64 ? a * b : (double)((float)a * (float)b); break;
	default: v = dt == tFloat64 ? a + b : dt == tInt32 ? a + b : (double)((float)a + (float)b);
	}
	return rounded(v, dt);
}

// lengths are the elements a rank's send and recv hold in a call over n.
static void lengths(const post &p, int n, size_t *send, size_t *recv) {
	*send = *recv = p.count;
	if (p.kind == REDUCE_SCATTER) *send = p.count * n;
	if (p.kind == ALL_GATHER) *recv = p.count * n;
}

// run does the clique's call for every rank; the caller holds c->mu.
static int run(clique *c) {
	const int n = c->n;
	const post &p0 = c->posts[0];
	for (int r = 0; r < n; r++) {
		const post &p = c->posts[r];
		if (p.kind != p0.kind || p.count != p0.count || p.dt != p0.dt || p.op != p0.op || p.root != p0.root) {
			nccl_log(kind_names[p.kind], "rank " + std::to_string(r) + "'s call differs from rank 0's (" + kind_names[p0.kind] + "): NCCL would hang");
			return invalidUsage;
		}
	}
	const int sz = type_size(p0.dt);
	if (sz == 0) {
		nccl_log(kind_names[p0.kind], "unknown ncclDataType_t " + std::to_string(p0.dt));
		return invalidArgument;
	}
	if ((p0.kind == BROADCAST || p0.kind == REDUCE) && (p0.root < 0 || p0.root >= n)) {
		nccl_log(kind_names[p0.kind], "root " + std::to_string(p0.root) + " out of range");
		return invalidArgument;
	}
	for (int r = 0; r < n; r++) {
		const post &p = c->posts[r];
		size_t sl, rl;
		lengths(p, n, &sl, &rl);
		bool need_send = p.kind != BROADCAST || r == p.root, need_recv = p.kind != REDUCE || r == p.root;
		if ((need_send && sl > 0 && !tmemu_device_range((uintptr_t)p.send, sl * sz)) ||
		    (need_recv && rl > 0 && !tmemu_device_range((uintptr_t)p.recv, rl * sz))) {
			nccl_log(kind_names[p.kind], "rank " + std::to_string(r) + "'s buffer is not inside one allocation of the emulated GPU");
			return invalidArgument;
		}
	}
	size_t sl, rl;
	lengths(p0, n, &sl, &rl);
	std::vector<std::vector<double>> out(n); // every rank's result, before any is written
	auto reduced = [&](size_t i) { // element i of the ranks' sends, reduced in rank order
		double acc = load(c->posts[0].send, p0.dt, i);
		for (int r = 1; r < n; r++) acc = combine(acc, load(c->posts[r].send, p0.dt, i), p0.op, p0.dt);
		return acc;
	};
	for (int r = 0; r < n; r++) {
		switch (p0.kind) {
		case BROADCAST:
			for (size_t i = 0; i < rl; i++) out[r].push_back(load(c->posts[p0.root].send, p0.dt, i));
			break;
		case REDUCE:
			if (r == p0.root)
				for (size_t i = 0; i < rl; i++) out[r].push_back(reduced(i));
			break;
		case ALL_REDUCE:
			for (size_t i = 0; i < rl; i++) out[r].push_back(reduced(i));
			break;
		case REDUCE_SCATTER:
			for (size_t i = 0; i < rl; i++) out[r].push_back(reduced(r * p0.count + i));
			break;
		case ALL_GATHER:
			for (int q = 0; q < n; q++)
				for (size_t i = 0; i < p0.count; i++) out[r].push_back(load(c->posts[q].send, p0.dt, i));
			break;
		}
	}
	for (int r = 0; r < n; r++)
		for (size_t i = 0; i < out[r].size(); i++) store(c->posts[r].recv, p0.dt, i, out[r][i]);
	return ok;
}

// collective posts rank's call and waits for the clique's.
static int collective(ncclComm *comm, post p) {
	if (comm == nullptr || comm->c == nullptr) {
		nccl_log(kind_names[p.kind], "no communicator");
		return invalidArgument;
	}
	clique *c = comm->c;
	std::unique_lock<std::mutex> l(c->mu);
	c->posts[comm->rank] = p;
	unsigned long long gen = c->gen;
	if (++c->arrived == c->n) {
		c->verdict = run(c);
		c->arrived = 0;
		c->gen++;
		c->cv.notify_all();
		return c->verdict;
	}
	c->cv.wait(l, [&] { return c->gen != gen; });
	return c->verdict;
}

// take_buffers gives the communicator its 2 MiB on its GPU.
static int take_buffers(ncclComm *comm, int device) {
	CUcontext prev = nullptr, ctx = nullptr;
	cuCtxGetCurrent(&prev);
	if (cuDevicePrimaryCtxRetain(&ctx, device) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) return invalidArgument;
	comm->device = device;
	CUresult r = cuMemAlloc(&comm->buffers, 2 << 20);
	cuCtxSetCurrent(prev);
	return r == CUDA_SUCCESS ? ok : systemError;
}

API int ncclGetVersion(int *v) {
	if (!v) return invalidArgument;
	*v = 22903; // 2.29.3
	return ok;
}

API int ncclGetUniqueId(ncclUniqueId *id) {
	if (!id) return invalidArgument;
	std::lock_guard<std::mutex> g(cliques_mu);
	memset(id, 0, sizeof *id);
	snprintf(id->internal, sizeof id->internal, "trainmem-emu-nccl-%llu", ++next_id);
	return ok;
}

API int ncclCommInitRank(ncclComm **out, int n, ncclUniqueId id, int rank) {
	if (!out || n < 1 || rank < 0 || rank >= n) return invalidArgument;
	CUcontext ctx = nullptr;
	if (cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr) {
		nccl_log("ncclCommInitRank", "no current CUDA context: the rank's GPU must be current");
		return invalidUsage;
	}
	const int device = *(const int *)ctx; // CUctx_st's first field (fakecuda.cpp)
	std::string key(id.internal, strnlen(id.internal, sizeof id.internal));
	clique *c;
	{
		std::lock_guard<std::mutex> g(cliques_mu);
		auto it = by_id.find(key);
		if (it == by_id.end()) {
			c = new clique;
			c->n = n;
			c->comms.resize(n);
			c->posts.resize(n);
			by_id[key] = c;
		} else {
			c = it->second;
		}
	}
	std::unique_lock<std::mutex> l(c->mu);
	if (c->n != n || c->comms[rank].c != nullptr) {
		nccl_log("ncclCommInitRank", "rank " + std::to_string(rank) + " of " + std::to_string(n) + " joins twice or with another size");
		return invalidUsage;
	}
	c->comms[rank] = ncclComm{c, rank, 0, 0};
	if (int r = take_buffers(&c->comms[rank], device); r != ok) return r;
	c->joined++;
	c->alive++;
	c->cv.notify_all();
	if (!c->cv.wait_for(l, std::chrono::seconds(30), [&] { return c->joined == c->n; })) {
		nccl_log("ncclCommInitRank", "the other ranks did not join within 30 s (the emulated NCCL reaches ranks of one process only)");
		return systemError;
	}
	*out = &c->comms[rank];
	return ok;
}

API int ncclCommInitAll(ncclComm **out, int n, const int *devlist) {
	if (!out || n < 1) return invalidArgument;
	clique *c = new clique;
	c->n = n;
	c->comms.resize(n);
	c->posts.resize(n);
	for (int r = 0; r < n; r++) {
		c->comms[r] = ncclComm{c, r, 0, 0};
		if (int e = take_buffers(&c->comms[r], devlist ? devlist[r] : r); e != ok) return e;
		out[r] = &c->comms[r];
	}
	c->joined = c->alive = n;
	return ok;
}

static int release(ncclComm *comm) {
	if (!comm || !comm->c) return invalidArgument;
	clique *c = comm->c;
	CUcontext prev = nullptr, ctx = nullptr;
	cuCtxGetCurrent(&prev);
	if (cuDevicePrimaryCtxRetain(&ctx, comm->device) == CUDA_SUCCESS && cuCtxSetCurrent(ctx) == CUDA_SUCCESS) cuMemFree(comm->buffers);
	cuCtxSetCurrent(prev);
	bool last;
	{
		std::lock_guard<std::mutex> g(c->mu);
		last = --c->alive == 0;
	}
	if (last) {
		std::lock_guard<std::mutex> g(cliques_mu);
		for (auto it = by_id.begin(); it != by_id.end(); ++it)
			if (it->second == c) {
				by_id.erase(it);
				break;
			}
		delete c;
	}
	return ok;
}

API int ncclCommDestroy(ncclComm *comm) { return release(comm); }
API int ncclCommAbort(ncclComm *comm) { return release(comm); }

API const char *ncclGetErrorString(int r) {
	switch (r) {
	case ok: return "no error";
	case systemError: return "unhandled system error (emulated NCCL)";
	case internalError: return "internal error (emulated NCCL)";
	case invalidArgument: return "invalid argument (emulated NCCL: see its message above)";
	case invalidUsage: return "invalid usage (emulated NCCL: see its message above)";
	}
	return "unknown result (emulated NCCL)";
}

API int ncclCommGetAsyncError(ncclComm *comm, int *r) {
	if (!comm || !r) return invalidArgument;
	*r = ok;
	return ok;
}

API int ncclBroadcast(const void *s, void *r, size_t count, int dt, int root, ncclComm *c, void *) {
	return collective(c, post{BROADCAST, s, r, count, dt, 0, root});
}
API int ncclReduce(const void *s, void *r, size_t count, int dt, int op, int root, ncclComm *c, void *) {
	return collective(c, post{REDUCE, s, r, count, dt, op, root});
}
API int ncclAllReduce(const void *s, void *r, size_t count, int dt, int op, ncclComm *c, void *) {
	return collective(c, post{ALL_REDUCE, s, r, count, dt, op, 0});
}
API int ncclReduceScatter(const void *s, void *r, size_t recvcount, int dt, int op, ncclComm *c, void *) {
	return collective(c, post{REDUCE_SCATTER, s, r, recvcount, dt, op, 0});
}
API int ncclAllGather(const void *s, void *r, size_t sendcount, int dt, ncclComm *c, void *) {
	return collective(c, post{ALL_GATHER, s, r, sendcount, dt, 0, 0});
}

// Point-to-point: ncclSend and ncclRecv queue their halves in the calling
// thread's group (ncclGroupStart/ncclGroupEnd; a call outside a group is a
// group of one), and ncclGroupEnd runs them: every send is offered to its
// receiver first, then every receive takes its sender's oldest offer,
// checks that the count and type agree (ncclInvalidUsage on both sides
// otherwise, where NCCL would hang or corrupt) and copies it, and last the
// sends wait until their receivers took them. Two ranks that send to each
// other in one group so meet in either order, as NCCL's fused group does.
struct p2p_half {
	bool send;
	void *buf;
	size_t count;
	int dt, peer;
	ncclComm *comm;
};
static thread_local int group_depth;
static thread_local std::vector<p2p_half> group_ops;

static int run_group(std::vector<p2p_half> ops) {
	for (const p2p_half &h : ops) {
		if (h.comm == nullptr || h.comm->c == nullptr) {
			nccl_log(h.send ? "ncclSend" : "ncclRecv", "no communicator");
			return invalidArgument;
		}
		if (h.peer < 0 || h.peer >= h.comm->c->n || h.peer == h.comm->rank) {
			nccl_log(h.send ? "ncclSend" : "ncclRecv", "peer " + std::to_string(h.peer) + " out of range or this rank");
			return invalidArgument;
		}
		const int sz = type_size(h.dt);
		if (sz == 0) {
			nccl_log(h.send ? "ncclSend" : "ncclRecv", "unknown ncclDataType_t " + std::to_string(h.dt));
			return invalidArgument;
		}
		if (h.count > 0 && !tmemu_device_range((uintptr_t)h.buf, h.count * sz)) {
			nccl_log(h.send ? "ncclSend" : "ncclRecv", "the buffer is not inside one allocation of the emulated GPU");
			return invalidArgument;
		}
	}
	std::vector<p2p *> mine;
	int verdict = ok;
	for (const p2p_half &h : ops) {
		if (!h.send) continue;
		clique *c = h.comm->c;
		p2p *o = new p2p{h.buf, h.count, h.dt, c};
		std::lock_guard<std::mutex> l(c->mu);
		c->offers[{h.comm->rank, h.peer}].push_back(o);
		mine.push_back(o);
		c->cv.notify_all();
	}
	for (const p2p_half &h : ops) {
		if (h.send) continue;
		clique *c = h.comm->c;
		std::unique_lock<std::mutex> l(c->mu);
		auto &q = c->offers[{h.peer, h.comm->rank}];
		c->cv.wait(l, [&] { return !q.empty(); });
		p2p *o = q.front();
		q.erase(q.begin());
		if (o->count != h.count || o->dt != h.dt) {
			nccl_log("ncclRecv", "rank " + std::to_string(h.peer) + " sends " + std::to_string(o->count) + " elements of type " + std::to_string(o->dt) + " to rank " + std::to_string(h.comm->rank) + ", which receives " + std::to_string(h.count) + " of type " + std::to_string(h.dt) + ": NCCL would hang or corrupt");
			o->verdict = verdict = invalidUsage;
		} else if (h.count > 0) {
			memcpy(h.buf, o->buf, h.count * type_size(h.dt));
		}
		o->done = true;
		c->cv.notify_all();
	}
	for (p2p *o : mine) {
		std::unique_lock<std::mutex> l(o->c->mu);
		o->c->cv.wait(l, [&] { return o->done; });
		if (o->verdict != ok) verdict = o->verdict;
		delete o;
	}
	return verdict;
}

API int ncclGroupStart() {
	group_depth++;
	return ok;
}

API int ncclGroupEnd() {
	if (group_depth == 0) {
		nccl_log("ncclGroupEnd", "without ncclGroupStart");
		return invalidUsage;
	}
	if (--group_depth > 0) return ok;
	std::vector<p2p_half> ops;
	ops.swap(group_ops);
	return run_group(ops);
}

static int queue(p2p_half h) {
	if (group_depth > 0) {
		group_ops.push_back(h);
		return ok;
	}
	return run_group({h});
}

API int ncclSend(const void *s, size_t count, int dt, int peer, ncclComm *c, void *) {
	return queue(p2p_half{true, const_cast<void *>(s), count, dt, peer, c});
}
API int ncclRecv(void *r, size_t count, int dt, int peer, ncclComm *c, void *) {
	return queue(p2p_half{false, r, count, dt, peer, c});
}
