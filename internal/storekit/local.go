package storekit

import (
	"context"
	"errors"
	"fmt"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/internal/core"
)

// LocalAppend is one call of a node-local store (core.LocalStore):
// Append, AppendAt or MarkGap, committed all or nothing.
type LocalAppend struct {
	Recs []echopubsub.Record
	Gap  *echopubsub.Record     // MarkGap: appended to every stream
	Pos  *core.ProducerPosition // AppendAt, MarkGap: recorded
}

// Synced reports whether a must be on disk before it is acknowledged:
// rows are; a position alone is not (see core.LocalStore).
func (a *LocalAppend) Synced() bool { return len(a.Recs) > 0 || a.Gap != nil }

// SubmitLocal validates recs, hands a copy of them (with gap and pos) to
// g and, once committed, sets each one's Cursor. what names the store in
// its errors ("bolt append").
func SubmitLocal(ctx context.Context, g *GroupCommit[*LocalAppend], what string, recs []echopubsub.Record, gap *echopubsub.Record, pos *core.ProducerPosition) error {
	for i := range recs {
		if err := ValidateRecord(&recs[i]); err != nil {
			return err
		}
	}
	Stamp(recs)
	if gap != nil {
		g := []echopubsub.Record{*gap}
		Stamp(g)
		gap = &g[0]
	}
	// The committer works on its own copy: a caller that gave up (ctx)
	// must not see its records written to later.
	a := &LocalAppend{Recs: append([]echopubsub.Record(nil), recs...), Gap: gap, Pos: pos}
	if err := g.Submit(ctx, a); err != nil {
		if errors.Is(err, echopubsub.ErrStoreClosed) {
			return err
		}
		return fmt.Errorf("echopubsub: %s: %w", what, err)
	}
	for i := range recs {
		recs[i].Cursor = a.Recs[i].Cursor
	}
	return nil
}
