package train

// Before a measured run allocates anything: can the machine hold it? The
// simulation says exactly what the device's allocator would reserve; the
// host holds the float32 parameters the run initialises or reads besides.

import (
	"fmt"

	"trainmem/cuda"
	"trainmem/cuda/host"
	"trainmem/cuda/shape"
	"trainmem/model"
)

// TooLargeError is a measured run that its machine cannot hold: what it
// needs (the simulation's reserved bytes on the device, with the host's
// float32 parameters on the host device, whose memory is the machine's)
// and what is free.
type TooLargeError struct {
	Device     string
	Need, Free int64
	// What says what the need is made of, in words.
	What string
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("train: the run needs %s (%s) but %s has %s free: give a smaller shape, batch or sequence, a checkpoint policy, or 'trainmem simulate' to see where it goes without running",
		model.Bytes(e.Need), e.What, e.Device, model.Bytes(e.Free))
}

// HostParamBytes is what a run holds of the parameters on the host: one
// float32 copy, initialised or read from a checkpoint, before it goes to
// the device.
func HostParamBytes(c model.Config) int64 {
	return 4 * c.NumParams() // NumParams is within model.Setup.Validate's limits: no overflow
}

// CheckMachine refuses a run of reserve bytes of allocator segments on
// dev, with hostBytes held on the host besides, that the machine cannot
// hold: on the host device both come out of the machine's available
// memory; on another device reserve must fit its free memory and
// hostBytes the host's. A device or host that cannot say is left to its
// allocator.
func CheckMachine(dev cuda.Device, reserve, hostBytes int64) error {
	avail, _, herr := host.Memory()
	onHost := cuda.OnMachineMemory(dev)
	if onHost && herr == nil && reserve+hostBytes > avail {
		return &TooLargeError{Device: fmt.Sprintf("%s (bound by %s)", dev.Name(), host.MemoryBound()), Need: reserve + hostBytes, Free: avail,
			What: fmt.Sprintf("%s reserved by the allocator, simulated, and %s of float32 parameters", model.Bytes(reserve), model.Bytes(hostBytes))}
	}
	// The device's own limit: a card's memory, a host device's capacity.
	if free, _, err := dev.MemInfo(); err == nil && reserve > free {
		return &TooLargeError{Device: dev.Name(), Need: reserve, Free: free, What: "reserved by the allocator, simulated"}
	}
	if !onHost && herr == nil && hostBytes > avail {
		return &TooLargeError{Device: "the host", Need: hostBytes, Free: avail, What: "float32 parameters to initialise or read"}
	}
	return nil
}

// CheckFits simulates two steps of s (the second reuses the first's
// cache, as a run's do) and refuses, with CheckMachine, a run on dev that
// the machine cannot hold. The device's memory is never touched.
func CheckFits(dev cuda.Device, c model.Checked) error {
	sim := shape.New(0)
	defer sim.Close()
	s := c.Setup()
	_, st, err := Simulate(sim, c, 2, nil)
	if err != nil {
		return fmt.Errorf("train: the simulation before the run: %w", err)
	}
	return CheckMachine(dev, st.ReservedBytes.Peak, HostParamBytes(s.Model))
}
