// Package storekit is what this repository's Store implementations share
// (store/bolt, store/postgres) and the root package does not export:
// group commit and the record check.
package storekit

import (
	"context"
	"sync"

	"github.com/echopubsub/echopubsub"
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
}

type groupItem[T any] struct {
	v   T
	err chan error
}

// NewGroupCommit starts the committing goroutine; Close stops it.
func NewGroupCommit[T any](commit func([]T) error) *GroupCommit[T] {
	g := &GroupCommit[T]{commit: commit, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go g.run()
	return g
}

// Submit queues v and waits until its commit returned (its error), or ctx
// ended (ctx's error: the commit may still land). After Close it returns
// echopubsub.ErrStoreClosed. The caller must not touch v until Submit returned nil or
// an error of the commit; after a ctx error, v may still be read.
func (g *GroupCommit[T]) Submit(ctx context.Context, v T) error {
	it := groupItem[T]{v: v, err: make(chan error, 1)}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return echopubsub.ErrStoreClosed
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
	for range g.wake { // ends at Close, after the last queued items
		for {
			g.mu.Lock()
			batch := g.queue
			g.queue = nil
			g.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			g.commitGroup(batch)
		}
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
