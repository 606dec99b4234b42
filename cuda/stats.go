package cuda

// Stat is one statistic as PyTorch's memory_stats() reports it: the current
// value, its peak since the last reset, and the running totals of what was
// added and removed.
type Stat struct {
	Current, Peak, Allocated, Freed int64
}

// Add adds n bytes (or items) to s.
func (s *Stat) Add(n int64) {
	s.Current += n
	s.Allocated += n
	if s.Current > s.Peak {
		s.Peak = s.Current
	}
}

// Sub removes n from s.
func (s *Stat) Sub(n int64) {
	s.Current -= n
	s.Freed += n
}

// ResetPeak sets the peak to the current value.
func (s *Stat) ResetPeak() { s.Peak = s.Current }

// Change adds n to s when positive and subtracts -n when negative, as
// PyTorch's update_stat does with a signed amount.
func (s *Stat) Change(n int64) {
	if n >= 0 {
		s.Add(n)
	} else {
		s.Sub(-n)
	}
}

// PoolStats are the statistics of a pool of the caching allocator, or of
// every pool, named after PyTorch's torch.cuda.memory_stats().
type PoolStats struct {
	AllocatedBytes     Stat // bytes in blocks handed out (rounded sizes)
	RequestedBytes     Stat // bytes asked for (before rounding)
	ReservedBytes      Stat // bytes in segments taken from the device
	ActiveBytes        Stat // bytes in active blocks (= allocated: trainmem runs one stream)
	InactiveSplitBytes Stat // free bytes inside segments that are split (fragmentation)

	Allocation    Stat // count of blocks handed out
	Segment       Stat // count of segments
	Active        Stat // count of active blocks
	InactiveSplit Stat // count of free blocks inside split segments
}

// Pools of the caching allocator, as PyTorch names them: the small pool
// (blocks of up to 1 MiB, in 2 MiB segments) and the large pool.
const (
	SmallPool = iota
	LargePool
	NumPools
)

// Stats is the caching allocator's state, named after PyTorch's
// torch.cuda.memory_stats(): every pool's (PyTorch's "all"), each pool's
// (Pools: small_pool, large_pool), and trainmem's per-category split.
type Stats struct {
	PoolStats                     // every pool
	Pools     [NumPools]PoolStats // SmallPool's and LargePool's

	NumAllocRetries int64 // times the cache was emptied to retry a failed segment allocation
	NumOOMs         int64 // allocations that failed after the retry
	NumAllocs       int64 // Alloc calls that succeeded
	NumFrees        int64 // Free calls

	// Per category: bytes allocated (rounded) and requested, current and peak
	// each on its own timeline.
	CategoryAllocated [NumCategories]Stat
	CategoryRequested [NumCategories]Stat
	// AtPeak is the rounded bytes of each category at the moment
	// AllocatedBytes reached its peak: where the memory went at the peak.
	AtPeak [NumCategories]int64
}
