// Command trainmem answers "where did the GPU memory go?" when training a
// transformer: the literature's closed-form estimate, a shape-only
// simulation of the real schedule, and measured runs, side by side.
//
// main only runs run and turns its error into an exit status: 0 for
// success, 2 for bad input (one line naming the bad value and what is
// valid), 1 for anything else.
package main

import (
	"fmt"
	"os"
)

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "trainmem:", err)
	}
	os.Exit(exitCode(err))
}
