//go:build !unix

package files

import "os"

func openNonblocking(path string) (*os.File, error) { return os.Open(path) }
