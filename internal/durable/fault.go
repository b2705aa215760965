package durable

import (
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/store"
)

// A node-local store that fails (a full disk, an I/O error) does not stop
// the traffic into its node. A producer's stream to a node is one cursor
// sequence for every topic of its group, durable or not, so ephemeral
// messages can flow only if the durable ones around them do: the worker
// delivers every batch to the node's subscribers, in order, whether its
// rows were stored or not. What the store could not take is counted, per
// stream and producer node, and becomes gap rows (store.RecordGap, Missed = the
// exact count) in the first write that succeeds again, before any row
// received after it: a replay tells the session where rows are missing
// (StreamGap), never skips them silently. Meanwhile Health.Store, the
// echopubsub.store.failing gauge and one log line say why. See
// docs/operations.md, "Durable streams", "A failing store".
//
// The alternative, refusing batches until the disk recovers, stops every
// topic on the node, ephemeral ones included, and ends in CursorExpired
// for all of them once the producers' buffers overflow: it loses more.

// storeRetryInterval is how often a failing store is tried again (with the
// next received batch, or by a timer when none comes), so that a disk
// that fails does not cost every batch a failed write.
const storeRetryInterval = time.Second

// gapKey names the rows of one producer node in one stream.
type gapKey struct{ stream, origin string }

// posKey names one producer in the positions a node-local store records.
type posKey struct {
	node  string
	group uint32
}

// fault is what a node-local store could not take while its writes
// failed, and since when. Held by the Engine; its fields are guarded
// by mu, and failing is read without it on the path of every batch.
type fault struct {
	failing atomic.Bool
	mu      sync.Mutex
	since   time.Time
	err     error
	retryAt time.Time
	timer   *time.Timer
	stopped bool
	// rows counts the durable rows received and delivered but not stored,
	// marks the gaps (CursorExpired told) not written, pos the latest
	// position of each producer whose writes were not stored.
	rows  map[gapKey]uint64
	marks []localWrite
	pos   map[posKey]store.ProducerPosition
	// unstored counts the rows not stored since the failure began.
	unstored uint64
}

// Health is a node-local store that fails: what the node could not
// store and why (echopubsub.Health.Store). Live delivery goes on; the rows not stored
// become gap rows once the store takes writes again.
type Health struct {
	Failing bool      `json:"failing"`
	Since   time.Time `json:"since"`
	Error   string    `json:"error"`
	// Unstored is the durable rows received since Since and not stored:
	// each will be counted in a gap row.
	Unstored uint64 `json:"unstored"`
}

// Health reports a failing store (nil: none, or it works).
func (d *Engine) Health() *Health {
	if d == nil || !d.fault.failing.Load() {
		return nil
	}
	f := &d.fault
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.failing.Load() {
		return nil
	}
	return &Health{Failing: true, Since: f.since, Error: f.err.Error(), Unstored: f.unstored}
}

// localWrite is one write of the worker's to a node-local store: rows
// received (Received), a gap for every stream (Lost, Joined), and the
// producer's position. It sets each row's Cursor when stored.
type localWrite struct {
	rows []core.Row
	mark *store.Record
	pos  store.ProducerPosition
}

// write does w on l. When the store fails, w is kept (counted, for gap
// rows) and write returns nil: the worker goes on delivering. A closed
// store is an error (the pubsub is stopping).
func (d *Engine) write(l store.LocalStore, w localWrite) error {
	if d.fault.failing.Load() {
		if done, err := d.writeFailing(l, w); done {
			return err
		}
	}
	err := d.writeNow(l, nil, w)
	if err == nil || errors.Is(err, store.ErrStoreClosed) {
		return err
	}
	d.fault.mu.Lock()
	defer d.fault.mu.Unlock()
	d.failed(err, w)
	return nil
}

// writeFailing is write while the store fails: w is kept until it is time
// to try again, then written after what was kept. done false: the store
// recovered meanwhile, write w as usual.
func (d *Engine) writeFailing(l store.LocalStore, w localWrite) (done bool, err error) {
	d.fault.mu.Lock()
	defer d.fault.mu.Unlock()
	switch {
	case !d.fault.failing.Load():
		return false, nil
	case time.Now().Before(d.fault.retryAt):
		d.keep(w)
		return true, nil
	}
	return true, d.retry(l, w)
}

// writeNow writes gaps (gap rows first), then w, in one transaction, and
// w.mark in its own (MarkGap).
func (d *Engine) writeNow(l store.LocalStore, gaps []store.Record, w localWrite) error {
	ctx, cancel := d.Ctx()
	defer cancel()
	if w.mark != nil {
		if err := l.MarkGap(ctx, *w.mark, w.pos); err != nil {
			return err
		}
		if len(gaps) == 0 && len(w.rows) == 0 {
			return nil
		}
	}
	recs := gaps
	for _, r := range w.rows {
		recs = append(recs, store.Record{Stream: r.Topic, Kind: store.RecordMessage, Origin: w.pos.Node, PayloadType: r.PayloadType, Payload: r.Payload})
	}
	if err := l.AppendAt(ctx, recs, w.pos); err != nil {
		return err
	}
	for i := range w.rows {
		w.rows[i].Cursor = recs[len(gaps)+i].Cursor
	}
	return nil
}

// failed starts (or extends) a failure with w. Called with fault.mu held.
func (d *Engine) failed(err error, w localWrite) {
	f := &d.fault
	now := time.Now()
	f.err, f.retryAt = err, now.Add(storeRetryInterval)
	if !f.failing.Load() {
		f.since = now
		f.rows, f.pos, f.marks, f.unstored = map[gapKey]uint64{}, map[posKey]store.ProducerPosition{}, nil, 0
		f.failing.Store(true)
		d.Metrics.StoreFailing(true)
		d.Log.Error().Err(err).Msg("durable store: writes fail: live delivery goes on; the durable rows received meanwhile are not stored and become gap rows once the store takes writes again")
	}
	d.keep(w)
	d.armRetry()
}

// keep counts w for the gap rows. Called with fault.mu held.
func (d *Engine) keep(w localWrite) {
	f := &d.fault
	for i := range w.rows {
		f.rows[gapKey{w.rows[i].Topic, w.pos.Node}]++
		w.rows[i].Cursor, w.rows[i].Unstored = 0, true
	}
	f.unstored += uint64(len(w.rows))
	d.Metrics.StoreUnstored(len(w.rows))
	if w.mark != nil {
		f.marks = append(f.marks, localWrite{mark: w.mark, pos: w.pos})
	}
	if w.pos.Node != "" {
		f.pos[posKey{w.pos.Node, w.pos.Group}] = w.pos
	}
}

// armRetry makes sure the store is tried again at retryAt even when no
// batch comes. Called with fault.mu held.
func (d *Engine) armRetry() {
	f := &d.fault
	if f.timer != nil || f.stopped {
		return
	}
	f.timer = time.AfterFunc(time.Until(f.retryAt), func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.timer = nil
		if f.stopped || !f.failing.Load() {
			return
		}
		if l := d.Local(); l != nil {
			_ = d.retry(l, localWrite{})
		}
	})
}

// retry writes what the failure kept, then w. Called with fault.mu held.
func (d *Engine) retry(l store.LocalStore, w localWrite) error {
	f := &d.fault
	gaps := make([]store.Record, 0, len(f.rows))
	for k, n := range f.rows {
		gaps = append(gaps, store.Record{Stream: k.stream, Kind: store.RecordGap, Origin: k.origin, Missed: n,
			Reason: "this node's store could not write them: " + f.err.Error()})
	}
	sort.Slice(gaps, func(i, j int) bool {
		return gaps[i].Stream < gaps[j].Stream || gaps[i].Stream == gaps[j].Stream && gaps[i].Origin < gaps[j].Origin
	})
	// Marks first (w's too), each its own transaction; then the gap rows,
	// with w's rows after them, and every producer's latest position.
	if w.mark != nil {
		f.marks = append(f.marks, localWrite{mark: w.mark, pos: w.pos})
		w.mark = nil
	}
	var err error
	wrote := false // only a write that succeeds shows the store works again
	for len(f.marks) > 0 && err == nil {
		if err = d.writeNow(l, nil, f.marks[0]); err == nil {
			f.marks, wrote = f.marks[1:], true
		}
	}
	if err == nil {
		if w.pos.Node == "" { // the timer's retry: a position of one of the producers kept
			for _, p := range f.pos {
				w.pos = p
				break
			}
		}
		if w.pos.Node != "" {
			err, wrote = d.writeNow(l, gaps, w), true
		}
	}
	if errors.Is(err, store.ErrStoreClosed) {
		return err
	}
	if err != nil {
		d.failed(err, w)
		return nil
	}
	if !wrote { // nothing to write (only this node's own appends failed): the next one that succeeds says
		return nil
	}
	d.recovered(l, w.pos, len(gaps))
	if len(gaps) > 0 {
		d.gapWritten()
	}
	return nil
}

// recovered ends a failure: every kept producer position but done's is
// recorded, and the state cleared. Called with fault.mu held.
func (d *Engine) recovered(l store.LocalStore, done store.ProducerPosition, gapRows int) {
	f := &d.fault
	ctx, cancel := d.Ctx()
	defer cancel()
	for k, p := range f.pos {
		if (k != posKey{done.Node, done.Group}) {
			if err := l.AppendAt(ctx, nil, p); err != nil { // a stale position costs a gap row too many, never one too few
				d.Log.Warn().Err(err).Str("producer", k.node).Msg("durable store: could not record a producer's position after the store recovered")
			}
		}
	}
	d.Log.Warn().Uint64("unstored", f.unstored).Int("gap_rows", gapRows).Dur("failed_for_ms", time.Since(f.since)).
		Msg("durable store: writes succeed again: the rows not stored are marked with gap rows")
	f.rows, f.pos, f.marks, f.unstored, f.err = nil, nil, nil, 0, nil
	f.failing.Store(false)
	d.Metrics.StoreFailing(false)
}

// published is Publish's word on this node's own append (err nil: it
// succeeded). The caller gets the error; Health and the gauge show the
// failure too, and an append that succeeds with nothing kept ends it
// (with something kept, the next worker write or retry writes it first).
func (d *Engine) published(err error) {
	var errno syscall.Errno // the file system's refusal (ENOSPC, EIO, ...), not a record the store refuses
	if (err != nil && !errors.As(err, &errno)) || (err == nil && !d.fault.failing.Load()) {
		return
	}
	f := &d.fault
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case err != nil:
		d.failed(err, localWrite{})
	case f.failing.Load() && len(f.rows) == 0 && len(f.marks) == 0 && len(f.pos) == 0:
		d.recovered(nil, store.ProducerPosition{}, 0)
	}
}

// flushFaults, for Publish: a store that failed writes the gap rows it
// owes before this node's next own row, when it is time to try again.
func (d *Engine) flushFaults() {
	if !d.fault.failing.Load() {
		return
	}
	l := d.Local()
	if l == nil {
		return
	}
	d.fault.mu.Lock()
	defer d.fault.mu.Unlock()
	if d.fault.failing.Load() && !time.Now().Before(d.fault.retryAt) {
		_ = d.retry(l, localWrite{})
	}
}

// position is what l recorded for the producer of node's group, or, while
// l fails, the position kept for it since.
func (d *Engine) position(l store.LocalStore, node string, group uint32) (store.ProducerPosition, bool, error) {
	if d.fault.failing.Load() {
		d.fault.mu.Lock()
		p, ok := d.fault.pos[posKey{node, group}]
		d.fault.mu.Unlock()
		if ok {
			return p, true, nil
		}
	}
	ctx, cancel := d.Ctx()
	defer cancel()
	return l.Position(ctx, node, group)
}

// stop ends the retry timer; what is still kept is logged: the positions
// recorded before the failure make the next start mark it.
func (d *Engine) Stop() {
	if d == nil {
		return
	}
	f := &d.fault
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
	if f.timer != nil {
		f.timer.Stop()
		f.timer = nil
	}
	if f.failing.Load() {
		d.Log.Error().Uint64("unstored", f.unstored).Err(f.err).
			Msg("durable store: stopping while writes fail: the rows not stored are marked with gap rows when this node starts again on this store")
	}
}
