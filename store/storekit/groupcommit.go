// Package storekit is what this repository's Store implementations share
// (store/seglog, store/bolt, store/postgres), public so that a Store
// written elsewhere can use it too: group commit (GroupCommit, and
// SubmitLocal for a store.LocalStore), the record check (ValidateRecord),
// the append time (Stamp), the record codec (AppendRecord, ParseRecord,
// DecodeRecord), Read's argument checks (ReadFrom, BeyondEnd) and
// Fdatasync. The contract itself is package store.
package storekit

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/echopubsub/echopubsub/store"
)

// GroupCommit turns concurrent appends into group commits, for Store
// implementations (store/bolt and store/postgres use it): Submit
// queues an item and waits; one goroutine hands everything queued while the
// previous commit ran to one call of commit, with no added delay for a lone
// caller. When a group's commit fails, each of its items is committed
// alone, so that one bad item does not fail the others. commit runs on that
// goroutine only.
type GroupCommit[T any] struct {
	commit func([]T) error
	mu     sync.Mutex // queue, closed, and wake's close
	queue  []groupItem[T]
	closed bool
	wake   chan struct{}
	done   chan struct{}
	linger time.Duration // NewGroupCommitLinger
}

type groupItem[T any] struct {
	v   T
	err chan error
}

// NewGroupCommit starts the committing goroutine; Close stops it.
func NewGroupCommit[T any](commit func([]T) error) *GroupCommit[T] {
	return NewGroupCommitLinger(commit, 0)
}

// NewGroupCommitLinger is NewGroupCommit whose committer, when its last
// group held several items and fewer are queued now, waits up to linger
// for as many (yielding the processor: a timer is too coarse, ~1 ms, for
// a wait shorter than an fsync). The callers a commit released come back
// one by one: without it the next group takes the first of them alone
// and the rest wait a whole commit more. A lone caller (last group of
// one) never waits. linger 0 is NewGroupCommit.
func NewGroupCommitLinger[T any](commit func([]T) error, linger time.Duration) *GroupCommit[T] {
	g := &GroupCommit[T]{commit: commit, wake: make(chan struct{}, 1), done: make(chan struct{}), linger: linger}
	go g.run()
	return g
}

// Submit queues v and waits until its commit returned (its error), or ctx
// ended (ctx's error: the commit may still land). After Close it returns
// store.ErrStoreClosed. The caller must not touch v until Submit returned nil or
// an error of the commit; after a ctx error, v may still be read.
func (g *GroupCommit[T]) Submit(ctx context.Context, v T) error {
	it := groupItem[T]{v: v, err: make(chan error, 1)}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return store.ErrStoreClosed
	}
	g.queue = append(g.queue, it)
	select { // under mu: Close closes wake under mu
	case g.wake <- struct{}{}:
	default: // a wake-up is pending: the committer will find it
	}
	g.mu.Unlock()
	select {
	case err := <-it.err:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *GroupCommit[T]) run() {
	defer close(g.done)
	last := 0          // the last group's size
	for range g.wake { // ends at Close, after the last queued items
		for {
			if g.linger > 0 && last > 1 {
				g.gather(last)
			}
			g.mu.Lock()
			batch := g.queue
			g.queue = nil
			g.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			last = len(batch)
			g.commitGroup(batch)
		}
	}
}

// gather waits, up to g.linger, until want items are queued; not when
// none is (the next Submit wakes the committer) or after Close.
func (g *GroupCommit[T]) gather(want int) {
	start := time.Now()
	for {
		g.mu.Lock()
		n, closed := len(g.queue), g.closed
		g.mu.Unlock()
		if n == 0 || n >= want || closed || time.Since(start) >= g.linger {
			return
		}
		runtime.Gosched()
	}
}

func (g *GroupCommit[T]) commitGroup(batch []groupItem[T]) {
	vs := make([]T, len(batch))
	for i := range batch {
		vs[i] = batch[i].v
	}
	err := g.commit(vs)
	if err == nil || len(batch) == 1 {
		for _, it := range batch {
			it.err <- err
		}
		return
	}
	for _, it := range batch {
		g.commitGroup([]groupItem[T]{it})
	}
}

// Close commits what is queued, then stops the goroutine. Idempotent.
func (g *GroupCommit[T]) Close() {
	g.mu.Lock()
	if !g.closed {
		g.closed = true
		close(g.wake)
	}
	g.mu.Unlock()
	<-g.done
}
