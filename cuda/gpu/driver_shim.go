//go:build trainmem_cuda && linux && amd64

package gpu

// What the driver shim (shim.c) found when gorgonia.org/cu's init
// called cuInit.

/*
extern int tmcu_init_result;
extern int tmcu_init_called;
extern char tmcu_dlerror[512];
extern char tmcu_missing[4096];
*/
import "C"

import "strings"

func driverStatus() driverState {
	return driverState{
		called:  C.tmcu_init_called != 0,
		result:  int(C.tmcu_init_result),
		dlerror: C.GoString(&C.tmcu_dlerror[0]),
		missing: strings.Fields(C.GoString(&C.tmcu_missing[0])),
		shim:    true,
	}
}
