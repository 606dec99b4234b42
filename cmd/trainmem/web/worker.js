// The page's worker: trainmem itself, compiled to WebAssembly
// (GOOS=js GOARCH=wasm go build ./cmd/trainmem), run once a request with
// the request's arguments, as the command line runs it. Its standard
// output and error are captured, and its files live in memory: a request
// puts its inputs under /in (a dropped config.json), and what trainmem
// writes under /out (a memory snapshot, a Chrome trace, a timeline) comes
// back with the answer. The page never freezes: the work is here.
"use strict";

// The errors trainmem's file system calls can meet, as Node names them
// (Go's syscall/fs_js.go maps each code to its errno).
function fsError(code) {
	const err = new Error(code);
	err.code = code;
	return err;
}

// memfs is a file system in memory, with the calls and the callbacks of
// Node's that Go's syscall/fs_js.go makes.
const memfs = (() => {
	const S_IFDIR = 0o040000, S_IFREG = 0o100000;
	const constants = { O_RDONLY: 0, O_WRONLY: 1, O_RDWR: 2, O_CREAT: 64, O_EXCL: 128, O_TRUNC: 512, O_APPEND: 1024, O_DIRECTORY: 65536 };
	const nodes = new Map(); // path → {dir, data (Uint8Array), size, mode, mtimeMs, ino}
	const fds = new Map(); // fd → {path, pos, append}
	let nextIno = 1, nextFD = 10;
	const now = () => Date.now();
	const mkNode = (dir, mode) => ({ dir, data: new Uint8Array(0), size: 0, mode, mtimeMs: now(), ino: nextIno++ });
	nodes.set("/", mkNode(true, 0o755));
	function norm(p) {
		const parts = [];
		for (const s of String(p).split("/")) {
			if (s === "" || s === ".") continue;
			if (s === "..") parts.pop();
			else parts.push(s);
		}
		return "/" + parts.join("/");
	}
	const parent = (p) => (p === "/" ? "/" : norm(p + "/.."));
	function stat(n) {
		return {
			dev: 1, ino: n.ino, mode: (n.dir ? S_IFDIR : S_IFREG) | n.mode, nlink: 1, uid: 0, gid: 0, rdev: 0,
			size: n.dir ? 4096 : n.size, blksize: 4096, blocks: Math.ceil(n.size / 512),
			atimeMs: n.mtimeMs, mtimeMs: n.mtimeMs, ctimeMs: n.mtimeMs,
			isDirectory() { return n.dir; },
		};
	}
	function grow(n, size) {
		if (size > n.data.length) {
			const d = new Uint8Array(Math.max(size, 2 * n.data.length, 4096));
			d.set(n.data.subarray(0, n.size));
			n.data = d;
		}
	}
	function node(fd) {
		const f = fds.get(fd);
		return f && nodes.get(f.path);
	}
	// Each call answers through its callback, as Node's do.
	const fs = {
		constants,
		open(path, flags, mode, cb) {
			const p = norm(path);
			let n = nodes.get(p);
			if (!n) {
				if (!(flags & constants.O_CREAT)) return cb(fsError("ENOENT"));
				const dir = nodes.get(parent(p));
				if (!dir) return cb(fsError("ENOENT"));
				if (!dir.dir) return cb(fsError("ENOTDIR"));
				n = mkNode(false, mode & 0o7777);
				nodes.set(p, n);
			} else if ((flags & constants.O_CREAT) && (flags & constants.O_EXCL)) {
				return cb(fsError("EEXIST"));
			} else if (n.dir && (flags & (constants.O_WRONLY | constants.O_RDWR))) {
				return cb(fsError("EISDIR"));
			} else if (flags & constants.O_TRUNC) {
				n.size = 0;
				n.mtimeMs = now();
			}
			const fd = nextFD++;
			fds.set(fd, { path: p, pos: 0, append: !!(flags & constants.O_APPEND) });
			cb(null, fd);
		},
		close(fd, cb) { fds.delete(fd) ? cb(null) : cb(fsError("EBADF")); },
		fstat(fd, cb) { const n = node(fd); n ? cb(null, stat(n)) : cb(fsError("EBADF")); },
		stat(path, cb) { const n = nodes.get(norm(path)); n ? cb(null, stat(n)) : cb(fsError("ENOENT")); },
		lstat(path, cb) { fs.stat(path, cb); },
		read(fd, buf, offset, length, position, cb) {
			const f = fds.get(fd), n = node(fd);
			if (!n) return cb(fsError("EBADF"));
			if (n.dir) return cb(fsError("EISDIR"));
			const at = position === null || position === undefined ? f.pos : position;
			const k = Math.max(0, Math.min(length, n.size - at));
			buf.set(n.data.subarray(at, at + k), offset);
			if (position === null || position === undefined) f.pos += k;
			cb(null, k);
		},
		writeSync(fd, buf) {
			if (fd === 1 || fd === 2) {
				if (captured) captured[fd] += decoders[fd].decode(buf, { stream: true });
				return buf.length;
			}
			const f = fds.get(fd), n = node(fd);
			if (!n || n.dir) throw fsError("EBADF");
			const at = f.append ? n.size : f.pos;
			grow(n, at + buf.length);
			n.data.set(buf, at);
			n.size = Math.max(n.size, at + buf.length);
			n.mtimeMs = now();
			f.pos = at + buf.length;
			return buf.length;
		},
		write(fd, buf, offset, length, position, cb) {
			let chunk = buf.subarray(offset, offset + length);
			try {
				if (position === null || position === undefined || fd === 1 || fd === 2) {
					return cb(null, fs.writeSync(fd, chunk));
				}
				const f = fds.get(fd), keep = f && f.pos;
				if (!f) return cb(fsError("EBADF"));
				f.pos = position;
				const saved = f.append;
				f.append = false;
				const k = fs.writeSync(fd, chunk);
				f.append = saved;
				f.pos = keep;
				cb(null, k);
			} catch (err) {
				cb(err);
			}
		},
		fsync(fd, cb) { cb(null); },
		ftruncate(fd, length, cb) {
			const n = node(fd);
			if (!n) return cb(fsError("EBADF"));
			grow(n, length);
			n.data.fill(0, n.size, length);
			n.size = length;
			cb(null);
		},
		truncate(path, length, cb) {
			fs.open(path, constants.O_WRONLY, 0, (err, fd) => {
				if (err) return cb(err);
				fs.ftruncate(fd, length, (e) => { fds.delete(fd); cb(e); });
			});
		},
		rename(from, to, cb) {
			const a = norm(from), b = norm(to), n = nodes.get(a);
			if (!n) return cb(fsError("ENOENT"));
			if (!nodes.get(parent(b))) return cb(fsError("ENOENT"));
			const there = nodes.get(b);
			if (there && there.dir) return cb(fsError("EISDIR"));
			nodes.delete(a);
			nodes.set(b, n);
			for (const f of fds.values()) if (f.path === a) f.path = b;
			cb(null);
		},
		unlink(path, cb) {
			const p = norm(path), n = nodes.get(p);
			if (!n) return cb(fsError("ENOENT"));
			if (n.dir) return cb(fsError("EISDIR"));
			nodes.delete(p);
			cb(null);
		},
		mkdir(path, perm, cb) {
			const p = norm(path);
			if (nodes.has(p)) return cb(fsError("EEXIST"));
			if (!nodes.get(parent(p))) return cb(fsError("ENOENT"));
			nodes.set(p, mkNode(true, perm & 0o7777));
			cb(null);
		},
		rmdir(path, cb) {
			const p = norm(path), n = nodes.get(p);
			if (!n) return cb(fsError("ENOENT"));
			if (!n.dir) return cb(fsError("ENOTDIR"));
			if (fs.list(p).length) return cb(fsError("ENOTEMPTY"));
			nodes.delete(p);
			cb(null);
		},
		readdir(path, cb) {
			const p = norm(path), n = nodes.get(p);
			if (!n) return cb(fsError("ENOENT"));
			if (!n.dir) return cb(fsError("ENOTDIR"));
			cb(null, fs.list(p));
		},
		chmod(path, mode, cb) { const n = nodes.get(norm(path)); if (!n) return cb(fsError("ENOENT")); n.mode = mode & 0o7777; cb(null); },
		fchmod(fd, mode, cb) { const n = node(fd); if (!n) return cb(fsError("EBADF")); n.mode = mode & 0o7777; cb(null); },
		chown(path, uid, gid, cb) { cb(null); },
		fchown(fd, uid, gid, cb) { cb(null); },
		lchown(path, uid, gid, cb) { cb(null); },
		utimes(path, atime, mtime, cb) { cb(null); },
		link(path, link, cb) { cb(fsError("ENOSYS")); },
		symlink(path, link, cb) { cb(fsError("ENOSYS")); },
		readlink(path, cb) { cb(fsError("EINVAL")); },
		// list names the entries directly in directory p.
		list(p) {
			const pre = p === "/" ? "/" : p + "/";
			const out = [];
			for (const k of nodes.keys()) {
				if (k !== p && k.startsWith(pre) && !k.slice(pre.length).includes("/")) out.push(k.slice(pre.length));
			}
			return out;
		},
		// put writes a whole file; take reads and removes every file under
		// directory p (a fresh one each run).
		put(path, bytes) {
			const n = mkNode(false, 0o644);
			n.data = bytes;
			n.size = bytes.length;
			nodes.set(norm(path), n);
		},
		reset(p) {
			for (const k of [...nodes.keys()]) if (k === p || k.startsWith(p + "/")) nodes.delete(k);
			nodes.set(p, mkNode(true, 0o755));
		},
		take(p) {
			const out = {};
			for (const [k, n] of nodes) if (!n.dir && k.startsWith(p + "/")) out[k] = n.data.slice(0, n.size);
			return out;
		},
	};
	return fs;
})();

let captured = null; // {1: stdout, 2: stderr} of the run in progress
let decoders = null; // their UTF-8 decoders, a character split across writes kept whole

globalThis.fs = memfs;
globalThis.process = {
	getuid() { return 0; }, getgid() { return 0; }, geteuid() { return 0; }, getegid() { return 0; },
	getgroups() { return []; }, pid: 1, ppid: 0, umask() { return 0o022; },
	cwd() { return "/"; }, chdir() { throw fsError("ENOSYS"); },
};
importScripts("wasm_exec.js");

// The WebAssembly is fetched and compiled once, its arrival reported as it
// comes (its size is known when it is sent as it is, not when a server
// compresses it on the way); every run instantiates the compiled module,
// so the page needs no network once it has loaded.
async function load() {
	const res = await fetch("trainmem.wasm");
	if (!res.ok) throw new Error(`trainmem.wasm: ${res.status} ${res.statusText}`);
	const total = res.headers.get("Content-Encoding") ? 0 : Number(res.headers.get("Content-Length")) || 0;
	let loaded = 0, shown = 0;
	const counted = res.body.pipeThrough(new TransformStream({
		transform(chunk, out) {
			loaded += chunk.byteLength;
			if (loaded - shown >= 1 << 20) {
				shown = loaded;
				postMessage({ loaded, total });
			}
			out.enqueue(chunk);
		},
	}));
	return WebAssembly.compileStreaming(new Response(counted, { headers: { "Content-Type": "application/wasm" } }));
}
const module = load();

// One run at a time: requests queue in order.
let queue = Promise.resolve();

async function run(args, inputs) {
	memfs.reset("/in");
	memfs.reset("/out");
	memfs.reset("/tmp");
	for (const [path, bytes] of Object.entries(inputs || {})) memfs.put(path, bytes);
	const go = new Go();
	go.argv = ["trainmem", ...args];
	go.env = { HOME: "/", TMPDIR: "/tmp" };
	let code = 0;
	go.exit = (c) => { code = c; };
	const instance = await WebAssembly.instantiate(await module, go.importObject);
	captured = { 1: "", 2: "" };
	decoders = { 1: new TextDecoder("utf-8"), 2: new TextDecoder("utf-8") };
	const started = performance.now();
	await go.run(instance);
	// The runtime's timers still pending when the program exited (a
	// sleeping goroutine's) would wake an instance that is gone.
	for (const t of go._scheduledTimeouts.values()) clearTimeout(t);
	go._scheduledTimeouts.clear();
	captured[1] += decoders[1].decode();
	captured[2] += decoders[2].decode();
	const out = { code, stdout: captured[1], stderr: captured[2], ms: performance.now() - started, files: memfs.take("/out") };
	captured = null;
	return out;
}

onmessage = (e) => {
	const { id, args, inputs } = e.data;
	queue = queue.then(() => run(args, inputs)).then(
		(out) => postMessage({ id, ...out }),
		(err) => postMessage({ id, code: 1, stdout: "", stderr: "trainmem: " + err, ms: 0, files: {} }),
	);
};

module.then(() => postMessage({ ready: true }), (err) => postMessage({ ready: false, error: String(err) }));
