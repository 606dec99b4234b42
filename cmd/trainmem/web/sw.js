// The page's service worker: it keeps a copy of the site's files, so that
// the page opens and answers with no network once it has been loaded (a
// reload on a train, the server stopped). Each request goes to the network
// first, so a new build is picked up at once, and the copy answers when the
// network does not. The copy is rewritten only when a file changed (its
// ETag), not at every load: the WebAssembly is 45 MB.
"use strict";

const CACHE = "trainmem-web";
const FILES = ["./", "index.html", "app.js", "worker.js", "style.css", "wasm_exec.js", "trainmem.wasm"];

// key is a request's place in the copy: its URL without the query (the
// page's state).
function key(req) {
	const u = new URL(req.url);
	return u.origin + u.pathname;
}

self.addEventListener("install", (e) => {
	e.waitUntil(caches.open(CACHE).then((c) => c.addAll(FILES)).then(() => self.skipWaiting()));
});
self.addEventListener("activate", (e) => e.waitUntil(self.clients.claim()));

async function keep(k, res) {
	const c = await caches.open(CACHE);
	const old = await c.match(k);
	const tag = res.headers.get("ETag");
	if (!old || !tag || old.headers.get("ETag") !== tag) await c.put(k, res);
}

self.addEventListener("fetch", (e) => {
	const req = e.request;
	if (req.method !== "GET" || new URL(req.url).origin !== location.origin) return;
	const k = key(req);
	e.respondWith(
		fetch(req).then(
			(res) => {
				if (res.ok) e.waitUntil(keep(k, res.clone()));
				return res;
			},
			async (err) => {
				const kept = await caches.match(k);
				if (kept) return kept;
				throw err;
			},
		),
	);
});
