//go:build !js

package main

import (
	"os"
	"syscall"
)

// hangup is the closed terminal's signal, which stops a run as SIGINT and
// SIGTERM do (withSignals).
var hangup = []os.Signal{syscall.SIGHUP}
