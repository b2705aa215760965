package chaos

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/echopubsub/echopubsub/messages"
	"github.com/echopubsub/echopubsub/test"
	"github.com/echopubsub/echopubsub/test/testpb"
)

// The record: every node process appends what it publishes and what each
// of its subscribers receives to its own file, one line per event, each
// line handed to the kernel with its own write(2) (no user-space buffer),
// so a kill -9 loses nothing already written. After the run, CheckRecords
// reads every file and runs test.Checker over all of it: that is the
// verdict. Status reports are for progress only.
//
// Lines (fields separated by one space; names contain no space; ids are
// per file, defined before their first use):
//
//	n <id> <node address>                 a node id
//	p <id> <publisher> <node id> <group>  a publisher id
//	s <id> <subscriber>                   a subscriber (before it subscribes)
//	S <id> <unix ns>                      its subscription is in place (Subscribe returned)
//	B <pub id> <seq> <unix ns>            broadcast accepted
//	D <sub id> <pub id> <seq> <node id> <group> <incarnation> <cursor> <local 0|1>
//	E <sub id> <node id> <group> <missed> <incarnation> <from> <to> <reason ...>   CursorExpired
//	X <sub id> D|R                        BackPressure DROPPING / RESUMED
//	U <sub id> <payload type>             Undecodable
//	O <sub id> <go type>                  anything else
//	W <producer node id> <cursor>         the worker crash hook fired after delivering cursor
type Recorder struct {
	mu    sync.Mutex
	f     *os.File
	err   error
	nodes map[string]int
	pubs  map[string]int
	known map[string]bool // publishers defined with their node and group
	buf   []byte
}

// CreateRecorder creates (truncates) path.
func CreateRecorder(path string) (*Recorder, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	return &Recorder{f: f, nodes: map[string]int{}, pubs: map[string]int{}, known: map[string]bool{}}, nil
}

// Err is the first write error (the record is then incomplete).
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Close closes the file.
func (r *Recorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.Close()
}

// write hands one line to the kernel; called with mu held.
func (r *Recorder) write() {
	if _, err := r.f.Write(r.buf); err != nil && r.err == nil {
		r.err = err
	}
	r.buf = r.buf[:0]
}

func (r *Recorder) node(addr string) int {
	id, ok := r.nodes[addr]
	if !ok {
		id = len(r.nodes)
		r.nodes[addr] = id
		r.buf = append(r.buf, fmt.Sprintf("n %d %s\n", id, addr)...)
		r.write()
	}
	return id
}

// pub returns the id of publisher name; node is -1 when unknown (a
// publisher known from a delivery). A publisher first seen in a delivery
// and then publishing here is defined again, with its node and group (a
// later "p" line for an id replaces the earlier one).
func (r *Recorder) pub(name string, node, group int) int {
	id, ok := r.pubs[name]
	if !ok {
		id = len(r.pubs)
		r.pubs[name] = id
	}
	if !ok || (node >= 0 && !r.known[name]) {
		r.known[name] = node >= 0
		r.buf = append(r.buf, fmt.Sprintf("p %d %s %d %d\n", id, name, node, group)...)
		r.write()
	}
	return id
}

// Subscriber defines subscriber id, before it subscribes.
func (r *Recorder) Subscriber(id int, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf, fmt.Sprintf("s %d %s\n", id, name)...)
	r.write()
}

// Subscribed records that subscriber id's subscription was in place at
// unix ns at.
func (r *Recorder) Subscribed(id int, at int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf, fmt.Sprintf("S %d %d\n", id, at)...)
	r.write()
}

// Published records a broadcast accepted.
func (r *Recorder) Published(publisher, node string, group uint32, seq uint64, at int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id := r.pub(publisher, r.node(node), int(group))
	b := append(r.buf, 'B', ' ')
	b = strconv.AppendInt(b, int64(id), 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, seq, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, at, 10)
	r.buf = append(b, '\n')
	r.write()
}

// Received records what subscriber sub received.
func (r *Recorder) Received(sub int, msg interface{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch m := msg.(type) {
	case *messages.Delivery:
		switch p := m.Message.(type) {
		case *testpb.Stamp:
			nid := r.node(m.Node)
			pid := r.pub(p.Publisher, -1, -1)
			b := append(r.buf, 'D', ' ')
			for i, v := range []uint64{uint64(sub), uint64(pid), p.Seq, uint64(nid), uint64(m.Group), m.Incarnation, m.Cursor} {
				if i > 0 {
					b = append(b, ' ')
				}
				b = strconv.AppendUint(b, v, 10)
			}
			if m.Local {
				b = append(b, " 1\n"...)
			} else {
				b = append(b, " 0\n"...)
			}
			r.buf = b
		case *messages.Undecodable:
			r.buf = append(r.buf, fmt.Sprintf("U %d %s\n", sub, strings.ReplaceAll(p.PayloadType, " ", "_"))...)
		default:
			r.buf = append(r.buf, fmt.Sprintf("O %d %T\n", sub, m.Message)...)
		}
	case *messages.CursorExpired:
		nid := r.node(m.Node)
		r.buf = append(r.buf, fmt.Sprintf("E %d %d %d %d %d %d %d %s\n", sub, nid, m.Group, m.Missed, m.ProducerIncarnation, m.From, m.To,
			strings.ReplaceAll(m.Reason, "\n", " "))...)
	case *messages.BackPressure:
		st := "R"
		if m.State == messages.BackPressureState_BACK_PRESSURE_STATE_DROPPING {
			st = "D"
		}
		r.buf = append(r.buf, fmt.Sprintf("X %d %s\n", sub, st)...)
	default:
		r.buf = append(r.buf, fmt.Sprintf("O %d %T\n", sub, msg)...)
	}
	r.write()
}

// WorkerCrash records that the worker crash hook fired after the worker
// delivered cursor of producer node's batch.
func (r *Recorder) WorkerCrash(node string, cursor uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf, fmt.Sprintf("W %d %d\n", r.node(node), cursor)...)
	r.write()
}

// RecordFile is one process's record: Dead when the process was killed
// (its subscribers are then not checked at the end).
type RecordFile struct {
	Path string
	Dead bool
}

// RecordCheck is the verdict over all records.
type RecordCheck struct {
	Report test.Report
	// Per node (the subscriber's node name, before '#').
	DuplicatesPerNode map[string]int64
	ExpiriesPerNode   map[string]int64
	Publishers        int
	Messages          int64 // broadcasts recorded (the highest seq per publisher)
	WorkerCrashes     int   // W lines: worker crashes after an entry of the batch was delivered
	TornLines         int   // a last line without its newline (a kill -9 mid-write)
	Files             int
}

// CheckRecords runs test.Checker over the records: publishes first (all
// files), then each file's receptions in the order written. The checker's
// verdict (rules 1 to 6) is the soak's verdict.
func CheckRecords(files []RecordFile) (*RecordCheck, error) {
	c := test.NewChecker()
	c.MaxViolations = 1000
	c.CursorContiguous = true // one topic, every subscriber on it: a producer's cursors reach everyone
	res := &RecordCheck{DuplicatesPerNode: map[string]int64{}, ExpiriesPerNode: map[string]int64{}, Files: len(files)}
	type pubDef struct {
		name  string
		node  string
		group uint32
	}
	last := map[string]uint64{}
	// Pass 1: publishers and subscribers.
	for _, rf := range files {
		nodes := map[string]string{}
		pubs := map[string]pubDef{}
		subs := map[string]string{}
		err := scan(rf.Path, &res.TornLines, func(f [][]byte) error {
			switch string(f[0]) {
			case "n":
				nodes[string(f[1])] = string(f[2])
			case "p":
				g, _ := strconv.ParseInt(string(f[4]), 10, 64)
				pubs[string(f[1])] = pubDef{name: string(f[2]), node: nodes[string(f[3])], group: uint32(g)}
			case "s":
				subs[string(f[1])] = string(f[2])
				c.AddSubscriber(string(f[2]), 1<<62) // not subscribed yet: no start or tail rule until S
				if rf.Dead {
					c.SubscriberDied(string(f[2]))
				}
			case "S":
				at, _ := strconv.ParseInt(string(f[2]), 10, 64)
				c.AddSubscriber(subs[string(f[1])], at)
			case "B":
				p := pubs[string(f[1])]
				seq, _ := strconv.ParseUint(string(f[2]), 10, 64)
				at, _ := strconv.ParseInt(string(f[3]), 10, 64)
				c.Published(p.name, p.node, p.group, seq, at)
				if seq > last[p.name] {
					last[p.name] = seq
				}
			case "W":
				res.WorkerCrashes++
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	res.Publishers = len(last)
	for _, l := range last {
		res.Messages += int64(l)
	}
	// Pass 2: what each subscriber received.
	for _, rf := range files {
		nodes := map[string]string{}
		pubs := map[string]string{}
		subs := map[string]string{}
		err := scan(rf.Path, nil, func(f [][]byte) error {
			switch string(f[0]) {
			case "n":
				nodes[string(f[1])] = string(f[2])
			case "p":
				pubs[string(f[1])] = string(f[2])
			case "s":
				subs[string(f[1])] = string(f[2])
			case "D":
				var v [7]uint64
				for i := range v {
					v[i], _ = strconv.ParseUint(string(f[1+i]), 10, 64)
				}
				c.Observe(subs[string(f[1])], &messages.Delivery{Node: nodes[string(f[4])], Group: uint32(v[4]),
					Incarnation: v[5], Cursor: v[6], Local: string(f[8]) == "1",
					Message: &testpb.Stamp{Publisher: pubs[string(f[2])], Seq: v[2]}})
			case "E":
				g, _ := strconv.ParseUint(string(f[3]), 10, 32)
				var v [4]uint64 // missed, incarnation, from, to
				for i := range v {
					v[i], _ = strconv.ParseUint(string(f[4+i]), 10, 64)
				}
				sub := subs[string(f[1])]
				c.Observe(sub, &messages.CursorExpired{Node: nodes[string(f[2])], Group: uint32(g), Missed: v[0],
					ProducerIncarnation: v[1], From: v[2], To: v[3], Reason: string(bytes.Join(f[8:], []byte(" ")))})
				res.ExpiriesPerNode[nodeOf(sub)]++
			case "X":
				st := messages.BackPressureState_BACK_PRESSURE_STATE_RESUMED
				if string(f[2]) == "D" {
					st = messages.BackPressureState_BACK_PRESSURE_STATE_DROPPING
				}
				c.Observe(subs[string(f[1])], &messages.BackPressure{State: st})
			case "U":
				c.Observe(subs[string(f[1])], &messages.Delivery{Message: &messages.Undecodable{PayloadType: string(f[2])}})
			case "O":
				c.Observe(subs[string(f[1])], struct{}{})
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	c.Finish()
	res.Report = c.Report()
	for sub, n := range res.Report.Duplicates {
		res.DuplicatesPerNode[nodeOf(sub)] += int64(n)
	}
	return res, nil
}

func nodeOf(sub string) string {
	if i := strings.IndexByte(sub, '#'); i >= 0 {
		return sub[:i]
	}
	return sub
}

// minFields is the number of fields each kind of line has at least.
var minFields = map[string]int{"n": 3, "p": 5, "s": 3, "S": 3, "B": 4, "D": 9, "E": 8, "X": 3, "U": 3, "O": 3, "W": 3,
	"o": 6, "e": 6, "g": 4, "t": 4, "c": 3, "k": 3, "x": 3} // the lower-case kinds: sessions.go

// scan calls fn with the fields of every complete line of path. A last
// line without its newline (a kill -9 in the middle of a write) is counted
// in torn, not parsed.
func scan(path string, torn *int, fn func([][]byte) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	rd := bufio.NewReaderSize(f, 1<<20)
	for n := 1; ; n++ {
		line, err := rd.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			return fmt.Errorf("%s:%d: line too long", path, n)
		}
		if err == io.EOF {
			if len(line) > 0 && torn != nil {
				*torn++
			}
			return nil
		}
		if err != nil {
			return err
		}
		fields := bytes.Fields(line)
		if len(fields) < 2 || len(fields) < minFields[string(fields[0])] {
			return fmt.Errorf("%s:%d: bad line %q", path, n, line)
		}
		if err := fn(fields); err != nil {
			return fmt.Errorf("%s:%d: %v", path, n, err)
		}
	}
}

// RecordFiles lists the *.rec files of dir, sorted.
func RecordFiles(dir string, dead map[string]bool) ([]RecordFile, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.rec"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	out := make([]RecordFile, 0, len(paths))
	for _, p := range paths {
		out = append(out, RecordFile{Path: p, Dead: dead[strings.TrimSuffix(filepath.Base(p), ".rec")]})
	}
	return out, nil
}
