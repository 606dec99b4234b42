//go:build !cgo

package host

import "errors"

// loadOpenBLAS is unavailable without cgo: dlopen needs it.
func loadOpenBLAS(threads int) (gemmBackend, error) {
	return nil, errors.New("cuda: OpenBLAS needs cgo, and this binary was built with CGO_ENABLED=0")
}
