// Package outsidestore is a durable-stream store written as one outside
// this repository would write one: in its own module, on the public
// contract only (package store, with store/storekit's record check and
// append time). It keeps its streams in memory, is node-local with gap
// rows (store.LocalStore), keeps a Retention (store.Trimmer) and named
// consumers (store.ConsumerStore), and its
// test runs store/storetest against it. test/modgraph checks that
// it builds with no internal package of this repository.
package outsidestore

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/echopubsub/echopubsub/store"
	"github.com/echopubsub/echopubsub/store/storekit"
)

// Store is one handle on in-memory streams: Reopen gives another handle
// on the same streams, as a restarted process would open the same file.
type Store struct {
	d      *data
	closed atomic.Bool
}

type data struct {
	mu        sync.Mutex
	streams   map[string]*stream
	positions map[posKey]store.ProducerPosition
	consumers storekit.ConsumerTable
}

type posKey struct {
	node  string
	group uint32
}

// stream is the rows kept (a contiguous run ending at end) and the last
// cursor handed out, which survives its rows.
type stream struct {
	rows []store.Record
	end  uint64
}

func (st *stream) first() uint64 { return st.end - uint64(len(st.rows)) + 1 }

// New returns an empty store.
func New() *Store {
	return &Store{d: &data{streams: map[string]*stream{}, positions: map[posKey]store.ProducerPosition{},
		consumers: storekit.NewConsumerTable()}}
}

// Reopen closes s and returns a new handle on its streams.
func (s *Store) Reopen() *Store {
	_ = s.Close()
	return &Store{d: s.d}
}

var (
	_ store.Store         = (*Store)(nil)
	_ store.LocalStore    = (*Store)(nil)
	_ store.Trimmer       = (*Store)(nil)
	_ store.ConsumerStore = (*Store)(nil)
)

func (s *Store) check(ctx context.Context) error {
	if s.closed.Load() {
		return store.ErrStoreClosed
	}
	return ctx.Err()
}

// Append implements store.Store.
func (s *Store) Append(ctx context.Context, recs []store.Record) error {
	return s.AppendAt(ctx, recs, store.ProducerPosition{})
}

// AppendAt implements store.LocalStore (a zero pos records nothing).
func (s *Store) AppendAt(ctx context.Context, recs []store.Record, pos store.ProducerPosition) error {
	if err := s.check(ctx); err != nil {
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
		s.d.add(&recs[i])
	}
	s.d.record(pos)
	return nil
}

// MarkGap implements store.LocalStore: gap goes to every stream held.
func (s *Store) MarkGap(ctx context.Context, gap store.Record, pos store.ProducerPosition) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	gap.Kind = store.RecordGap
	gaps := []store.Record{gap}
	storekit.Stamp(gaps)
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	names := make([]string, 0, len(s.d.streams))
	for name := range s.d.streams {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		g := gaps[0]
		g.Stream = name
		s.d.add(&g)
	}
	s.d.record(pos)
	return nil
}

// Position implements store.LocalStore.
func (s *Store) Position(ctx context.Context, node string, group uint32) (store.ProducerPosition, bool, error) {
	if err := s.check(ctx); err != nil {
		return store.ProducerPosition{}, false, err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	p, ok := s.d.positions[posKey{node, group}]
	return p, ok, nil
}

// add appends a copy of r to its stream and sets r's Cursor (mu held).
func (d *data) add(r *store.Record) {
	st := d.streams[r.Stream]
	if st == nil {
		st = &stream{}
		d.streams[r.Stream] = st
	}
	st.end++
	r.Cursor = st.end
	c := *r
	c.Payload = append([]byte(nil), r.Payload...)
	st.rows = append(st.rows, c)
}

func (d *data) record(pos store.ProducerPosition) {
	if pos != (store.ProducerPosition{}) {
		d.positions[posKey{pos.Node, pos.Group}] = pos
	}
}

// Read implements store.Store.
func (s *Store) Read(ctx context.Context, name string, from uint64, limit int) ([]store.Record, uint64, error) {
	if s.closed.Load() {
		return nil, 0, store.ErrStoreClosed
	}
	from, err := storekit.ReadFrom(ctx, from, limit)
	if err != nil {
		return nil, 0, err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	st := s.d.streams[name]
	if st == nil {
		st = &stream{}
	}
	if err := storekit.BeyondEnd(name, from, st.end); err != nil {
		return nil, 0, err
	}
	start := max(from, st.first())
	var out []store.Record
	for c := start; c <= st.end && len(out) < limit; c++ {
		r := st.rows[c-st.first()]
		r.Payload = append([]byte(nil), r.Payload...)
		out = append(out, r)
	}
	return out, start + uint64(len(out)), nil
}

// Trim implements store.Trimmer: store.Retention.CutHeld decides, per
// stream, which of the oldest rows go (held by the stream's consumers).
func (s *Store) Trim(ctx context.Context, r store.Retention) ([]store.Trimmed, error) {
	if r == (store.Retention{}) {
		return nil, nil
	}
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	now := time.Now()
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	names := make([]string, 0, len(s.d.streams))
	for name := range s.d.streams {
		names = append(names, name)
	}
	sort.Strings(names)
	var out []store.Trimmed
	for _, name := range names {
		st := s.d.streams[name]
		walk := func(down bool) func(func(store.TrimRow) bool) {
			return func(yield func(store.TrimRow) bool) {
				for i := range st.rows {
					rec := st.rows[i]
					if down {
						rec = st.rows[len(st.rows)-1-i]
					}
					if !yield(store.TrimRow{Cursor: rec.Cursor, Time: rec.Time, Bytes: uint64(len(rec.Payload))}) {
						return
					}
				}
			}
		}
		first := st.first()
		cut := r.CutHeld(now, first, st.end, s.d.consumers.Held(name), walk(false), walk(true))
		if cut < first {
			continue
		}
		tr := store.Trimmed{Stream: name, FirstKept: cut + 1}
		for _, rec := range st.rows[:cut-first+1] {
			tr.Rows++
			tr.Bytes += uint64(len(rec.Payload))
		}
		st.rows = append([]store.Record(nil), st.rows[cut-first+1:]...)
		out = append(out, tr)
	}
	return out, nil
}

// CommitConsumer implements store.ConsumerStore.
func (s *Store) CommitConsumer(ctx context.Context, stream, name string, cursor uint64) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.d.consumers.Commit(stream, name, cursor, time.Now())
	return nil
}

// Consumers implements store.ConsumerStore.
func (s *Store) Consumers(ctx context.Context, stream string) ([]store.Consumer, uint64, error) {
	if err := s.check(ctx); err != nil {
		return nil, 0, err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	var end uint64
	if st := s.d.streams[stream]; st != nil {
		end = st.end
	}
	return s.d.consumers.List(stream), end, nil
}

// DeleteConsumer implements store.ConsumerStore.
func (s *Store) DeleteConsumer(ctx context.Context, stream, name string) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.d.consumers.Delete(stream, name)
	return nil
}

// Shared is false: the streams belong to one node.
func (s *Store) Shared() bool { return false }

// Close implements store.Store. Calls after Close fail.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}
