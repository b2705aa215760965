package seglog

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/echopubsub/echopubsub/store"
	"github.com/echopubsub/echopubsub/store/storekit"
)

// Store is the segmented-log store.Store (see the package doc). Its
// only goroutine is the group committer, stopped by Close.
type Store struct {
	dir     string
	log     zerolog.Logger
	segSize int64
	fs      fileSys
	lock    *os.File
	commits *storekit.GroupCommit[*item]
	repair  bool // WithRepair
	tailCut metric.Int64Counter

	// The committer's alone (the GroupCommit goroutine; Open's before it
	// starts): no lock.
	active   segFile // the segment frames are appended to (also in segs)
	activeID uint32
	size     int64 // active's length: where the next frame goes
	synced   int64 // active's length covered by the last fdatasync that returned
	broken   error // a failed fsync or unrepaired write: every later commit fails
	w        frameWriter
	rec      []byte // one record's encoding, reused
	// live counts each segment's rows still in the index; a trim removes
	// the segments from firstSeg up that hold none (see trim.go).
	live     map[uint32]int
	firstSeg uint32
	snapSeg  uint32            // the segment of the last snapshot frame (0: none)
	required map[string]uint64 // recover: each stream's first kept cursor, by its last snapshot

	// mu guards what Read and Position see; the committer changes it
	// (under the write lock) only after the frames are on disk.
	mu        sync.RWMutex
	closed    bool
	segs      map[uint32]segFile
	streams   map[string]*stream
	positions map[posKey]store.ProducerPosition

	// cmu guards consumers and serialises writes of their file
	// (consumers.go).
	cmu       sync.Mutex
	consumers storekit.ConsumerTable
}

// stream is the index of one stream: where each row's record is, in
// cursor order from first.
type stream struct {
	first uint64 // rows[0]'s cursor (1: nothing trimmed)
	rows  []loc
}

func (st *stream) end() uint64 { return st.first + uint64(len(st.rows)) - 1 }

// loc is where a row's record (storekit.AppendRecord) is, with what a
// trim decides on (store.TrimRow): its payload's length and append time
// (time.Time.UnixNano; 0: none), so that Trim reads no record.
type loc struct {
	seg, off, n uint32
	bytes       uint32
	at          int64
}

type posKey struct {
	node  string
	group uint32
}

// Option configures Open.
type Option func(*options)

type options struct {
	segSize int64
	log     zerolog.Logger
	repair  bool
	meters  metric.MeterProvider
	fs      fileSys // the power-loss tests' (crashfs_test.go); nil: the operating system's
}

// MinSegmentSize is the least WithSegmentSize accepts.
const MinSegmentSize = 4096

// WithSegmentSize sets the size at which the log starts a new segment
// file (a commit is never split: a segment may end past it by the last
// commit). Between MinSegmentSize and 1 GiB. Defaults to 64 MiB.
func WithSegmentSize(n int64) Option { return func(o *options) { o.segSize = n } }

// WithLogger sets the logger of Open's recovery and of the store's
// failures (a torn tail cut off and a repair are warnings): pass the
// node's (echopubsub.WithLogger's). Defaults to warnings and errors as
// JSON lines on stderr, never to nothing.
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.log = l } }

// WithMeterProvider sets where Open counts what it cut off and repaired
// (echopubsub.store.recovery_cut, attribute "cause": "torn_tail" or
// "repair"): pass the node's (echopubsub.WithMeterProvider's). Defaults
// to the global provider (otel.GetMeterProvider), as the node's does.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(o *options) { o.meters = mp } }

// WithRepair lets Open repair damage a crash cannot cause (a frame that
// does not read back with whole frames after it in the last segment, or
// anything in an earlier one) instead of failing: it keeps the log up to
// the damage, moves what follows aside (the .cut files) and appends a gap
// row for every cursor it could not keep, so that a reader is told
// (*StreamGap) and no cursor is handed out for a second row (see the
// package doc, "Damage"). Defaults to false: such damage is an Open
// error naming the file and the offset, and nothing is changed.
func WithRepair(repair bool) Option { return func(o *options) { o.repair = repair } }

// Open opens (or creates) the store in directory dir: its segment files
// (00000001.seg, ...) and LOCK. It replays the segments to rebuild the
// index, cutting off a torn tail of the last one (what the last,
// unacknowledged commits left when the machine stopped), logged and
// counted; damage a crash cannot cause is an error naming the file and
// the offset, or with WithRepair repaired (see the package doc).
func Open(dir string, opts ...Option) (*Store, error) {
	o := options{segSize: 64 << 20, log: zerolog.New(os.Stderr).Level(zerolog.WarnLevel).With().Timestamp().Logger(),
		meters: otel.GetMeterProvider(), fs: osFS{}}
	for _, opt := range opts {
		opt(&o)
	}
	switch {
	case dir == "":
		return nil, fmt.Errorf("echopubsub: seglog directory must not be empty")
	case o.segSize < MinSegmentSize || o.segSize > maxFrame:
		return nil, fmt.Errorf("echopubsub: seglog segment size must be between %d and %d, got %d", MinSegmentSize, maxFrame, o.segSize)
	case o.meters == nil:
		return nil, fmt.Errorf("echopubsub: seglog meter provider must not be nil")
	}
	cut, err := o.meters.Meter("github.com/echopubsub/echopubsub/store/seglog").Int64Counter("echopubsub.store.recovery_cut",
		metric.WithUnit("By"), metric.WithDescription("bytes of the log that Open cut off (torn tail) or moved aside (repair)"))
	if err != nil {
		return nil, fmt.Errorf("echopubsub: seglog metrics: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("echopubsub: seglog: %w", err)
	}
	lock, err := lockDir(filepath.Join(dir, "LOCK"))
	if err != nil {
		return nil, fmt.Errorf("echopubsub: seglog: %w", err)
	}
	s := &Store{dir: dir, log: o.log, segSize: o.segSize, fs: o.fs, lock: lock, repair: o.repair, tailCut: cut,
		segs: map[uint32]segFile{}, streams: map[string]*stream{}, positions: map[posKey]store.ProducerPosition{}, live: map[uint32]int{}}
	if err := s.recover(); err != nil {
		s.closeFiles()
		return nil, fmt.Errorf("echopubsub: seglog %s: %w", dir, err)
	}
	if s.consumers, err = s.loadConsumers(); err != nil {
		s.closeFiles()
		return nil, fmt.Errorf("echopubsub: seglog %s: %w", dir, err)
	}
	s.commits = storekit.NewGroupCommitLinger(s.commit, groupLinger)
	return s, nil
}

// groupLinger is how long a commit waits for the callers the previous one
// released (storekit.NewGroupCommitLinger): a small part of an fdatasync.
const groupLinger = 150 * time.Microsecond

// Shared is false: the directory belongs to one node.
func (s *Store) Shared() bool { return false }

// Append implements store.Store: the rows are one frame, fdatasynced
// before Append returns. ctx bounds the wait; a commit that ctx abandoned
// may still land.
func (s *Store) Append(ctx context.Context, recs []store.Record) error {
	if len(recs) == 0 {
		return nil
	}
	return storekit.SubmitLocal(ctx, s.commits, &item{}, "seglog append", recs, nil, nil)
}

// item is one call through the group commit: an append (Append, AppendAt,
// MarkGap) or a Trim.
type item struct {
	storekit.LocalAppend
	trim *trimOp
}

// AppendAt implements store.LocalStore.
func (s *Store) AppendAt(ctx context.Context, recs []store.Record, pos store.ProducerPosition) error {
	return storekit.SubmitLocal(ctx, s.commits, &item{}, "seglog append", recs, nil, &pos)
}

// MarkGap implements store.LocalStore.
func (s *Store) MarkGap(ctx context.Context, gap store.Record, pos store.ProducerPosition) error {
	gap.Kind, gap.Stream = store.RecordGap, "-"
	return storekit.SubmitLocal(ctx, s.commits, &item{}, "seglog append", nil, &gap, &pos)
}

// Position implements store.LocalStore.
func (s *Store) Position(ctx context.Context, node string, group uint32) (store.ProducerPosition, bool, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.ProducerPosition{Node: node, Group: group}, false, store.ErrStoreClosed
	}
	p, ok := s.positions[posKey{node, group}]
	if !ok {
		p = store.ProducerPosition{Node: node, Group: group}
	}
	return p, ok, nil
}

// placed is a row of the commit being written, applied to the index once
// it is on disk.
type placed struct {
	stream string
	loc    loc
}

// commit commits batch's appends (appendFrames), then its trims, each of
// which reports its own outcome in its trimOp: a failed trim must not
// fail the group, whose appends are on disk (storekit.GroupCommit would
// commit them again, alone).
func (s *Store) commit(batch []*item) error {
	appends := make([]*storekit.LocalAppend, 0, len(batch))
	for _, it := range batch {
		if it.trim == nil {
			appends = append(appends, &it.LocalAppend)
		}
	}
	if len(appends) > 0 {
		if err := s.appendFrames(appends); err != nil {
			return err
		}
	}
	for _, it := range batch {
		if it.trim != nil {
			if it.trim.err = it.trim.ctx.Err(); it.trim.err == nil { // its caller is gone: do nothing for it
				it.trim.out, it.trim.err = s.trim(it.trim.r, it.trim.now)
			}
		}
	}
	return nil
}

// appendFrames writes batch (one frame per call) with one write and, when
// a row is in it, one fdatasync (see write: a failed commit leaves the tail
// clean for storekit.GroupCommit's retry of each call alone); then makes
// it visible.
func (s *Store) appendFrames(batch []*storekit.LocalAppend) error {
	if err := s.begin(); err != nil {
		return err
	}
	next := map[string]uint64{} // stream -> its next cursor, with this batch's rows
	var rows []placed
	sync := false
	for _, a := range batch {
		sync = sync || a.Synced()
		var err error
		if rows, err = s.encode(a, next, rows); err != nil {
			return err
		}
	}
	if err := s.write(sync); err != nil {
		return err
	}
	s.mu.Lock()
	for _, r := range rows {
		st := s.index(r.stream, 0)
		st.rows = append(st.rows, r.loc)
	}
	s.live[s.activeID] += len(rows)
	for _, a := range batch {
		if a.Pos != nil {
			s.positions[posKey{a.Pos.Node, a.Pos.Group}] = *a.Pos
		}
	}
	s.mu.Unlock()
	if cap(s.w.buf) > 4<<20 { // a large commit's buffer is not kept
		s.w.buf = nil
	}
	return nil
}

// begin readies s.w for a commit's frames: the store is not broken, and
// the active segment has room (else the next one starts). Committer only.
func (s *Store) begin() error {
	if s.broken != nil {
		return s.broken
	}
	if s.size >= s.segSize {
		if err := s.rotate(); err != nil {
			return err
		}
	}
	s.w.buf = s.w.buf[:0]
	return nil
}

// write appends the frames in s.w to the active segment with one write
// and, if sync, one fdatasync. On a failed write the tail is cut back,
// so that a retry starts clean; after a failed fdatasync what is on disk
// is unknown and the store refuses every later commit (reopen it).
// Committer only.
func (s *Store) write(sync bool) error {
	if s.size+int64(len(s.w.buf)) > math.MaxUint32 {
		return fmt.Errorf("a commit of %d bytes does not fit segment %s", len(s.w.buf), s.active.Name())
	}
	if _, err := s.active.WriteAt(s.w.buf, s.size); err != nil {
		if terr := s.active.Truncate(s.size); terr != nil {
			s.broken = fmt.Errorf("write %s: %w; cutting it back failed: %v (reopen the store)", s.active.Name(), err, terr)
			return s.broken
		}
		return err
	}
	if sync {
		if err := s.active.Datasync(); err != nil {
			s.broken = fmt.Errorf("%w: what is on disk is unknown (reopen the store)", err)
			return s.broken
		}
		s.synced = s.size + int64(len(s.w.buf))
	}
	s.size += int64(len(s.w.buf))
	return nil
}

// index is stream's index, created (first cursor first) if need be; under
// mu, or before the committer starts.
func (s *Store) index(name string, first uint64) *stream {
	st := s.streams[name]
	if st == nil {
		st = &stream{first: max(first, 1)}
		s.streams[name] = st
	}
	return st
}

// nextCursor is stream's next cursor as of the rows encoded so far
// (committer only: the index changes on this goroutine alone).
func (s *Store) nextCursor(next map[string]uint64, name string) uint64 {
	if c, ok := next[name]; ok {
		return c
	}
	if st := s.streams[name]; st != nil {
		return st.end() + 1
	}
	return 1
}

// encode appends a's frame to s.w, assigning its rows' cursors.
func (s *Store) encode(a *storekit.LocalAppend, next map[string]uint64, rows []placed) ([]placed, error) {
	recs := a.Recs
	if a.Gap != nil { // every stream, this batch's new ones included
		names := make([]string, 0, len(s.streams)+len(next))
		for n := range s.streams {
			names = append(names, n)
		}
		for n := range next {
			if s.streams[n] == nil {
				names = append(names, n)
			}
		}
		sort.Strings(names)
		recs = make([]store.Record, len(names))
		for i, n := range names {
			recs[i] = *a.Gap
			recs[i].Stream = n
		}
	}
	mark := len(rows)
	s.w.begin(len(recs), s.synced)
	for i := range recs {
		r := &recs[i]
		r.Cursor = s.nextCursor(next, r.Stream)
		next[r.Stream] = r.Cursor + 1
		s.rec = storekit.AppendRecord(s.rec[:0], r)
		start := s.w.row(r.Stream, r.Cursor, len(s.rec))
		s.w.buf = append(s.w.buf, s.rec...)
		rows = append(rows, placed{r.Stream, loc{seg: s.activeID, off: uint32(s.size) + uint32(start), n: uint32(len(s.rec)),
			bytes: uint32(len(r.Payload)), at: unixNano(r.Time)}})
	}
	if !s.w.end(a.Pos) {
		return rows[:mark], fmt.Errorf("one call's rows are over %d bytes", maxFrame)
	}
	return rows, nil
}
