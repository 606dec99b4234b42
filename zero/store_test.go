package zero

import (
	"encoding/binary"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeStore stands in for torchrun's agent: a TCPStore server on its
// port, in one dialect (storeV1, torch 1.x, or storeV2, 2.x), as
// pytorch's TCPStore.cpp and TCPStoreBackend.cpp describe it and as torch
// 1.13 was seen to answer: a 2.x server hangs up on a first query that is
// not VALIDATE; a GET of a missing key ends the connection; a WAIT answers
// 0 once its keys exist.
type fakeStore struct {
	ln      net.Listener
	dialect storeDialect
	// silent: a first query other than VALIDATE is ignored, the connection
	// left open, as torch 2.4's libuv backend does.
	silent bool
	mu     sync.Mutex
	cond   *sync.Cond
	keys   map[string][]byte
}

func startFakeStore(t *testing.T, d storeDialect, silent bool) *fakeStore {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fakeStore{ln: ln, dialect: d, silent: silent, keys: map[string][]byte{}}
	s.cond = sync.NewCond(&s.mu)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s
}

func (s *fakeStore) addr() string { return s.ln.Addr().String() }

func (s *fakeStore) serve(c net.Conn) {
	defer c.Close()
	readU64 := func() (uint64, bool) {
		var b [8]byte
		_, err := io.ReadFull(c, b[:])
		return binary.LittleEndian.Uint64(b[:]), err == nil
	}
	readStr := func() (string, bool) {
		n, ok := readU64()
		if !ok || n > 1<<20 {
			return "", false
		}
		b := make([]byte, n)
		_, err := io.ReadFull(c, b)
		return string(b), err == nil
	}
	first := true
	for {
		var q [1]byte
		if _, err := io.ReadFull(c, q[:]); err != nil {
			return
		}
		if s.dialect.validate {
			if first && q[0] != 0 && s.silent {
				io.Copy(io.Discard, c) // say nothing, keep the connection
				return
			}
			if first != (q[0] == 0) {
				return // no VALIDATE first, or a second one
			}
			if first {
				var m [4]byte
				if _, err := io.ReadFull(c, m[:]); err != nil || binary.LittleEndian.Uint32(m[:]) != storeValidateMagic {
					return
				}
				first = false
				continue
			}
		}
		first = false
		switch q[0] {
		case s.dialect.set:
			k, ok1 := readStr()
			v, ok2 := readStr()
			if !ok1 || !ok2 {
				return
			}
			s.mu.Lock()
			s.keys[k] = []byte(v)
			s.cond.Broadcast()
			s.mu.Unlock()
		case s.dialect.get:
			k, ok := readStr()
			s.mu.Lock()
			v, there := s.keys[k]
			s.mu.Unlock()
			if !ok || !there {
				return // the server throws, and drops the connection
			}
			c.Write(append(binary.LittleEndian.AppendUint64(nil, uint64(len(v))), v...))
		case s.dialect.wait:
			n, ok := readU64()
			var ks []string
			for i := uint64(0); ok && i < n; i++ {
				var k string
				k, ok = readStr()
				ks = append(ks, k)
			}
			if !ok {
				return
			}
			s.mu.Lock()
			for !s.hasAll(ks) {
				s.cond.Wait()
			}
			s.mu.Unlock()
			c.Write([]byte{0})
		case s.dialect.getNumKeys:
			s.mu.Lock()
			n := len(s.keys)
			s.mu.Unlock()
			c.Write(binary.LittleEndian.AppendUint64(nil, uint64(n)))
		default:
			return
		}
	}
}

func (s *fakeStore) hasAll(ks []string) bool {
	for _, k := range ks {
		if _, ok := s.keys[k]; !ok {
			return false
		}
	}
	return true
}

// Under torchrun's agent the ranks meet through its store in either
// dialect, and with a 2.x store that ignores a 1.x query instead of
// hanging up (torch 2.4's libuv backend): rank 0 listens on a port of its
// own (the store keeps MASTER_PORT), leaves its address under the key,
// and every rank joins; an all-reduce then moves data on every rank. The
// other ranks start first and wait for the key.
func TestDialTCPStore(t *testing.T) {
	for _, tc := range []struct {
		d      storeDialect
		silent bool
	}{{storeV1, false}, {storeV2, false}, {storeV2, true}} {
		d := tc.d
		name := d.name
		if tc.silent {
			name += " libuv"
		}
		t.Run(name, func(t *testing.T) {
			st := startFakeStore(t, d, tc.silent)
			const n = 3
			links := make([]*TCPLink, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r := n - 1; r >= 0; r-- {
				wg.Add(1)
				go func() {
					defer wg.Done()
					links[r], errs[r] = DialTCPStore(st.addr(), "/trainmem/run/0/rank0", r, n, 10*time.Second)
				}()
				time.Sleep(20 * time.Millisecond)
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			defer closeAll(links)
			st.mu.Lock()
			addr := string(st.keys["/trainmem/run/0/rank0"])
			st.mu.Unlock()
			if _, port, _ := net.SplitHostPort(addr); port == "" || addr == st.addr() {
				t.Errorf("rank 0 left %q in the store", addr)
			}
			// One message around the ring: every connection carries data.
			for r := 0; r < n; r++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					in := make([]byte, 1)
					errs[r] = links[r].Exchange((r+1)%n, []byte{byte(r)}, (r+n-1)%n, in)
					if errs[r] == nil && in[0] != byte((r+n-1)%n) {
						t.Errorf("rank %d received %d from rank %d", r, in[0], (r+n-1)%n)
					}
				}()
			}
			wg.Wait()
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
			}
		})
	}
}

// A store that never comes, or a rank 0 that never leaves its address,
// ends the wait at the timeout, naming what was waited for.
func TestDialTCPStoreTimeout(t *testing.T) {
	st := startFakeStore(t, storeV1, false)
	start := time.Now()
	_, err := DialTCPStore(st.addr(), "/trainmem/x/0/rank0", 1, 2, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "/trainmem/x/0/rank0") || time.Since(start) > 5*time.Second {
		t.Errorf("rank 1 without a rank 0: %v after %v", err, time.Since(start))
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := ln.Addr().String()
	ln.Close()
	if _, err := DialTCPStore(addr, "k", 1, 2, 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "no launcher's store") {
		t.Errorf("no store: %v", err)
	}
}
