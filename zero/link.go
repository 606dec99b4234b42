package zero

// A group spread over processes, one rank each: the processes meet and
// move bytes over a Link (TCP in tcp.go, MPI in mpi.go), and the ring of
// ring.go runs over it unchanged, so a rank stages the same buffers and
// sends the same bytes in the same order as an in-process rank.

import (
	"bytes"
	"encoding/binary"
	"encoding/gob"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"trainmem/cuda"
)

// Link is one process's connections to the other processes of its group,
// one rank each: ordered, reliable messages between two ranks, as MPI's
// point-to-point and a TCP stream give. A wait longer than the link's
// timeout fails, naming the rank it waited for; a rank that dies or
// aborts fails every other rank's waits, naming it.
type Link interface {
	Rank() int
	Size() int
	// Send sends b to rank to as one message.
	Send(to int, b []byte) error
	// Recv receives one message from rank from, of exactly len(b) bytes,
	// into b.
	Recv(from int, b []byte) error
	// Exchange sends out to rank to and receives in from rank from (nil:
	// nothing) at once, and returns when both are done.
	Exchange(to int, out []byte, from int, in []byte) error
	// Abort ends the group: the other ranks' waits fail with err, naming
	// this rank (or the launcher ends them). The link is closed.
	Abort(err error)
	// Close leaves the group once every rank is done with it.
	Close() error
	// Name says the engine, for reports ("tcp", "mpi").
	Name() string
}

// DefaultTimeout is how long a rank waits for another (at the rendezvous
// and in every message) before it gives up, naming the rank.
const DefaultTimeout = 5 * time.Minute

// NewProcessGroup is the group of l's ranks of which this process is rank
// l.Rank(), on dev: a device that computes (the data moves between the
// processes).
func NewProcessGroup(dev cuda.Device, l Link) (*Group, error) {
	switch {
	case dev == nil:
		return nil, errors.New("zero: a process's rank needs a device")
	case !dev.Computes():
		return nil, fmt.Errorf("zero: ranks in processes of their own move data: rank %d's device %s holds none (simulate ranks in one process)", l.Rank(), dev.Name())
	case l.Size() < 1 || l.Rank() < 0 || l.Rank() >= l.Size():
		return nil, fmt.Errorf("zero: rank %d of %d ranks: out of range", l.Rank(), l.Size())
	}
	g, err := newGroup([]cuda.Device{dev}, []int{l.Rank()}, l.Size())
	if err != nil {
		return nil, err
	}
	g.tr = &linked{l: l}
	return g, nil
}

// Link is the link of a group spread over processes; nil in one process.
func (g *Group) Link() Link {
	if t, ok := g.tr.(*linked); ok {
		return t.l
	}
	return nil
}

// linked is the transport of a process's rank: the ranks check their
// calls with their ring neighbours (meet), and a ring step is one Exchange.
type linked struct {
	l   Link
	seq uint64 // this rank's collectives so far
}

func (t *linked) start() {}

func (t *linked) leave(*Comm, error) {} // the process aborts its link if it fails (the caller's)

// meet checks this rank's call against the other ranks'. Under the ring
// it needs no round trip through rank 0: each rank sends its call
// (numbered) to the next and compares the previous one's with its own. Two
// ranks that differ make some neighbours differ, so a difference is found
// by at least one rank, which aborts the group with it, naming both ranks
// and their calls; every other rank's next wait on the link then fails
// with that reason (over MPI, MPI_Abort ends every rank, the finder's
// reason printed). A rank whose own arguments failed aborts with its
// error. Either way nothing hangs and the group cannot go on. A native
// engine waits on its library, not on the link, so a rank that went on
// would never hear the abort: there every rank's call goes to rank 0,
// which answers each (judgeCall), and no rank moves data before all agree.
func (t *linked) meet(c *Comm, k call) error {
	t.seq++
	if _, native := c.g.eng.(native); native {
		return t.judgeCall(k)
	}
	if k.err != nil {
		t.l.Abort(k.err)
		return k.err
	}
	n := t.l.Size()
	if n == 1 {
		return nil
	}
	next, prev := (c.rank+1)%n, mod(c.rank-1, n)
	in := make([]byte, callLen)
	if err := t.l.Exchange(next, encodeCall(t.seq, k), prev, in); err != nil {
		return err
	}
	seq, theirs, err := decodeCall(in)
	switch {
	case err != nil:
		err = fmt.Errorf("rank %d: %w", prev, err)
	case seq != t.seq:
		err = fmt.Errorf("zero: the ranks' calls differ: rank %d is at its collective %d (%s), rank %d at its %d (%s)", prev, seq, theirs, c.rank, t.seq, k)
	case !theirs.same(k):
		err = fmt.Errorf("zero: the ranks' calls differ: rank %d calls %s, rank %d %s", prev, theirs, c.rank, k)
	default:
		return nil
	}
	t.l.Abort(err)
	return err
}

// judgeCall is meet through rank 0: every rank's call (its number, fields
// and error) compared there, the verdict the same on every rank.
func (t *linked) judgeCall(k call) error {
	mine := encodeCall(t.seq, k)
	if k.err != nil {
		mine = append(mine, k.err.Error()...)
	}
	verdict, err := judge(t.l, mine, func(msgs [][]byte) (string, error) {
		calls, ranks := make([]call, len(msgs)), make([]int, len(msgs))
		for q, b := range msgs {
			if len(b) < callLen {
				return "", fmt.Errorf("zero: rank %d sent a call of %d bytes, want at least %d (a rank of another trainmem?)", q, len(b), callLen)
			}
			seq, kq, err := decodeCall(b[:callLen])
			switch {
			case err != nil:
				return "", fmt.Errorf("rank %d: %w", q, err)
			case seq != t.seq:
				return fmt.Sprintf("zero: the ranks' calls differ: rank %d is at its collective %d, rank 0 at its %d", q, seq, t.seq), nil
			}
			if len(b) > callLen {
				kq.err = errors.New(string(b[callLen:]))
			}
			calls[q], ranks[q] = kq, q
		}
		if err := agree(calls, ranks); err != nil {
			return err.Error(), nil
		}
		return "", nil
	})
	if err == nil && verdict != "" {
		err = errors.New(verdict)
	}
	return err
}

// judge sends every rank's message mine to rank 0, which decides on all
// of them (in rank order, its own first) and answers every rank with its
// verdict: "" when they agree. Every rank returns the verdict.
func judge(l Link, mine []byte, decide func(msgs [][]byte) (string, error)) (string, error) {
	if l.Rank() != 0 {
		if err := sendMsg(l, 0, mine); err != nil {
			return "", err
		}
		v, err := recvMsg(l, 0)
		return string(v), err
	}
	msgs := [][]byte{mine}
	for q := 1; q < l.Size(); q++ {
		b, err := recvMsg(l, q)
		if err != nil {
			return "", err
		}
		msgs = append(msgs, b)
	}
	verdict, err := decide(msgs)
	if err != nil {
		return "", err
	}
	for q := 1; q < l.Size(); q++ {
		if err := sendMsg(l, q, []byte(verdict)); err != nil {
			return "", err
		}
	}
	return verdict, nil
}

func (t *linked) exchange(c *Comm, out *cuda.Buffer, to int, in *cuda.Buffer, from int) error {
	if out == nil && in == nil {
		return nil // the processes share no memory: nothing to order
	}
	var ob, ib []byte
	if out != nil {
		ob = out.Host()
	}
	if in != nil {
		ib = in.Host()
	}
	return t.l.Exchange(to, ob, from, ib)
}

// callLen is the bytes of an encoded call: its number, its kind, op and
// dtype, its root and lengths.
const callLen = 8 + 3 + 3*8

// encodeCall and decodeCall carry a call to a neighbour: its number among
// the rank's collectives, then its fields.
func encodeCall(seq uint64, k call) []byte {
	b := binary.LittleEndian.AppendUint64(make([]byte, 0, callLen), seq)
	b = append(b, byte(k.kind), byte(k.op), byte(k.dtype))
	for _, v := range []int{k.root, k.sendLen, k.recvLen} {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	return b
}

func decodeCall(b []byte) (uint64, call, error) {
	if len(b) != callLen {
		return 0, call{}, fmt.Errorf("zero: a call of %d bytes, want %d (a rank of another trainmem?)", len(b), callLen)
	}
	seq := binary.LittleEndian.Uint64(b)
	k := call{kind: Collective(b[8]), op: Op(b[9]), dtype: cuda.DType(b[10])}
	if k.kind >= NumCollectives || k.op >= numOps {
		return 0, call{}, fmt.Errorf("zero: a call of kind %d and op %d (a rank of another trainmem?)", b[8], b[9])
	}
	k.root = int(binary.LittleEndian.Uint64(b[11:]))
	k.sendLen = int(binary.LittleEndian.Uint64(b[19:]))
	k.recvLen = int(binary.LittleEndian.Uint64(b[27:]))
	return seq, k, nil
}

// maxMsg bounds a message of unknown length (a call, a rank's results),
// so that a stray peer cannot make a rank allocate without limit.
const maxMsg = 1 << 30

// sendMsg sends a message whose length the receiver does not know: its
// length, then its bytes.
func sendMsg(l Link, to int, b []byte) error {
	if err := l.Send(to, binary.LittleEndian.AppendUint64(nil, uint64(len(b)))); err != nil {
		return err
	}
	if len(b) == 0 {
		return nil
	}
	return l.Send(to, b)
}

func recvMsg(l Link, from int) ([]byte, error) {
	var n [8]byte
	if err := l.Recv(from, n[:]); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint64(n[:])
	if size > maxMsg {
		return nil, fmt.Errorf("zero: rank %d sent a message of %d bytes, more than the %d a message may have", from, size, maxMsg)
	}
	b := make([]byte, size)
	if size == 0 {
		return b, nil
	}
	return b, l.Recv(from, b)
}

// Gather collects every rank's values on rank 0, in rank order. In one
// process they are the members' own (mine, returned as it is); over
// processes rank 0 receives each other rank's one value and the other
// ranks get nil.
func Gather[T any](g *Group, mine []T) ([]T, error) {
	l := g.Link()
	if l == nil {
		return mine, nil
	}
	if len(mine) != 1 {
		return nil, fmt.Errorf("zero: a process's rank gathers one value, not %d", len(mine))
	}
	if l.Rank() != 0 {
		var buf bytes.Buffer
		if err := gob.NewEncoder(&buf).Encode(mine[0]); err != nil {
			return nil, fmt.Errorf("zero: rank %d: encoding its results: %w", l.Rank(), err)
		}
		return nil, sendMsg(l, 0, buf.Bytes())
	}
	all := make([]T, l.Size())
	all[0] = mine[0]
	for q := 1; q < l.Size(); q++ {
		b, err := recvMsg(l, q)
		if err != nil {
			return nil, err
		}
		if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&all[q]); err != nil {
			return nil, fmt.Errorf("zero: rank %d's results: %w", q, err)
		}
	}
	return all, nil
}

// Field is one value of a run's setup that every rank must share, named
// as the user gives it (a flag: "--batch").
type Field struct{ Name, Value string }

// MismatchError is the refusal of ranks whose setups differ: every rank
// returns it, naming the first rank that differs from rank 0 and each
// difference.
type MismatchError struct{ Msg string }

func (e *MismatchError) Error() string { return e.Msg }

// Agree checks at the start of a run that every rank runs the setup of
// rank 0: rank 0 gathers every rank's fields and compares them with its
// own, and every rank returns the same *MismatchError when one differs.
func Agree(l Link, fields []Field) error {
	var buf bytes.Buffer
	if err := gob.NewEncoder(&buf).Encode(fields); err != nil {
		return err
	}
	verdict, err := judge(l, buf.Bytes(), func(msgs [][]byte) (string, error) {
		for q, b := range msgs[1:] {
			var theirs []Field
			if err := gob.NewDecoder(bytes.NewReader(b)).Decode(&theirs); err != nil {
				return "", fmt.Errorf("zero: rank %d's setup: %w", q+1, err)
			}
			if d := differences(fields, theirs); len(d) > 0 {
				return fmt.Sprintf("zero: rank %d's setup differs from rank 0's: %s (every rank must run the same setup)", q+1, strings.Join(d, ", ")), nil
			}
		}
		return "", nil
	})
	if err == nil && verdict != "" {
		err = &MismatchError{verdict}
	}
	return err
}

// differences lists, field by field, where theirs differs from ours.
func differences(ours, theirs []Field) []string {
	their := map[string]string{}
	for _, f := range theirs {
		their[f.Name] = f.Value
	}
	// An empty value is a flag not given: "none".
	show := func(v string) string {
		if v == "" {
			return "none"
		}
		return v
	}
	var d []string
	for _, f := range ours {
		v, ok := their[f.Name]
		switch {
		case !ok:
			d = append(d, fmt.Sprintf("no %s (rank 0: %s)", f.Name, show(f.Value)))
		case v != f.Value:
			d = append(d, fmt.Sprintf("%s %s (rank 0: %s)", f.Name, show(v), show(f.Value)))
		}
		delete(their, f.Name)
	}
	for _, f := range theirs {
		if _, extra := their[f.Name]; extra {
			d = append(d, fmt.Sprintf("%s %s (rank 0 has none)", f.Name, show(f.Value)))
		}
	}
	return d
}

// StopError is why a run over ranks stopped before its last step: the
// lowest rank that asked to stop, why, and the number of the signal that
// stopped it (0 when no signal did: a failed write, say), so that every
// rank can name the peer and the signal and exit alike.
type StopError struct {
	Rank   int
	Signal int
	Reason string
}

func (e *StopError) Error() string { return fmt.Sprintf("rank %d: %s", e.Rank, e.Reason) }

// Stopping is whether the run stops after this step, agreed on by every
// rank: mine is this rank's reason to stop (nil to go on), and every rank
// returns the lowest rank's reason, or nil when none asked. In one process
// the members share what they decide on (mine); over processes rank 0
// hears every rank's and answers all.
func Stopping(g *Group, mine *StopError) (*StopError, error) {
	l := g.Link()
	if l == nil {
		return mine, nil
	}
	var b []byte
	if mine != nil {
		b = []byte(fmt.Sprintf("%d %d %s", mine.Rank, mine.Signal, mine.Reason))
	}
	verdict, err := judge(l, b, func(msgs [][]byte) (string, error) {
		for _, m := range msgs {
			if len(m) > 0 {
				return string(m), nil
			}
		}
		return "", nil
	})
	if err != nil || verdict == "" {
		return nil, err
	}
	var st StopError
	f := strings.SplitN(verdict, " ", 3)
	if len(f) != 3 {
		return nil, fmt.Errorf("zero: a stop that does not parse: %q", verdict)
	}
	var err1, err2 error
	st.Rank, err1 = strconv.Atoi(f[0])
	st.Signal, err2 = strconv.Atoi(f[1])
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("zero: a stop that does not parse: %q", verdict)
	}
	st.Reason = f[2]
	return &st, nil
}
