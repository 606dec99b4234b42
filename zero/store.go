package zero

// A client of the key-value store a launcher runs for its workers:
// torchrun's c10d TCPStore. Under torchrun's static rendezvous (its
// default, and the c10d rendezvous of later versions that shares its
// store) the launcher's agent itself listens on MASTER_ADDR:MASTER_PORT and
// tells its workers so with TORCHELASTIC_USE_AGENT_STORE=True, so rank 0
// cannot listen there; instead it listens on a port of its own and leaves
// the address under a key of the store, where the other ranks wait for it.
//
// The wire format is the TCPStore's own (pytorch
// torch/csrc/distributed/c10d/TCPStore.cpp and, from 2.0 on,
// TCPStoreBackend.cpp): a one-byte query type, strings and byte vectors as
// a little-endian uint64 length and the bytes, integers as little-endian
// 64 bits. Two dialects exist:
//
//   - torch 1.x: no greeting; SET 0, GET 2, WAIT 5, GETNUMKEYS 6;
//   - torch 2.x: every connection opens with VALIDATE (type 0, then the
//     uint32 0x3C85F7CE), and the types move up by one: SET 1, GET 3,
//     WAIT 6, GETNUMKEYS 7.
//
// A 2.x server closes a connection whose first query is not VALIDATE (or,
// the libuv backend of torch 2.4 on, ignores it), while VALIDATE would
// stall a 1.x server (it reads it as a SET), so the client asks
// GETNUMKEYS in the 1.x dialect first and, when the server hangs up or
// says nothing within storeProbe, connects again in the 2.x dialect. GET of
// a missing key makes the server drop the connection, so a value is read
// with WAIT (which answers one byte, 0, once every key exists) then GET, as
// torch's own clients do. The server is single-threaded: every query is
// sent whole, in one write.

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"
)

// storeValidateMagic is what a torch 2.x client sends after VALIDATE.
const storeValidateMagic = 0x3C85F7CE

// storeDialect holds a dialect's query types.
type storeDialect struct {
	name                       string
	set, get, wait, getNumKeys byte
	validate                   bool
}

var (
	storeV1 = storeDialect{name: "torch 1.x", set: 0, get: 2, wait: 5, getNumKeys: 6}
	storeV2 = storeDialect{name: "torch 2.x", set: 1, get: 3, wait: 6, getNumKeys: 7, validate: true}
)

// storeClient is one connection to a TCPStore.
type storeClient struct {
	addr    string
	conn    net.Conn
	dialect storeDialect
}

// storeProbe bounds how long a dialect's first answer may take: a 2.x
// store of the libuv backend (torch 2.4 on) neither answers a 1.x query
// nor hangs up on it, so a probe that times out moves on to the other
// dialect rather than waiting out the rendezvous's whole timeout.
const storeProbe = 2 * time.Second

// dialStore connects to the store at addr (host:port), retrying until
// deadline (the agent may still be starting), and finds its dialect.
func dialStore(addr string, deadline time.Time) (*storeClient, error) {
	var lastErr error
	for wait := 50 * time.Millisecond; ; wait = min(2*wait, time.Second) {
		for _, d := range []storeDialect{storeV1, storeV2} {
			probe := time.Now().Add(storeProbe)
			if deadline.Before(probe) {
				probe = deadline
			}
			c, err := tryStore(addr, d, probe)
			if err == nil {
				return c, nil
			}
			lastErr = err
		}
		if time.Now().Add(wait).After(deadline) {
			return nil, fmt.Errorf("zero: no launcher's store (torchrun's TCPStore) answered at %s within the timeout: %v", addr, lastErr)
		}
		time.Sleep(wait)
	}
}

// tryStore connects in dialect d and asks for the number of keys, which
// every store answers, by deadline; the connection is closed when it
// fails (a 1.x server that read half of a 2.x greeting recovers when it
// sees the connection end).
func tryStore(addr string, d storeDialect, deadline time.Time) (*storeClient, error) {
	conn, err := net.DialTimeout("tcp", addr, time.Until(deadline))
	if err != nil {
		return nil, err
	}
	c := &storeClient{addr: addr, conn: conn, dialect: d}
	conn.SetDeadline(deadline)
	var q []byte
	if d.validate {
		q = binary.LittleEndian.AppendUint32([]byte{0}, storeValidateMagic)
	}
	q = append(q, d.getNumKeys)
	if _, err := conn.Write(q); err != nil {
		conn.Close()
		return nil, err
	}
	var n [8]byte
	if _, err := io.ReadFull(conn, n[:]); err != nil {
		conn.Close()
		return nil, fmt.Errorf("%s dialect: %w", d.name, err)
	}
	conn.SetDeadline(time.Time{})
	return c, nil
}

func appendStoreString(q []byte, s []byte) []byte {
	return append(binary.LittleEndian.AppendUint64(q, uint64(len(s))), s...)
}

// set stores value under key.
func (c *storeClient) set(key string, value []byte, deadline time.Time) error {
	q := appendStoreString(appendStoreString([]byte{c.dialect.set}, []byte(key)), value)
	c.conn.SetDeadline(deadline)
	defer c.conn.SetDeadline(time.Time{})
	if _, err := c.conn.Write(q); err != nil {
		return fmt.Errorf("zero: setting %s in the launcher's store at %s: %w", key, c.addr, err)
	}
	return nil
}

// waitGet waits until key exists, then returns its value (at most limit
// bytes). A wait past deadline closes the connection: the store's answer
// could still come and would be read as the next reply.
func (c *storeClient) waitGet(key string, limit uint64, deadline time.Time) ([]byte, error) {
	k := []byte(key)
	c.conn.SetDeadline(deadline)
	defer c.conn.SetDeadline(time.Time{})
	// The GET goes only after the WAIT's answer: the server reads a
	// connection's queries as they come, and a GET of a key not yet there
	// ends the connection.
	if _, err := c.conn.Write(appendStoreString(binary.LittleEndian.AppendUint64([]byte{c.dialect.wait}, 1), k)); err != nil {
		return nil, fmt.Errorf("zero: asking the launcher's store at %s for %s: %w", c.addr, key, err)
	}
	var b [8]byte
	if _, err := io.ReadFull(c.conn, b[:1]); err != nil {
		c.conn.Close()
		return nil, fmt.Errorf("zero: waiting for %s in the launcher's store at %s: %w", key, c.addr, err)
	}
	if b[0] != 0 {
		c.conn.Close() // the stream is no longer in step with the queries
		return nil, fmt.Errorf("zero: the launcher's store at %s answered the wait for %s with %d (want 0, stop waiting)", c.addr, key, b[0])
	}
	if _, err := c.conn.Write(appendStoreString([]byte{c.dialect.get}, k)); err != nil {
		return nil, fmt.Errorf("zero: asking the launcher's store at %s for %s: %w", c.addr, key, err)
	}
	if _, err := io.ReadFull(c.conn, b[:]); err != nil {
		return nil, fmt.Errorf("zero: reading %s from the launcher's store at %s: %w", key, c.addr, err)
	}
	n := binary.LittleEndian.Uint64(b[:])
	if n > limit {
		return nil, fmt.Errorf("zero: %s in the launcher's store at %s holds %d bytes (at most %d expected)", key, c.addr, n, limit)
	}
	v := make([]byte, n)
	if _, err := io.ReadFull(c.conn, v); err != nil {
		return nil, fmt.Errorf("zero: reading %s from the launcher's store at %s: %w", key, c.addr, err)
	}
	return v, nil
}

func (c *storeClient) close() { c.conn.Close() }
