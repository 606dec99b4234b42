package main

// A headless Chromium driven over the Chrome DevTools Protocol, through the
// pipe Chromium opens with --remote-debugging-pipe (file descriptors 3 and
// 4, each message JSON ended by a NUL byte): the web page's test loads the
// page, acts on it as a person does (keys, a chosen file, a dropped file),
// reads what it shows, photographs it at a laptop's and a phone's width in
// light and dark mode, and hears every console error, the worker's too.

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

// browserPage is one page of a headless Chromium under the DevTools
// protocol.
type browserPage struct {
	t       *testing.T
	cmd     *exec.Cmd
	w       *os.File // to Chromium (its fd 3)
	mu      sync.Mutex
	next    int
	waiting map[int]chan cdpMessage
	session string // the page's
	// errors are the console's errors and uncaught exceptions, the page's
	// and its workers'.
	errors []string
	closed chan struct{}
}

type cdpMessage struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *cdpError       `json:"error,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
}

type cdpError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// openBrowser starts Chromium and attaches to its page; Cleanup stops it.
func openBrowser(t *testing.T, browser string) *browserPage {
	t.Helper()
	toR, toW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fromR, fromW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--no-default-browser-check", "--hide-scrollbars", "--remote-debugging-pipe", "--user-data-dir="+t.TempDir(), "--window-size=1280,900", "about:blank")
	cmd.ExtraFiles = []*os.File{toR, fromW}
	var logs strings.Builder
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	toR.Close()
	fromW.Close()
	b := &browserPage{t: t, cmd: cmd, w: toW, waiting: map[int]chan cdpMessage{}, closed: make(chan struct{})}
	go b.read(fromR)
	t.Cleanup(func() {
		b.w.Close()
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("Chromium's log:\n%s", logs.String())
		}
	})
	var targets struct {
		Infos []struct {
			ID   string `json:"targetId"`
			Type string `json:"type"`
		} `json:"targetInfos"`
	}
	b.callIn("", "Target.getTargets", nil, &targets)
	page := ""
	for _, ti := range targets.Infos {
		if ti.Type == "page" {
			page = ti.ID
		}
	}
	if page == "" {
		t.Fatalf("Chromium has no page: %+v", targets)
	}
	var att struct {
		Session string `json:"sessionId"`
	}
	b.callIn("", "Target.attachToTarget", map[string]any{"targetId": page, "flatten": true}, &att)
	b.session = att.Session
	for _, m := range []string{"Runtime.enable", "Log.enable", "Page.enable", "DOM.enable"} {
		b.call(m, nil, nil)
	}
	// The worker: attached as it starts, its console heard too.
	b.call("Target.setAutoAttach", map[string]any{"autoAttach": true, "waitForDebuggerOnStart": false, "flatten": true}, nil)
	return b
}

// read takes Chromium's messages: answers go to their callers, events are
// heard here.
func (b *browserPage) read(r *os.File) {
	defer close(b.closed)
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		line, err := br.ReadBytes(0)
		if err != nil {
			return
		}
		var m cdpMessage
		if json.Unmarshal(line[:len(line)-1], &m) != nil {
			continue
		}
		if m.ID != 0 {
			b.mu.Lock()
			ch := b.waiting[m.ID]
			delete(b.waiting, m.ID)
			b.mu.Unlock()
			if ch != nil {
				ch <- m
			}
			continue
		}
		b.event(m)
	}
}

func (b *browserPage) event(m cdpMessage) {
	switch m.Method {
	case "Target.attachedToTarget":
		var a struct {
			Session string `json:"sessionId"`
		}
		json.Unmarshal(m.Params, &a)
		go func() {
			// Runtime.enable gives the worker's console, messages before
			// it included; a worker gone meanwhile is no error.
			b.send(a.Session, "Runtime.enable", nil)
		}()
	case "Runtime.consoleAPICalled":
		var c struct {
			Type string `json:"type"`
			Args []struct {
				Value       any    `json:"value"`
				Description string `json:"description"`
			} `json:"args"`
		}
		json.Unmarshal(m.Params, &c)
		if c.Type == "error" || c.Type == "assert" {
			var parts []string
			for _, a := range c.Args {
				parts = append(parts, fmt.Sprint(a.Value)+a.Description)
			}
			b.heard("console." + c.Type + ": " + strings.Join(parts, " "))
		}
	case "Runtime.exceptionThrown":
		var e struct {
			Details struct {
				Text      string `json:"text"`
				Exception struct {
					Description string `json:"description"`
				} `json:"exception"`
			} `json:"exceptionDetails"`
		}
		json.Unmarshal(m.Params, &e)
		b.heard("uncaught: " + e.Details.Text + " " + e.Details.Exception.Description)
	case "Log.entryAdded":
		var l struct {
			Entry struct {
				Level string `json:"level"`
				Text  string `json:"text"`
				URL   string `json:"url"`
			} `json:"entry"`
		}
		json.Unmarshal(m.Params, &l)
		if l.Entry.Level == "error" {
			b.heard("log: " + l.Entry.Text + " " + l.Entry.URL)
		}
	}
}

func (b *browserPage) heard(s string) {
	b.mu.Lock()
	b.errors = append(b.errors, s)
	b.mu.Unlock()
}

// consoleErrors are the errors heard so far.
func (b *browserPage) consoleErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errors...)
}

// send makes one call in a session ("" for the browser's) and waits up to
// two minutes for its answer.
func (b *browserPage) send(session, method string, params any) (json.RawMessage, error) {
	if params == nil {
		params = map[string]any{}
	}
	p, err := json.Marshal(params)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.next++
	id := b.next
	ch := make(chan cdpMessage, 1)
	b.waiting[id] = ch
	msg, _ := json.Marshal(cdpMessage{ID: id, Method: method, Params: p, SessionID: session})
	_, err = b.w.Write(append(msg, 0))
	b.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	select {
	case m := <-ch:
		if m.Error != nil {
			return nil, fmt.Errorf("%s: %s (%d)", method, m.Error.Message, m.Error.Code)
		}
		return m.Result, nil
	case <-b.closed:
		return nil, fmt.Errorf("%s: Chromium closed the pipe", method)
	case <-time.After(2 * time.Minute):
		return nil, fmt.Errorf("%s: no answer in 2 minutes", method)
	}
}

func (b *browserPage) callIn(session, method string, params, result any) {
	b.t.Helper()
	r, err := b.send(session, method, params)
	if err != nil {
		b.t.Fatal(err)
	}
	if result != nil {
		if err := json.Unmarshal(r, result); err != nil {
			b.t.Fatalf("%s: %v: %s", method, err, r)
		}
	}
}

// call makes a call in the page's session.
func (b *browserPage) call(method string, params, result any) {
	b.t.Helper()
	b.callIn(b.session, method, params, result)
}

// eval runs a JavaScript expression in the page, awaiting a promise, and
// decodes its value (JSON-able) into result.
func (b *browserPage) eval(expr string, result any) error {
	r, err := b.send(b.session, "Runtime.evaluate", map[string]any{"expression": expr, "awaitPromise": true, "returnByValue": true})
	if err != nil {
		return err
	}
	var out struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		Exception *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(r, &out); err != nil {
		return err
	}
	if out.Exception != nil {
		return errors.New(out.Exception.Text + " " + out.Exception.Exception.Description)
	}
	if result == nil {
		return nil
	}
	return json.Unmarshal(out.Result.Value, result)
}

// must is eval that fails the test on an error.
func (b *browserPage) must(expr string, result any) {
	b.t.Helper()
	if err := b.eval(expr, result); err != nil {
		b.t.Fatalf("%s: %v", expr, err)
	}
}

// key presses one key as a keyboard does: key is the DOM's name ("Tab",
// "ArrowDown", "a"), code its key code; text what it types ("" for none).
func (b *browserPage) key(key string, code int, text string, modifiers int) {
	b.t.Helper()
	down := map[string]any{"type": "keyDown", "key": key, "windowsVirtualKeyCode": code, "modifiers": modifiers}
	if text != "" {
		down["text"] = text
	} else {
		down["type"] = "rawKeyDown"
	}
	b.call("Input.dispatchKeyEvent", down, nil)
	b.call("Input.dispatchKeyEvent", map[string]any{"type": "keyUp", "key": key, "windowsVirtualKeyCode": code, "modifiers": modifiers}, nil)
}

// typeText types s, a character a key.
func (b *browserPage) typeText(s string) {
	b.t.Helper()
	for _, r := range s {
		b.key(string(r), int(strings.ToUpper(string(r))[0]), string(r), 0)
	}
}

// screenshot is a PNG of the whole page (not only the viewport).
func (b *browserPage) screenshot() []byte {
	b.t.Helper()
	var m struct {
		Content struct {
			Width  float64 `json:"width"`
			Height float64 `json:"height"`
		} `json:"cssContentSize"`
	}
	b.call("Page.getLayoutMetrics", nil, &m)
	var shot struct {
		Data string `json:"data"`
	}
	b.call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true,
		"clip": map[string]any{"x": 0, "y": 0, "width": m.Content.Width, "height": m.Content.Height, "scale": 1}}, &shot)
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		b.t.Fatal(err)
	}
	return png
}

// waitFor polls a JavaScript condition in the page until it holds.
func (b *browserPage) waitFor(ctx context.Context, cond, what string) {
	b.t.Helper()
	for {
		var ok bool
		if err := b.eval(cond, &ok); err != nil {
			b.t.Fatalf("waiting for %s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			b.t.Fatalf("waiting for %s: %v", what, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
