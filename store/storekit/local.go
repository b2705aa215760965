package storekit

import (
	"context"
	"errors"
	"fmt"

	"github.com/echopubsub/echopubsub/store"
)

// LocalAppend is one call of a node-local store (store.LocalStore):
// Append, AppendAt or MarkGap, committed all or nothing.
type LocalAppend struct {
	Recs []store.Record
	Gap  *store.Record           // MarkGap: appended to every stream
	Pos  *store.ProducerPosition // AppendAt, MarkGap: recorded
}

// Local returns a itself: a store whose group commit carries more
// (store/bolt's trims) embeds LocalAppend.
func (a *LocalAppend) Local() *LocalAppend { return a }

// Local is a group commit's item that carries a LocalAppend.
type Local interface{ Local() *LocalAppend }

// Synced reports whether a must be on disk before it is acknowledged:
// rows are; a position alone is not (see store.LocalStore).
func (a *LocalAppend) Synced() bool { return len(a.Recs) > 0 || a.Gap != nil }

// SubmitLocal validates recs, stamps their Time (and gap's), puts a copy
// of them with gap and pos in v (an empty item) and hands it to g; once
// committed, it sets each one's Cursor. what names the store in its
// errors ("bolt append").
func SubmitLocal[T Local](ctx context.Context, g *GroupCommit[T], v T, what string, recs []store.Record, gap *store.Record, pos *store.ProducerPosition) error {
	for i := range recs {
		if err := ValidateRecord(&recs[i]); err != nil {
			return err
		}
	}
	Stamp(recs)
	if gap != nil {
		g := []store.Record{*gap}
		Stamp(g)
		gap = &g[0]
	}
	// The committer works on its own copy: a caller that gave up (ctx)
	// must not see its records written to later.
	a := v.Local()
	a.Recs, a.Gap, a.Pos = append([]store.Record(nil), recs...), gap, pos
	if err := g.Submit(ctx, v); err != nil {
		if errors.Is(err, store.ErrStoreClosed) {
			return err
		}
		return fmt.Errorf("echopubsub: %s: %w", what, err)
	}
	for i := range recs {
		recs[i].Cursor = a.Recs[i].Cursor
	}
	return nil
}
