package stream

import (
	"testing"
	"time"
)

// TestOwedByEarlier: a node is owed what an earlier incarnation wrote when
// it started before that incarnation's last possible write: the end of its
// lease, or the new incarnation's birth if sooner (the earlier one had
// ended by then). Never with no earlier lease, or one that never wrote.
func TestOwedByEarlier(t *testing.T) {
	base := time.Now()
	at := func(d time.Duration) int64 { return base.Add(d).UnixNano() - epoch.UnixNano() } // a node's start, as pe.since
	born := uint64(base.Add(10 * time.Second).UnixNano())                                  // the new incarnation
	for _, c := range []struct {
		name         string
		earlierInc   uint64
		earlierUntil time.Time
		nodeStart    time.Duration
		want         bool
	}{
		{"no earlier lease", 0, base.Add(5 * time.Second), 0, false},
		{"earlier never wrote", 7, time.Time{}, 0, false},
		{"node started before the lease ended", 7, base.Add(5 * time.Second), 4 * time.Second, true},
		{"node started after the lease ended", 7, base.Add(5 * time.Second), 6 * time.Second, false},
		{"lease past the new birth: the birth bounds it", 7, base.Add(20 * time.Second), 11 * time.Second, false},
		{"lease past the new birth, node before it", 7, base.Add(20 * time.Second), 9 * time.Second, true},
		{"the lease is this incarnation's own", born, base.Add(20 * time.Second), 0, false},
	} {
		l := lease{on: true, earlierInc: c.earlierInc, earlierUntil: c.earlierUntil}
		if got := l.owedByEarlier(at(c.nodeStart), born); got != c.want {
			t.Errorf("%s: owed %v, want %v", c.name, got, c.want)
		}
	}
}
