//go:build js

package main

import "os"

// hangup is empty in WebAssembly (the web page's build, cmd/trainmem/web):
// a page has no terminal to close.
var hangup []os.Signal
