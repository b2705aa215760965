package storekit

import (
	"time"

	"github.com/echopubsub/echopubsub/store"
)

// Stamp sets the Time of each record that has none: now, in UTC, to the
// microsecond (what PostgreSQL's timestamptz keeps, so that every store
// reads back the same Time). Append calls it before it stores recs.
func Stamp(recs []store.Record) {
	now := time.Now().UTC().Truncate(time.Microsecond)
	for i := range recs {
		if recs[i].Time.IsZero() {
			recs[i].Time = now
		}
	}
}
