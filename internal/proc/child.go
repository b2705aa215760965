package proc

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"sync"
)

// The "ev" of the two lines the protocol itself defines (see the package
// doc); every other kind is the caller's.
const (
	EvReady = "ready"
	EvReply = "reply"
)

// maxLine is the longest line either side reads (a line past it ends the
// reading: the parent drains the rest, the child's commands end).
const maxLine = 64 << 20

// Child is the child's side of the protocol: the one writer of its lines
// (one JSON object per line on out, whole lines even when several
// goroutines send). Safe for concurrent use.
type Child struct {
	mu  sync.Mutex
	enc *json.Encoder
}

// NewChild writes the child's lines to out (the process's stdout).
func NewChild(out io.Writer) *Child { return &Child{enc: json.NewEncoder(out)} }

// Send writes v, which must marshal to a JSON object with an "ev" field
// (EvReady, EvReply with the command's "id", or an event of the caller's),
// as one line. A write error is dropped: stdout closes only when the
// parent is gone, and then no one reads the line.
func (c *Child) Send(v any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.enc.Encode(v)
}

// Commands reads the parent's commands from in (the process's stdin), one
// JSON object per line, decodes each into a C and delivers it on the
// returned channel, in order; the channel closes when in ends (the parent
// closed it or is gone). A line that does not decode is answered with a
// reply carrying only "err" (the parent's Call it belonged to then times
// out, naming the op). The reading goroutine is owned by the process: it
// ends with in, or stays blocked on an unread command until the process
// exits.
func Commands[C any](c *Child, in io.Reader) <-chan C {
	ch := make(chan C)
	go func() {
		defer close(ch)
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64<<10), maxLine)
		for sc.Scan() {
			var cmd C
			if err := json.Unmarshal(sc.Bytes(), &cmd); err != nil {
				c.Send(Header{Ev: EvReply, Err: fmt.Sprintf("bad command %q: %v", sc.Text(), err)})
				continue
			}
			ch <- cmd
		}
	}()
	return ch
}
