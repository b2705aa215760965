package chaos

import (
	"path/filepath"
	"strings"
	"testing"
)

// sessionEv is one thing an owner got, for a synthetic record.
type sessionEv struct {
	kind   byte   // e envelope, g StreamGap, k commit, c closed, t StreamTruncated
	cursor uint64 // t: From
	seq    uint64 // e: the stamp's seq of publisher p; t: FirstKept
	reason string // c
}

// sessionRecord writes a record: p (node A) published 1..5, q (node X)
// published 1 (which no store holds: X's gap rows are real), and one
// session per element of sessions (owner o, opened in order).
func sessionRecord(t *testing.T, dir, name string, froms []uint64, sessions ...[]sessionEv) string {
	t.Helper()
	path := filepath.Join(dir, name)
	rec, err := CreateRecorder(path)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	for s := uint64(1); s <= 5; s++ {
		rec.Published("p", "A", 0, s, int64(s))
	}
	rec.Published("q", "X", 0, 1, 1)
	for sid, evs := range sessions {
		rec.SessionOpened(sid, "o", "id"+string(rune('a'+sid)), froms[sid], int64(100+sid))
		for _, ev := range evs {
			switch ev.kind {
			case 'e':
				rec.Envelope(sid, ev.cursor, "p", ev.seq, false)
			case 'g':
				rec.StreamGap(sid, ev.cursor, 1)
			case 'k':
				rec.Committed(sid, ev.cursor)
			case 'c':
				rec.SessionClosed(sid, ev.reason)
			case 't':
				rec.StreamTruncated(sid, ev.cursor, ev.seq)
			}
		}
	}
	if err := rec.Err(); err != nil {
		t.Fatal(err)
	}
	return path
}

func e(c, seq uint64) sessionEv { return sessionEv{kind: 'e', cursor: c, seq: seq} }
func g(c uint64) sessionEv      { return sessionEv{kind: 'g', cursor: c} }
func k(c uint64) sessionEv      { return sessionEv{kind: 'k', cursor: c} }

func tr(from, first uint64) sessionEv { return sessionEv{kind: 't', cursor: from, seq: first} }

// trimmed returns rows with the first n marked Trimmed (retention forgot
// them before the end) and the one at unknown (if > 0) Unknown.
func trimmed(rows []StoreRow, n int, unknown uint64) []StoreRow {
	r := append([]StoreRow(nil), rows...)
	for i := range r {
		r[i].Trimmed = i < n
		if r[i].Cursor == unknown {
			r[i] = StoreRow{Cursor: unknown, Unknown: true, Trimmed: true}
		}
	}
	return r
}

// TestCheckSessionsRules plants each violation the session verdict names
// into an otherwise clean record, and checks that it is counted, and only
// it. The store: 1 p/1, 2 p/2, 3 a gap row (origin X), 4 p/3, 5 p/4, 6 p/5.
func TestCheckSessionsRules(t *testing.T) {
	rows := []StoreRow{{Cursor: 1, Publisher: "p", Seq: 1, Origin: "A"}, {Cursor: 2, Publisher: "p", Seq: 2, Origin: "A"},
		{Cursor: 3, Gap: true, Origin: "X"}, {Cursor: 4, Publisher: "p", Seq: 3, Origin: "A"},
		{Cursor: 5, Publisher: "p", Seq: 4, Origin: "A"}, {Cursor: 6, Publisher: "p", Seq: 5, Origin: "A"}}
	clean := []sessionEv{e(1, 1), e(2, 2), g(3), e(4, 3), e(5, 4), e(6, 5)}
	for _, tc := range []struct {
		name     string
		froms    []uint64
		sessions [][]sessionEv
		dead     bool
		rows     []StoreRow
		want     func(c *SessionCheck) int64 // the one count that must be non-zero
	}{
		{name: "clean", froms: []uint64{1}, sessions: [][]sessionEv{clean}},
		{name: "clean resume", froms: []uint64{1, 3}, sessions: [][]sessionEv{{e(1, 1), e(2, 2), k(2)}, {g(3), e(4, 3), e(5, 4), e(6, 5)}}},
		{name: "dead session owes no tail", froms: []uint64{1}, dead: true, sessions: [][]sessionEv{{e(1, 1), e(2, 2)}}},
		{name: "row skipped", froms: []uint64{1}, sessions: [][]sessionEv{{e(1, 1), e(2, 2), g(3), e(5, 4), e(6, 5)}},
			want: func(c *SessionCheck) int64 { return c.SilentGaps }},
		{name: "gap notice lost", froms: []uint64{1}, sessions: [][]sessionEv{{e(1, 1), e(2, 2), e(4, 3), e(5, 4), e(6, 5)}},
			want: func(c *SessionCheck) int64 { return c.GapRowsJumped }},
		{name: "tail missing", froms: []uint64{1}, sessions: [][]sessionEv{{e(1, 1), e(2, 2), g(3)}},
			want: func(c *SessionCheck) int64 { return c.TailGaps }},
		{name: "twice", froms: []uint64{1}, sessions: [][]sessionEv{{e(1, 1), e(2, 2), e(2, 2), g(3), e(4, 3), e(5, 4), e(6, 5)}},
			want: func(c *SessionCheck) int64 { return c.Reorders }},
		{name: "acked row again after resume", froms: []uint64{1, 3},
			sessions: [][]sessionEv{{e(1, 1), e(2, 2), k(2)}, {e(2, 2), g(3), e(4, 3), e(5, 4), e(6, 5)}},
			want:     func(c *SessionCheck) int64 { return c.RedeliveredAfterAck }},
		{name: "resumed below the commit", froms: []uint64{1, 2},
			sessions: [][]sessionEv{{e(1, 1), e(2, 2), k(2)}, {e(2, 2), g(3), e(4, 3), e(5, 4), e(6, 5)}},
			want:     func(c *SessionCheck) int64 { return c.BadResumes }},
		{name: "wrong row", froms: []uint64{1}, sessions: [][]sessionEv{{e(1, 1), e(2, 9), g(3), e(4, 3), e(5, 4), e(6, 5)}},
			want: func(c *SessionCheck) int64 { return c.WrongRows }},
		{name: "after close", froms: []uint64{1},
			sessions: [][]sessionEv{{e(1, 1), {kind: 'c', reason: "SESSION_CLOSE_REASON_CLOSED"}, e(2, 2)}},
			want:     func(c *SessionCheck) int64 { return c.AfterClose }},
		{name: "false alarm: the gap's origin lost nothing", froms: []uint64{1}, sessions: [][]sessionEv{append(clean, g(7))},
			rows: func() []StoreRow {
				r := append([]StoreRow(nil), rows...)
				r[2].Origin = "A"                                             // every p stamp is stored
				return append(r, StoreRow{Cursor: 7, Gap: true, Origin: "X"}) // q/1, told
			}(),
			want: func(c *SessionCheck) int64 { return c.FalseAlarms }},
		{name: "precautionary: a producer restart that lost nothing", froms: []uint64{1}, sessions: [][]sessionEv{append(clean, g(7))},
			rows: func() []StoreRow {
				r := append([]StoreRow(nil), rows...)
				r[2].Origin, r[2].Reason = "A", "producer restarted"
				return append(r, StoreRow{Cursor: 7, Gap: true, Origin: "X"}) // q/1, told
			}(),
			want: func(c *SessionCheck) int64 { return c.Precautionary }},
		{name: "store hole: p/5 never stored, no gap row of A", froms: []uint64{1}, rows: rows[:5],
			sessions: [][]sessionEv{{e(1, 1), e(2, 2), g(3), e(4, 3), e(5, 4)}},
			want:     func(c *SessionCheck) int64 { return c.StoreHoles }},
		{name: "store hole told: a gap row of A where p/5 would be", froms: []uint64{1},
			rows:     append(append([]StoreRow(nil), rows[:5]...), StoreRow{Cursor: 6, Gap: true, Origin: "A"}),
			sessions: [][]sessionEv{{e(1, 1), e(2, 2), g(3), e(4, 3), e(5, 4), g(6)}}},
		{name: "truncated: rows 1 and 2 trimmed", froms: []uint64{1}, rows: trimmed(rows, 2, 0),
			sessions: [][]sessionEv{{tr(1, 3), g(3), e(4, 3), e(5, 4), e(6, 5)}}},
		{name: "unknown row: its order is checked, not its content", froms: []uint64{1}, rows: trimmed(rows, 2, 2),
			sessions: [][]sessionEv{{e(1, 1), e(2, 9), g(3), e(4, 3), e(5, 4), e(6, 5)}}},
		{name: "unknown row jumped", froms: []uint64{1}, rows: trimmed(rows, 2, 2),
			sessions: [][]sessionEv{{e(1, 1), g(3), e(4, 3), e(5, 4), e(6, 5)}},
			want:     func(c *SessionCheck) int64 { return c.SilentGaps }},
		{name: "false alarm: truncated rows still held", froms: []uint64{1},
			sessions: [][]sessionEv{{tr(1, 3), g(3), e(4, 3), e(5, 4), e(6, 5)}},
			want:     func(c *SessionCheck) int64 { return c.FalseAlarms }},
		{name: "false alarm: truncated past the first row kept", froms: []uint64{1}, rows: trimmed(rows, 2, 0),
			sessions: [][]sessionEv{{tr(1, 4), e(4, 3), e(5, 4), e(6, 5)}},
			want:     func(c *SessionCheck) int64 { return c.FalseAlarms }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := sessionRecord(t, t.TempDir(), "n0#1.rec", tc.froms, tc.sessions...)
			st := rows
			if tc.rows != nil {
				st = tc.rows
			}
			res, err := CheckSessions([]SessionFile{{RecordFile: RecordFile{Path: path, Dead: tc.dead}, Store: "n0"}},
				map[string][]StoreRow{"n0": st})
			if err != nil {
				t.Fatal(err)
			}
			got := int64(0)
			if tc.want != nil {
				got = tc.want(res)
				if got == 0 {
					t.Fatalf("not counted:\n%s", res.Summary())
				}
			}
			// Nothing else: the total of every count is the one wanted.
			all := res.SilentGaps + res.TailGaps + res.Reorders + res.RedeliveredAfterAck + res.WrongRows + res.BadResumes +
				res.AfterClose + res.FalseAlarms + res.Precautionary + res.StoreHoles
			// (a lost notice: SilentGaps, of which GapRowsJumped, the same row)
			if all != got {
				t.Fatalf("other counts too:\n%s", res.Summary())
			}
			if tc.want == nil && len(res.Violations) > 0 {
				t.Fatalf("violations in a clean record: %s", strings.Join(res.Violations, "; "))
			}
		})
	}
}
