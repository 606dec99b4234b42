package zero

// The TCP link: rank 0 listens at the rendezvous address (torchrun's
// MASTER_ADDR:MASTER_PORT, or --init tcp://host:port), every other rank
// connects to it and says its rank, the world size and where it listens;
// rank 0 checks them and tells each rank where every later rank listens.
// Each rank dials the ranks after it and accepts the ranks before it, so
// that every pair of ranks holds one connection (a mesh): a layout's
// sub-groups (Group.Split) run their rings between any ranks, as over MPI,
// and every message between two processes keeps its order on their one
// connection whichever group sends it. Each connection carries frames (a
// type byte, a length, the bytes), read by one goroutine that hands data
// to the Recv waiting for it and watches for the peer going away: a peer
// whose connection closes without saying goodbye is gone, and every rank
// fails its waits naming it, passing the reason on to its own peers, so
// that every rank ends with the cause.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	frameHello byte = 1 + iota // a rank's first frame on a connection
	frameData                  // a message
	frameAbort                 // the group is ending: the reason
	frameBye                   // the sender is done: no more frames
)

const helloMagic = "trainmem-tcp-2"

// TCPLink is a Link over TCP connections.
type TCPLink struct {
	rank, size int
	timeout    time.Duration
	peers      map[int]*peer

	mu     sync.Mutex
	err    error         // the first failure; every wait returns it after
	done   chan struct{} // closed on failure
	quit   chan struct{} // closed by Close: the readers stop
	closed bool          // Close or Abort was called
	ending sync.WaitGroup
}

// peer is one connection, to the rank it names.
type peer struct {
	rank int
	conn net.Conn
	wmu  sync.Mutex  // one frame written at a time
	dsts chan []byte // a Recv's destination, taken by the reader
	got  chan error  // the reader's answer for it
	gone chan struct{}
}

// DialTCP joins the group of size ranks at addr (host:port) as rank: rank
// 0 listens there; every other rank connects, retrying until timeout (rank 0
// may start later). It returns once every rank has joined and every
// connection is up; a rank that does not join within timeout fails the
// rendezvous on every rank that did, naming it. timeout also bounds every
// later wait for another rank (DefaultTimeout when 0).
func DialTCP(addr string, rank, size int, timeout time.Duration) (*TCPLink, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("zero: rank %d of %d ranks: out of range (valid: 0 to %d)", rank, size, size-1)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("zero: rendezvous address %q: want host:port (%v)", addr, err)
	}
	l := newTCPLink(rank, size, timeout)
	var err error
	if rank == 0 {
		_, port, _ := net.SplitHostPort(addr)
		var ln net.Listener
		if ln, err = net.Listen("tcp", net.JoinHostPort("", port)); err != nil {
			return nil, fmt.Errorf("zero: rank 0 cannot listen at %s: %w", addr, err)
		}
		err = l.host(ln, addr)
	} else {
		err = l.join(addr, time.Now().Add(timeout))
	}
	return l.start(err)
}

// DialTCPStore joins the group of size ranks as rank through the
// launcher's key-value store at store (host:port; torchrun's TCPStore, see
// store.go): rank 0 listens on a port of its own and sets key to its
// address; every other rank waits for the key and connects there. The rest
// is DialTCP's.
func DialTCPStore(store, key string, rank, size int, timeout time.Duration) (*TCPLink, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("zero: rank %d of %d ranks: out of range (valid: 0 to %d)", rank, size, size-1)
	}
	deadline := time.Now().Add(timeout)
	sc, err := dialStore(store, deadline)
	if err != nil {
		return nil, err
	}
	defer sc.close()
	l := newTCPLink(rank, size, timeout)
	if rank != 0 {
		addr, err := sc.waitGet(key, 1<<10, deadline)
		if err != nil {
			return nil, fmt.Errorf("zero: rank %d: rank 0's address: %w", rank, err)
		}
		return l.start(l.join(string(addr), deadline))
	}
	// Listen on every interface, and tell the others the address this
	// host reaches the store from: the one they reach it from too.
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return nil, fmt.Errorf("zero: rank 0 cannot listen: %w", err)
	}
	host, _, _ := net.SplitHostPort(sc.conn.LocalAddr().String())
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		// Rank 0 reached the store over loopback, so it runs on the
		// store's machine: the others reach that as the store's host
		// (a hostname that maps to 127.0.1.1 on its own machine only).
		if sh, _, err := net.SplitHostPort(store); err == nil && sh != "localhost" {
			if sip := net.ParseIP(sh); sip == nil || !sip.IsLoopback() {
				host = sh
			}
		}
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	addr := net.JoinHostPort(host, port)
	if err := sc.set(key, []byte(addr), deadline); err != nil {
		ln.Close()
		return nil, err
	}
	return l.start(l.host(ln, fmt.Sprintf("%s (through the store at %s)", addr, store)))
}

func newTCPLink(rank, size int, timeout time.Duration) *TCPLink {
	return &TCPLink{rank: rank, size: size, timeout: timeout, peers: map[int]*peer{}, done: make(chan struct{}), quit: make(chan struct{})}
}

// start finishes a rendezvous that ended with err: the readers, and every
// connection up on every rank before any rank goes on.
func (l *TCPLink) start(err error) (*TCPLink, error) {
	if err != nil {
		l.closeConns()
		return nil, err
	}
	for _, p := range l.peers {
		go l.read(p)
	}
	if l.rank == 0 {
		for q := 1; q < l.size; q++ {
			var b [1]byte
			if err = l.Recv(q, b[:]); err != nil {
				break
			}
		}
		for q := 1; q < l.size && err == nil; q++ {
			err = l.Send(q, []byte{1})
		}
	} else if err = l.Send(0, []byte{1}); err == nil {
		var b [1]byte
		err = l.Recv(0, b[:])
	}
	if err != nil {
		l.Abort(err)
		return nil, err
	}
	return l, nil
}

func (l *TCPLink) Rank() int    { return l.rank }
func (l *TCPLink) Size() int    { return l.size }
func (l *TCPLink) Name() string { return TCP.String() }

// hello is a rank's first frame: who it is, the group it joins, and (to
// rank 0) where it listens for the ranks before it.
type hello struct {
	rank, size int
	listen     string
}

func (h hello) encode() []byte {
	return []byte(fmt.Sprintf("%s %d %d %s", helloMagic, h.rank, h.size, h.listen))
}

func decodeHello(b []byte) (hello, error) {
	f := strings.Fields(string(b))
	if len(f) < 3 || f[0] != helloMagic {
		return hello{}, fmt.Errorf("not a trainmem rank (its first frame: %.40q)", b)
	}
	var h hello
	var err1, err2 error
	h.rank, err1 = strconv.Atoi(f[1])
	h.size, err2 = strconv.Atoi(f[2])
	if err1 != nil || err2 != nil {
		return hello{}, fmt.Errorf("a hello that does not parse: %q", b)
	}
	if len(f) > 3 {
		h.listen = f[3]
	}
	return h, nil
}

// host is rank 0's side of the rendezvous, at ln (addr in messages).
func (l *TCPLink) host(ln net.Listener, addr string) error {
	defer ln.Close()
	deadline := time.Now().Add(l.timeout)
	ln.(*net.TCPListener).SetDeadline(deadline)
	type joined struct {
		conn net.Conn
		h    hello
	}
	byRank := map[int]joined{}
	var problems []string
	for len(byRank) < l.size-1 {
		conn, err := ln.Accept()
		if err != nil {
			var missing []string
			for q := 1; q < l.size; q++ {
				if _, ok := byRank[q]; !ok {
					missing = append(missing, strconv.Itoa(q))
				}
			}
			problems = append(problems, fmt.Sprintf("rank %s did not join within %v", strings.Join(missing, ", "), l.timeout))
			break
		}
		hd := time.Now().Add(10 * time.Second) // a silent stranger does not hold the ranks up
		if deadline.Before(hd) {
			hd = deadline
		}
		conn.SetDeadline(hd)
		typ, b, err := readFrame(conn, 1<<10)
		conn.SetDeadline(time.Time{})
		var h hello
		if err == nil && typ != frameHello {
			err = fmt.Errorf("a frame of type %d before its hello", typ)
		}
		if err == nil {
			h, err = decodeHello(b)
		}
		if err != nil {
			conn.Close() // not one of ours: keep waiting for the ranks
			continue
		}
		switch _, dup := byRank[h.rank]; {
		case h.size != l.size:
			problems = append(problems, fmt.Sprintf("rank %d was started for %d ranks, rank 0 for %d", h.rank, h.size, l.size))
		case h.rank < 1 || h.rank >= l.size:
			problems = append(problems, fmt.Sprintf("a process says it is rank %d (valid: 0 to %d, rank 0 listening)", h.rank, l.size-1))
		case dup:
			problems = append(problems, fmt.Sprintf("two processes say they are rank %d", h.rank))
		}
		if len(problems) > 0 {
			writeFrame(conn, frameAbort, []byte(rendezvousError(addr, problems)))
			conn.Close()
			break
		}
		byRank[h.rank] = joined{conn, h}
	}
	if len(problems) > 0 {
		msg := rendezvousError(addr, problems)
		for _, j := range byRank {
			writeFrame(j.conn, frameAbort, []byte(msg))
			j.conn.Close()
		}
		return errors.New(msg)
	}
	for q, j := range byRank {
		// Where each later rank listens: rank q dials them.
		later := []string{"-"}
		for r := q + 1; r < l.size; r++ {
			later = append(later, byRank[r].h.listen)
		}
		if err := writeFrame(j.conn, frameHello, []byte(strings.Join(later, " "))); err != nil {
			msg := fmt.Sprintf("zero: rank 0 could not answer rank %d: %v", q, err)
			for _, o := range byRank {
				writeFrame(o.conn, frameAbort, []byte(msg))
				o.conn.Close()
			}
			return errors.New(msg)
		}
		l.addPeer(q, j.conn)
	}
	return nil
}

func rendezvousError(addr string, problems []string) string {
	return fmt.Sprintf("zero: the rendezvous at %s failed: %s", addr, strings.Join(problems, "; "))
}

// join is a rank's side of the rendezvous other than rank 0's: rank 0 is
// at addr, and deadline bounds the wait for it.
func (l *TCPLink) join(addr string, deadline time.Time) error {
	var conn net.Conn
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		var err error
		if conn, err = net.DialTimeout("tcp", addr, time.Until(deadline)); err == nil {
			break
		}
		if time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("zero: rank %d: no rank 0 at %s within %v (%v)", l.rank, addr, l.timeout, err)
		}
		time.Sleep(wait)
	}
	// Listen where rank 0 reaches this rank: the ranks before it (other
	// than rank 0) connect here.
	host, _, _ := net.SplitHostPort(conn.LocalAddr().String())
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		conn.Close()
		return fmt.Errorf("zero: rank %d cannot listen for the other ranks: %w", l.rank, err)
	}
	defer ln.Close()
	if err := writeFrame(conn, frameHello, hello{l.rank, l.size, ln.Addr().String()}.encode()); err != nil {
		conn.Close()
		return fmt.Errorf("zero: rank %d: saying hello to rank 0 at %s: %w", l.rank, addr, err)
	}
	// Rank 0 answers once every rank has joined, within its own timeout.
	conn.SetDeadline(time.Now().Add(2*l.timeout + 10*time.Second))
	typ, b, err := readFrame(conn, 1<<20)
	conn.SetDeadline(time.Time{})
	switch {
	case err != nil:
		conn.Close()
		return fmt.Errorf("zero: rank %d: waiting for rank 0 at %s to answer: %w", l.rank, addr, err)
	case typ == frameAbort:
		conn.Close()
		return errors.New(string(b))
	case typ != frameHello:
		conn.Close()
		return fmt.Errorf("zero: rank %d: rank 0 answered with a frame of type %d", l.rank, typ)
	}
	l.addPeer(0, conn)
	later := strings.Fields(string(b))
	if len(later) != l.size-l.rank || later[0] != "-" {
		return fmt.Errorf("zero: rank %d: rank 0 named %d later ranks' addresses, want %d (%.80q)", l.rank, len(later)-1, l.size-l.rank-1, b)
	}
	// Dial every later rank (its listener queues the connection until it
	// accepts), then accept every earlier one but rank 0.
	for i, at := range later[1:] {
		next := l.rank + 1 + i
		c, err := net.DialTimeout("tcp", at, time.Until(deadline)+l.timeout)
		if err == nil {
			if err = writeFrame(c, frameHello, hello{l.rank, l.size, ""}.encode()); err != nil {
				c.Close()
			}
		}
		if err != nil {
			return fmt.Errorf("zero: rank %d: connecting to rank %d at %s: %w", l.rank, next, at, err)
		}
		l.addPeer(next, c)
	}
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(l.timeout))
	for accepted := 0; accepted < l.rank-1; accepted++ {
		c, err := ln.Accept()
		if err != nil {
			var missing []string
			for q := 1; q < l.rank; q++ {
				if _, ok := l.peers[q]; !ok {
					missing = append(missing, strconv.Itoa(q))
				}
			}
			return fmt.Errorf("zero: rank %d: rank %s did not connect within %v: %w", l.rank, strings.Join(missing, ", "), l.timeout, err)
		}
		c.SetDeadline(time.Now().Add(l.timeout))
		typ, b, err := readFrame(c, 1<<10)
		c.SetDeadline(time.Time{})
		var h hello
		if err == nil && typ == frameHello {
			h, err = decodeHello(b)
		}
		_, dup := l.peers[h.rank]
		if err != nil || typ != frameHello || h.rank < 1 || h.rank >= l.rank || dup {
			c.Close()
			return fmt.Errorf("zero: rank %d: a connection from an earlier rank (1 to %d, each once) said %q (%v)", l.rank, l.rank-1, b, err)
		}
		l.addPeer(h.rank, c)
	}
	return nil
}

func (l *TCPLink) addPeer(rank int, conn net.Conn) {
	l.peers[rank] = &peer{rank: rank, conn: conn, dsts: make(chan []byte), got: make(chan error, 1), gone: make(chan struct{})}
}

// writeFrame writes one frame: its type, its length and its bytes.
func writeFrame(w io.Writer, typ byte, b []byte) error {
	var hdr [9]byte
	hdr[0] = typ
	binary.LittleEndian.PutUint64(hdr[1:], uint64(len(b)))
	bufs := net.Buffers{hdr[:], b}
	_, err := bufs.WriteTo(w)
	return err
}

// readFrame reads a frame of at most limit bytes.
func readFrame(r io.Reader, limit uint64) (byte, []byte, error) {
	var hdr [9]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.LittleEndian.Uint64(hdr[1:])
	if n > limit {
		return 0, nil, fmt.Errorf("a frame of %d bytes (at most %d expected here)", n, limit)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return hdr[0], b, err
}

// read is p's reader: data goes into the destination of the Recv waiting
// for it; an abort or a connection that closes without a goodbye fails
// the link.
func (l *TCPLink) read(p *peer) {
	defer close(p.gone)
	var hdr [9]byte
	for {
		if _, err := io.ReadFull(p.conn, hdr[:]); err != nil {
			l.lost(p, err)
			return
		}
		n := binary.LittleEndian.Uint64(hdr[1:])
		switch hdr[0] {
		case frameData:
			var dst []byte
			select {
			case dst = <-p.dsts:
			case <-l.quit:
				return // closed with data no Recv asked for
			case <-l.done: // the link failed: drop the data, read on to the peer's EOF
				if _, err := io.CopyN(io.Discard, p.conn, int64(n)); err != nil {
					return
				}
				continue
			}
			if uint64(len(dst)) != n {
				err := fmt.Errorf("zero: rank %d sent %d bytes where rank %d expected %d (the ranks' schedules differ)", p.rank, n, l.rank, len(dst))
				l.fail(err, -1)
				p.got <- err
				if _, err := io.CopyN(io.Discard, p.conn, int64(n)); err != nil { // read on, so the close is no reset
					return
				}
				continue
			}
			_, err := io.ReadFull(p.conn, dst)
			if err != nil {
				err = l.lost(p, err)
			}
			p.got <- err
			if err != nil {
				return
			}
		case frameAbort:
			if n > maxMsg {
				l.lost(p, fmt.Errorf("an abort of %d bytes", n))
				return
			}
			b := make([]byte, n)
			if _, err := io.ReadFull(p.conn, b); err != nil {
				l.lost(p, err)
				return
			}
			l.fail(errors.New(string(b)), p.rank)
			continue // and drain to the peer's EOF
		case frameBye:
			return // the peer is done, and so is this connection
		default:
			l.lost(p, fmt.Errorf("a frame of unknown type %d", hdr[0]))
			return
		}
	}
}

// lost fails the link for p's connection ending unannounced, unless the
// link itself is closing; it returns the link's error.
func (l *TCPLink) lost(p *peer, err error) error {
	l.mu.Lock()
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return errors.New("zero: the link is closed")
	}
	return l.fail(fmt.Errorf("zero: rank %d is gone: its connection to rank %d closed (the process exited or was killed: %v)", p.rank, l.rank, err), p.rank)
}

// fail records the link's first failure, passes it on to every peer but
// from (the rank it came from; -1 for none), and ends every connection,
// which ends every wait (Abort and Close wait for the ending, which takes a
// few seconds at most). The reason goes first, as a frame (waiting a
// moment for a frame in flight on that connection to end), then a FIN
// rather than a reset, which could lose it, while this side reads and
// drops what the peer still sends. It returns the first failure.
func (l *TCPLink) fail(err error, from int) error {
	l.mu.Lock()
	if l.err != nil {
		err = l.err
		l.mu.Unlock()
		return err
	}
	l.err = err
	l.ending.Add(len(l.peers)) // before anyone can see the failure and wait for the ending
	close(l.done)
	l.mu.Unlock()
	msg := []byte(err.Error())
	for q, p := range l.peers {
		go func() {
			defer l.ending.Done()
			if q != from && lockWithin(&p.wmu, time.Second) {
				p.conn.SetWriteDeadline(time.Now().Add(time.Second))
				writeFrame(p.conn, frameAbort, msg)
				p.wmu.Unlock()
			}
			if tc, ok := p.conn.(*net.TCPConn); ok {
				tc.CloseWrite()
				tc.SetReadDeadline(time.Now().Add(time.Second))
				select { // the reader drains until the peer's EOF
				case <-p.gone:
				case <-time.After(2 * time.Second):
				}
			}
			p.conn.Close()
		}()
	}
	return err
}

// lockWithin locks mu unless another holds it for longer than d.
func lockWithin(mu *sync.Mutex, d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(time.Millisecond) {
		if mu.TryLock() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

func (l *TCPLink) closeConns() {
	for _, p := range l.peers {
		p.conn.Close()
	}
}

// failed is the link's failure, if any.
func (l *TCPLink) failed() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *TCPLink) peer(q int, what string) (*peer, error) {
	if err := l.failed(); err != nil {
		return nil, err
	}
	p, ok := l.peers[q]
	if !ok {
		return nil, fmt.Errorf("zero: rank %d has no rank %d to %s (valid: 0 to %d but %d)", l.rank, q, what, l.size-1, l.rank)
	}
	return p, nil
}

// Send implements Link.
func (l *TCPLink) Send(to int, b []byte) error {
	p, err := l.peer(to, "send to")
	if err != nil {
		return err
	}
	p.wmu.Lock()
	p.conn.SetWriteDeadline(time.Now().Add(l.timeout))
	err = writeFrame(p.conn, frameData, b)
	p.wmu.Unlock()
	if err == nil {
		return nil
	}
	if ferr := l.failed(); ferr != nil {
		return ferr
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return l.fail(fmt.Errorf("zero: rank %d waited %v for rank %d to take its data: rank %d stopped reading (is it stuck?)", l.rank, l.timeout, to, to), -1)
	}
	return l.lost(p, err)
}

// Recv implements Link.
func (l *TCPLink) Recv(from int, b []byte) error {
	p, err := l.peer(from, "receive from")
	if err != nil {
		return err
	}
	timer := time.NewTimer(l.timeout)
	defer timer.Stop()
	select {
	case p.dsts <- b:
	case <-l.done:
		return l.failed()
	case <-p.gone:
		return l.lostAfterBye(p)
	case <-timer.C:
		return l.fail(l.timeoutError(from), -1)
	}
	select {
	case err := <-p.got:
		return err
	case <-timer.C:
		l.fail(l.timeoutError(from), -1)
		<-p.got // the reader lets go of b once its connection closes
		return l.failed()
	}
}

// lostAfterBye is the error of a wait on a peer that said goodbye.
func (l *TCPLink) lostAfterBye(p *peer) error {
	if err := l.failed(); err != nil {
		return err
	}
	return l.fail(fmt.Errorf("zero: rank %d finished while rank %d waited for it (the ranks' runs differ)", p.rank, l.rank), -1)
}

func (l *TCPLink) timeoutError(from int) error {
	return fmt.Errorf("zero: rank %d waited %v for rank %d, which did not answer (is it stuck? --timeout sets the wait)", l.rank, l.timeout, from)
}

// Exchange implements Link.
func (l *TCPLink) Exchange(to int, out []byte, from int, in []byte) error {
	sent := make(chan error, 1)
	if out != nil {
		go func() { sent <- l.Send(to, out) }()
	} else {
		sent <- nil
	}
	var err error
	if in != nil {
		err = l.Recv(from, in)
	}
	if serr := <-sent; err == nil {
		err = serr
	}
	return err
}

// Abort implements Link: every peer hears "rank r failed: err" and passes
// it on.
func (l *TCPLink) Abort(err error) {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.fail(fmt.Errorf("zero: rank %d failed: %w", l.rank, err), -1)
	l.ending.Wait()
}

// Close implements Link: it says goodbye on every connection, waits
// (a few seconds at most) for each peer's goodbye, so that no data in flight
// is lost to a reset, and closes them.
func (l *TCPLink) Close() error {
	l.mu.Lock()
	already := l.closed || l.err != nil
	l.closed = true
	l.mu.Unlock()
	if already {
		l.ending.Wait()
		l.closeConns()
		return nil
	}
	ranks := make([]int, 0, len(l.peers))
	for q := range l.peers {
		ranks = append(ranks, q)
	}
	sort.Ints(ranks)
	for _, q := range ranks {
		p := l.peers[q]
		p.wmu.Lock()
		p.conn.SetWriteDeadline(time.Now().Add(time.Second))
		writeFrame(p.conn, frameBye, nil)
		p.wmu.Unlock()
		if tc, ok := p.conn.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
	}
	close(l.quit)
	wait := time.After(min(l.timeout, 10*time.Second))
	for _, q := range ranks {
		select {
		case <-l.peers[q].gone:
		case <-wait:
		}
	}
	l.closeConns()
	return nil
}
