package test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store"
	"github.com/echopubsub/echopubsub/store/storekit"
)

// MemStore is a node-local echopubsub.Store in memory, for tests of the
// durable behaviour that does not depend on a backend: it keeps rows and
// producer positions as store/bolt does (gap rows included: it implements
// the module's internal LocalStore) and passes store/storetest, but
// nothing survives its process. Reopen gives a new handle on the same
// rows, as reopening a file does; Close closes one handle. It implements
// echopubsub.Trimmer (retention) and store.ConsumerStore (named
// consumers) as the real stores do.
type MemStore struct {
	d      *memData
	closed atomic.Bool
}

type memData struct {
	mu        sync.Mutex
	streams   map[string]*memStream
	positions map[string]store.ProducerPosition
	consumers storekit.ConsumerTable
}

// memStream is one stream: rows holds cursors first.. (trimmed rows gone).
type memStream struct {
	first uint64
	rows  []echopubsub.Record
}

// end is the stream's last cursor handed out.
func (m *memStream) end() uint64 { return m.first + uint64(len(m.rows)) - 1 }

// NewMemStore returns an empty store.
func NewMemStore() *MemStore {
	return &MemStore{d: &memData{streams: map[string]*memStream{}, positions: map[string]store.ProducerPosition{},
		consumers: storekit.NewConsumerTable()}}
}

// Reopen returns a new open handle on s's rows (s may be closed).
func (s *MemStore) Reopen() *MemStore { return &MemStore{d: s.d} }

// Shared is false: the store belongs to one node.
func (s *MemStore) Shared() bool { return false }

// Close closes this handle: its later calls fail with ErrStoreClosed.
func (s *MemStore) Close() error {
	s.closed.Store(true)
	return nil
}

// Append implements echopubsub.Store.
func (s *MemStore) Append(ctx context.Context, recs []echopubsub.Record) error {
	return s.AppendAt(ctx, recs, store.ProducerPosition{})
}

// AppendAt implements store.LocalStore (a zero pos records nothing).
func (s *MemStore) AppendAt(ctx context.Context, recs []echopubsub.Record, pos store.ProducerPosition) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	for i := range recs {
		if err := storekit.ValidateRecord(&recs[i]); err != nil {
			return err
		}
	}
	storekit.Stamp(recs)
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	for i := range recs {
		recs[i].Cursor = s.d.add(recs[i])
	}
	s.d.record(pos)
	return nil
}

// MarkGap implements store.LocalStore: gap goes to every stream held.
func (s *MemStore) MarkGap(ctx context.Context, gap echopubsub.Record, pos store.ProducerPosition) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	names := s.d.names()
	stamped := []echopubsub.Record{gap}
	storekit.Stamp(stamped)
	for _, n := range names {
		g := stamped[0]
		g.Kind, g.Stream = echopubsub.RecordGap, n
		s.d.add(g)
	}
	s.d.record(pos)
	return nil
}

// Position implements store.LocalStore.
func (s *MemStore) Position(ctx context.Context, node string, group uint32) (store.ProducerPosition, bool, error) {
	if err := s.usable(ctx); err != nil {
		return store.ProducerPosition{}, false, err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	p, ok := s.d.positions[memPositionKey(node, group)]
	if !ok {
		p = store.ProducerPosition{Node: node, Group: group}
	}
	return p, ok, nil
}

// Read implements echopubsub.Store.
func (s *MemStore) Read(ctx context.Context, stream string, from uint64, limit int) ([]echopubsub.Record, uint64, error) {
	if limit <= 0 {
		return nil, 0, fmt.Errorf("%w: Read limit %d", echopubsub.ErrBadLimit, limit)
	}
	if err := s.usable(ctx); err != nil {
		return nil, 0, err
	}
	if from == 0 {
		from = 1
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	m := s.d.streams[stream]
	if m == nil {
		m = &memStream{first: 1}
	}
	if end := m.end(); from > end+1 {
		return nil, 0, fmt.Errorf("%w: stream %q cursor %d, end %d", echopubsub.ErrCursorBeyondEnd, stream, from, end)
	}
	from = max(from, m.first) // rows below first were trimmed: Read goes on from the first kept
	var out []echopubsub.Record
	for _, r := range m.rows[from-m.first:] {
		if len(out) == limit {
			break
		}
		r.Payload = append([]byte(nil), r.Payload...)
		out = append(out, r)
	}
	return out, from + uint64(len(out)), nil
}

// Trim implements echopubsub.Trimmer, under the lock (a MemStore holds
// little: no chunks).
func (s *MemStore) Trim(ctx context.Context, r echopubsub.Retention) ([]echopubsub.Trimmed, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	now := time.Now()
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	var out []echopubsub.Trimmed
	for _, name := range s.d.names() {
		m := s.d.streams[name]
		walk := func(rows []echopubsub.Record, down bool) func(func(store.TrimRow) bool) {
			return func(yield func(store.TrimRow) bool) {
				for i := range rows {
					rec := &rows[i]
					if down {
						rec = &rows[len(rows)-1-i]
					}
					if !yield(store.TrimRow{Cursor: rec.Cursor, Time: rec.Time, Bytes: uint64(len(rec.Payload))}) {
						return
					}
				}
			}
		}
		cut := r.CutHeld(now, m.first, m.end(), s.d.consumers.Held(name), walk(m.rows, false), walk(m.rows, true))
		if cut < m.first {
			continue
		}
		t := echopubsub.Trimmed{Stream: name, Rows: cut - m.first + 1, FirstKept: cut + 1}
		for _, rec := range m.rows[:t.Rows] {
			t.Bytes += uint64(len(rec.Payload))
		}
		m.rows = append([]echopubsub.Record(nil), m.rows[t.Rows:]...)
		m.first = cut + 1
		out = append(out, t)
	}
	return out, nil
}

// CommitConsumer implements store.ConsumerStore.
func (s *MemStore) CommitConsumer(ctx context.Context, stream, name string, cursor uint64) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.d.consumers.Commit(stream, name, cursor, time.Now())
	return nil
}

// Consumers implements store.ConsumerStore.
func (s *MemStore) Consumers(ctx context.Context, stream string) ([]store.Consumer, uint64, error) {
	if err := s.usable(ctx); err != nil {
		return nil, 0, err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	var end uint64
	if m := s.d.streams[stream]; m != nil {
		end = m.end()
	}
	return s.d.consumers.List(stream), end, nil
}

// DeleteConsumer implements store.ConsumerStore.
func (s *MemStore) DeleteConsumer(ctx context.Context, stream, name string) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.d.consumers.Delete(stream, name)
	return nil
}

func (s *MemStore) usable(ctx context.Context) error {
	if s.closed.Load() {
		return echopubsub.ErrStoreClosed
	}
	return ctx.Err()
}

// names are the streams held, sorted; d.mu held.
func (d *memData) names() []string {
	names := make([]string, 0, len(d.streams))
	for n := range d.streams {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// add appends r (a copy) to its stream and returns its cursor; d.mu held.
func (d *memData) add(r echopubsub.Record) uint64 {
	m := d.streams[r.Stream]
	if m == nil {
		m = &memStream{first: 1}
		d.streams[r.Stream] = m
	}
	r.Payload = append([]byte(nil), r.Payload...)
	r.Cursor = m.end() + 1
	m.rows = append(m.rows, r)
	return r.Cursor
}

// record keeps pos (the zero position is none); d.mu held.
func (d *memData) record(pos store.ProducerPosition) {
	if pos != (store.ProducerPosition{}) {
		d.positions[memPositionKey(pos.Node, pos.Group)] = pos
	}
}

func memPositionKey(node string, group uint32) string { return fmt.Sprintf("%s/%d", node, group) }

var (
	_ store.LocalStore    = (*MemStore)(nil)
	_ echopubsub.Trimmer  = (*MemStore)(nil)
	_ store.ConsumerStore = (*MemStore)(nil)
)
