//go:build !js

package main

// trainmem web: the web page (cmd/trainmem/web, built by scripts/web.sh)
// served on this machine for people who have the binary. The page's files
// are embedded; its WebAssembly (trainmem itself, compiled for js/wasm) is
// embedded only by the two-stage build (`make build`, scripts/web.sh DIR
// BINARY), which adds trainmem.wasm.gz and wasm_exec.js to the embedded
// folder through go build -overlay: the source tree holds no build output,
// and a plain `go build` makes a trainmem whose web command says how to get
// the page. The server computes nothing: the browser runs trainmem.

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net"
	"net/http"
	"os"
	"path"
	"strings"
	"syscall"
	"time"
)

//go:embed web
var webFiles embed.FS

func init() {
	register(command{
		name:    "web",
		summary: "serve the web page (estimate, simulate and fit in the browser) on this machine",
		run:     runWeb,
	})
}

const webSynopsis = `Serves trainmem's web page on this machine: open the address it prints.
The page runs trainmem itself, compiled to WebAssembly, in the browser:
the server only hands out its files, so the answers are the command
line's, and the page keeps working if the server stops once it has loaded.
The page's files are in this binary when it was built by make build
(scripts/web.sh bin/web bin/trainmem); --dir serves a site built by
make web instead. docs/guide.md, "The web page", describes the page.

example: trainmem web --addr 127.0.0.1:8080`

// webNeeds are the files a page needs: without one of them it cannot start.
var webNeeds = []string{"index.html", "app.js", "worker.js", "sw.js", "style.css", "wasm_exec.js"}

func runWeb(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("web", flag.ContinueOnError)
	addr := flags.String("addr", "127.0.0.1:8080", "the address to serve on, HOST:PORT (port 0: a free one, printed)")
	dir := flags.String("dir", "", "serve the site in this folder (built by make web) instead of the one in this binary")
	if stop, err := parseFlags(flags, args, stderr, webSynopsis); stop {
		return err
	}
	site, err := webSource(*dir)
	if err != nil {
		return err
	}
	h, err := newWebHandler(site)
	if err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(*addr); err != nil {
		return usagef("--addr %q: %v (valid: HOST:PORT, such as 127.0.0.1:8080; port 0 picks a free one)", *addr, err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return usagef("--addr %q: the port is in use (give another, or port 0 for a free one)", *addr)
		}
		return usagef("--addr %q: %v", *addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "trainmem web: the page is at http://%s/ (Ctrl-C stops)\n", ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
		return nil
	}
}

// webSource is the site to serve: the folder dir, or the embedded one,
// each checked for every file the page needs.
func webSource(dir string) (fs.FS, error) {
	if dir != "" {
		st, err := os.Stat(dir)
		if err != nil || !st.IsDir() {
			return nil, usagef("--dir %q: not a folder (make web builds the site in bin/web)", dir)
		}
		site := os.DirFS(dir)
		for _, f := range append(webNeeds, "trainmem.wasm") {
			if _, err := fs.Stat(site, f); err != nil {
				return nil, usagef("--dir %q: it has no %s, so it is not a site built by make web (scripts/web.sh builds one)", dir, f)
			}
		}
		return site, nil
	}
	site, err := fs.Sub(webFiles, "web")
	if err != nil {
		return nil, err
	}
	for _, f := range append(webNeeds, "trainmem.wasm.gz") {
		if _, err := fs.Stat(site, f); err != nil {
			return nil, usagef("this trainmem was built without its web page (a plain go build leaves out the page's WebAssembly): build it with make build, or build the site with make web and serve it with trainmem web --dir bin/web")
		}
	}
	return site, nil
}

// webFile is one file the server hands out, read once: its bytes, its
// gzip'd bytes, or both.
type webFile struct {
	plain, gz []byte
	etag      string // of the plain bytes
}

// webHandler serves a site's files from memory. The answers are never
// stale: each carries its content's hash as its ETag, and a browser asks
// again each time (no-cache) and gets 304 when nothing changed. A file with
// a gzip'd copy (NAME.gz: the embedded WebAssembly has only that) goes out
// gzip'd to a browser that takes gzip, and unpacked to one that does not.
type webHandler struct{ files map[string]*webFile }

func newWebHandler(site fs.FS) (*webHandler, error) {
	h := &webHandler{files: map[string]*webFile{}}
	err := fs.WalkDir(site, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(site, p)
		if err != nil {
			return err
		}
		name, gz := strings.CutSuffix("/"+p, ".gz")
		f := h.files[name]
		if f == nil {
			f = &webFile{}
			h.files[name] = f
		}
		if gz {
			f.gz = b
		} else {
			f.plain = b
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the page's files: %w", err)
	}
	for name, f := range h.files {
		if f.plain == nil {
			zr, err := gzip.NewReader(bytes.NewReader(f.gz))
			if err == nil {
				f.plain, err = io.ReadAll(zr)
			}
			if err != nil {
				return nil, fmt.Errorf("the page's %s.gz: %w", name, err)
			}
		}
		sum := sha256.Sum256(f.plain)
		f.etag = hex.EncodeToString(sum[:16])
	}
	return h, nil
}

func (h *webHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "the page's files are read, not written", http.StatusMethodNotAllowed)
		return
	}
	name := r.URL.Path
	if name == "/" {
		name = "/index.html"
	}
	f, ok := h.files[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", mime.TypeByExtension(path.Ext(name)))
	hd.Set("Cache-Control", "no-cache")
	hd.Set("X-Content-Type-Options", "nosniff")
	body, etag := f.plain, f.etag
	if f.gz != nil {
		hd.Set("Vary", "Accept-Encoding")
		if acceptsGzip(r) {
			hd.Set("Content-Encoding", "gzip")
			body, etag = f.gz, etag+"-gzip"
		}
	}
	hd.Set("ETag", `"`+etag+`"`)
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(body))
}

// acceptsGzip says whether a request's Accept-Encoding takes gzip.
func acceptsGzip(r *http.Request) bool {
	for _, e := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		coding, q, _ := strings.Cut(strings.TrimSpace(e), ";")
		if strings.EqualFold(strings.TrimSpace(coding), "gzip") && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}
