//go:build !unix

package files

import "os"

func openNonblocking(path string) (*os.File, error) { return os.Open(path) }

func openFIFO(path string) (*os.File, error) { return os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0) }
