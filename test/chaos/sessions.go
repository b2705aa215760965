package chaos

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// Sessions in the record. A node that runs sessions on a durable stream
// (test/e2e's session soak) appends, besides its publishes (B lines), what
// each session's owner receives and what it commits, to the same record:
//
//	o <sid> <owner> <session id> <from> <unix ns>   owner opened a session, WithFrom(from)
//	e <sid> <cursor> <publisher> <seq> <replayed 0|1>   an envelope (a durable delivery)
//	g <sid> <cursor> <missed>                       a *StreamGap for the gap row at cursor
//	t <sid> <from> <first kept>                     a *StreamTruncated
//	c <sid> <reason>                                *messages.SessionClosed
//	k <sid> <cursor>                                the owner committed every row through cursor
//	                                                (written before it acks them)
//	x <sid> <go type>                               any other notice (CursorExpired,
//	                                                BackPressure, SessionPressure)
//
// An owner is a logical consumer: it commits the cursor of what it
// processed (k, before it acks) and, when its session is lost (its node
// was killed), opens a new one with WithFrom(committed + 1).

// SessionOpened records that owner opened session id (sid in this file)
// with WithFrom(from).
func (r *Recorder) SessionOpened(sid int, owner, id string, from uint64, at int64) {
	r.line(fmt.Sprintf("o %d %s %s %d %d\n", sid, owner, id, from, at))
}

// Envelope records a durable delivery to session sid.
func (r *Recorder) Envelope(sid int, cursor uint64, publisher string, seq uint64, replayed bool) {
	rep := 0
	if replayed {
		rep = 1
	}
	r.line(fmt.Sprintf("e %d %d %s %d %d\n", sid, cursor, publisher, seq, rep))
}

// StreamGap records a *StreamGap notice to session sid.
func (r *Recorder) StreamGap(sid int, cursor, missed uint64) {
	r.line(fmt.Sprintf("g %d %d %d\n", sid, cursor, missed))
}

// StreamTruncated records a *StreamTruncated notice to session sid.
func (r *Recorder) StreamTruncated(sid int, from, firstKept uint64) {
	r.line(fmt.Sprintf("t %d %d %d\n", sid, from, firstKept))
}

// SessionClosed records a *messages.SessionClosed to session sid.
func (r *Recorder) SessionClosed(sid int, reason string) {
	r.line(fmt.Sprintf("c %d %s\n", sid, strings.ReplaceAll(reason, " ", "_")))
}

// Committed records that session sid's owner committed every row through
// cursor (before it acks them).
func (r *Recorder) Committed(sid int, cursor uint64) {
	r.line(fmt.Sprintf("k %d %d\n", sid, cursor))
}

// SessionNotice records any other message to session sid's owner.
func (r *Recorder) SessionNotice(sid int, msg interface{}) {
	r.line(fmt.Sprintf("x %d %T\n", sid, msg))
}

func (r *Recorder) line(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf, s...)
	r.write()
}

// StoreRow is one row of a durable stream as its store holds it after the
// run: the truth the sessions are checked against.
type StoreRow struct {
	Cursor uint64
	Gap    bool
	Origin string // the producer node (a gap: whose messages are missing)
	Reason string // a gap: why
	// A message row: the stamp it carries.
	Publisher string
	Seq       uint64
	// With retention on, the truth is the rows the store held at any time
	// (test/e2e's session soak copies them as they appear): Trimmed marks a
	// row the store no longer held at the end, Unknown a cursor no copy
	// caught before it was trimmed (its row cannot be judged, only its
	// place in the order).
	Trimmed bool `json:",omitempty"`
	Unknown bool `json:",omitempty"`
}

// SessionFile is one process's record with the store its sessions read
// (a node-local store: the node's; a shared store: the same name for all).
type SessionFile struct {
	RecordFile
	Store string
}

// SessionCheck is the session soak's verdict (CheckSessions).
type SessionCheck struct {
	Sessions int   // sessions opened
	Resumed  int   // of them, opened WithFrom(committed + 1) after the owner's previous session died
	Owners   int   // logical consumers
	Messages int64 // broadcasts recorded (the highest seq per publisher, summed)
	// Store rows (all stores) beyond the recorded broadcasts, not judged:
	// StoreRepeats hold a stamp an earlier row of the same store holds (a
	// broadcast that failed after its append, retried with the same
	// number); Unrecorded a number above its publisher's last recorded one
	// (a node killed between the append and its record line).
	StoreRepeats, Unrecorded int64
	Rows                     int64 // store rows every session had to receive (from its cursor on), each counted once per session
	// Envelopes received, all sessions, and of them Replayed (read from
	// the store by a catch-up or a hole).
	Envelopes, Replayed int64
	Commits             int64 // k lines
	// The guarantee (counted in rows): rows jumped over with no notice (mid-stream and at a
	// live session's end), rows delivered twice within a session or out
	// of cursor order, rows at or below the owner's committed cursor
	// delivered again after it resumed, envelopes whose stamp is not the
	// store's row at their cursor, a session opened below its owner's
	// committed cursor + 1 (the harness's own mistake), anything after
	// SessionClosed.
	SilentGaps, TailGaps, Reorders, RedeliveredAfterAck, WrongRows, BadResumes, AfterClose int64
	// StoreHoles: recorded broadcasts a store lacks with no gap row of
	// their node where they would have been (storeHoles): a silent gap in
	// the store itself, which no session judged against it could show.
	StoreHoles int64
	// GapRowsJumped: of the silent gaps, the gap rows passed over without
	// their StreamGap (a notice lost).
	GapRowsJumped int64
	// Notices: StreamGap (each covers its gap row), StreamTruncated,
	// SessionClosed by cause (PUBSUB_STOPPED at the end is not a cause).
	StreamGaps, Truncated, ClosedWithCause int64
	// FalseAlarms: a StreamGap for a gap row where nothing was lost (no
	// publisher of the row's origin node has a hole in its numbers in the
	// store at the row: the stored message before it and the one after it,
	// or the last one published, are consecutive), a StreamGap for a row
	// the store holds as a message, or a StreamTruncated for rows the store
	// still holds. Precautionary: a gap row for a producer restart that
	// lost nothing (the plain soak's "producer restarted" CursorExpired:
	// unknowable, not a false alarm).
	FalseAlarms, Precautionary int64
	// Unjudged: envelopes and StreamGaps at an Unknown row (a cursor the
	// truth lost to retention): their order is checked, their content not.
	Unjudged int64
	// OtherNotices by Go type (CursorExpired, BackPressure,
	// SessionPressure): the pubsub's live notices, which the store's gap
	// rows cover for a WithFrom subscription; counted, not judged.
	OtherNotices map[string]int64
	// Expired: of them, the node's CursorExpired (every session here
	// follows its stream WithFrom: told only when its store could not tell
	// it, e.g. a failing node-local store, or a notice that came before its
	// subscription was followed). Counted, not judged: the record does not
	// say whether the store held the rows then.
	Expired    int64
	Violations []string
}

// Failed reports whether the verdict breaks the guarantee.
func (s *SessionCheck) Failed() bool {
	return s.SilentGaps+s.TailGaps+s.Reorders+s.RedeliveredAfterAck+s.WrongRows+s.BadResumes+s.AfterClose+s.StoreHoles > 0
}

// Summary renders the verdict.
func (s *SessionCheck) Summary() string {
	out := fmt.Sprintf("sessions %d (%d resumed WithFrom(committed+1) after their node was killed) for %d owners; "+
		"%d store rows owed, %d envelopes (%d replayed), %d commits\n",
		s.Sessions, s.Resumed, s.Owners, s.Rows, s.Envelopes, s.Replayed, s.Commits)
	out += fmt.Sprintf("store rows beyond the recorded broadcasts: %d repeating a stamp, %d not recorded; recorded broadcasts missing from a store with no gap row: %d\n",
		s.StoreRepeats, s.Unrecorded, s.StoreHoles)
	out += fmt.Sprintf("silent gaps %d (+ tail %d; gap rows without their StreamGap %d), reorders/duplicates %d, redelivered after ack %d, wrong rows %d, "+
		"bad resumes %d, after close %d\n", s.SilentGaps, s.TailGaps, s.GapRowsJumped, s.Reorders, s.RedeliveredAfterAck, s.WrongRows,
		s.BadResumes, s.AfterClose)
	out += fmt.Sprintf("notices: StreamGap %d, StreamTruncated %d, closed with cause %d; false alarms %d, precautionary %d, unjudged (rows lost to retention before they were copied) %d; other notices %v\n",
		s.StreamGaps, s.Truncated, s.ClosedWithCause, s.FalseAlarms, s.Precautionary, s.Unjudged, s.OtherNotices)
	out += fmt.Sprintf("CursorExpired to the (WithFrom) sessions: %d (the store tells them what their node missed)\n", s.Expired)
	for i, v := range s.Violations {
		if i == 20 {
			out += fmt.Sprintf("... %d more\n", len(s.Violations)-20)
			break
		}
		out += "  " + v + "\n"
	}
	return out
}

func (s *SessionCheck) violate(format string, args ...interface{}) {
	if len(s.Violations) < 1000 {
		s.Violations = append(s.Violations, fmt.Sprintf(format, args...))
	}
}

// sessionRun is one session as its record tells it.
type sessionRun struct {
	owner, id, store, file string
	from                   uint64
	at                     int64
	dead                   bool // its process was killed, or its owner opened a later session: no tail rule
	events                 [][]string
}

// CheckSessions checks every session of the records against the stores'
// rows (stores: store name -> its rows of the stream, in cursor order).
// Per session, from its WithFrom cursor on, every row of its store must
// arrive in cursor order, as an envelope carrying that row's stamp (a
// message row) or a StreamGap (a gap row), or be covered by a
// StreamTruncated; a session alive at the end must have reached its
// store's end (the tail rule: only an owner's last session, in a process
// not killed). Per owner, a session opened after another must start at
// the cursor after the last one committed, and nothing at or below it
// may arrive again. False alarms are counted (see SessionCheck).
func CheckSessions(files []SessionFile, stores map[string][]StoreRow) (*SessionCheck, error) {
	res := &SessionCheck{OtherNotices: map[string]int64{}}
	// Published: per publisher, its node address and its highest seq.
	pubNode := map[string]string{}
	pubLast := map[string]uint64{}
	var runs []*sessionRun
	for _, f := range files {
		nodes := map[string]string{}
		pubs := map[string]string{}
		bySid := map[string]*sessionRun{}
		err := scan(f.Path, nil, func(fl [][]byte) error {
			a := make([]string, len(fl))
			for i, b := range fl {
				a[i] = string(b)
			}
			switch a[0] {
			case "n":
				nodes[a[1]] = a[2]
			case "p":
				pubs[a[1]] = a[2]
				if node, ok := nodes[a[3]]; ok {
					pubNode[a[2]] = node
				}
			case "B":
				seq, _ := strconv.ParseUint(a[2], 10, 64)
				if name := pubs[a[1]]; seq > pubLast[name] {
					pubLast[name] = seq
				}
			case "o":
				from, _ := strconv.ParseUint(a[4], 10, 64)
				at, _ := strconv.ParseInt(a[5], 10, 64)
				r := &sessionRun{owner: a[2], id: a[3], store: f.Store, file: f.Path, from: max(from, 1), at: at, dead: f.Dead}
				bySid[a[1]] = r
				runs = append(runs, r)
			case "e", "g", "t", "c", "k", "x":
				r := bySid[a[1]]
				if r == nil {
					return fmt.Errorf("session %s used before its o line", a[1])
				}
				r.events = append(r.events, a)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	// Whether each gap row stands for a real loss (gapReal).
	real := gapJudge{pubNode: pubNode, pubLast: pubLast, stores: map[string]map[string][]pubRow{}}
	for name, rows := range stores {
		byPub := map[string][]pubRow{}
		held := map[[2]interface{}]bool{}
		for _, r := range rows {
			if !r.Gap && !r.Unknown {
				byPub[r.Publisher] = append(byPub[r.Publisher], pubRow{r.Cursor, r.Seq})
				if key := [2]interface{}{r.Publisher, r.Seq}; held[key] {
					res.StoreRepeats++
				} else {
					held[key] = true
				}
				if r.Seq > pubLast[r.Publisher] {
					res.Unrecorded++
				}
			}
		}
		real.stores[name] = byPub
		storeHoles(res, name, rows, byPub, pubNode, pubLast)
	}
	// Sessions of one owner in the order they were opened.
	sort.SliceStable(runs, func(i, j int) bool { return runs[i].at < runs[j].at })
	last := map[string]*sessionRun{}
	for _, r := range runs {
		if prev := last[r.owner]; prev != nil {
			prev.dead = true // superseded: its owner went on elsewhere
		}
		last[r.owner] = r
	}
	owners := map[string]uint64{} // owner -> committed cursor so far
	seen := map[string]bool{}
	for _, r := range runs {
		res.Sessions++
		if seen[r.owner] {
			res.Resumed++
			if c := owners[r.owner]; r.from != c+1 {
				res.BadResumes++
				res.violate("%s: session %s opened WithFrom(%d), the owner had committed %d", r.owner, r.id, r.from, c)
			}
		}
		seen[r.owner] = true
		rows := stores[r.store]
		if rows == nil && len(r.events) > 0 {
			return nil, fmt.Errorf("session %s of %s: no rows for store %q", r.id, r.owner, r.store)
		}
		checkSession(res, r, rows, owners[r.owner], &real)
		for _, ev := range r.events {
			if ev[0] == "k" {
				c, _ := strconv.ParseUint(ev[2], 10, 64)
				owners[r.owner] = max(owners[r.owner], c)
			}
		}
	}
	res.Owners = len(seen)
	for _, l := range pubLast {
		res.Messages += int64(l)
	}
	return res, nil
}

// storeHoles checks that a store holds every recorded broadcast: per
// publisher, its numbers rise with the store's cursors, and a number
// missing (mid-stream, before its first row or after its last) must have a
// gap row of the publisher's node (or an Unknown row) where it would have
// been. A session judged against a store that silently lacks a message
// would never be missing it: this is the store's own silent gap.
func storeHoles(res *SessionCheck, store string, rows []StoreRow, byPub map[string][]pubRow, pubNode map[string]string, pubLast map[string]uint64) {
	// covered reports whether a gap row of origin (or an Unknown row) lies
	// at a cursor in (from, to).
	covered := func(origin string, from, to uint64) bool {
		for c := from + 1; c < to; c++ {
			if r, ok := rowAt(rows, c); ok && (r.Unknown || r.Gap && r.Origin == origin) {
				return true
			}
		}
		return false
	}
	end := uint64(1)
	if len(rows) > 0 {
		end = rows[len(rows)-1].Cursor + 1
	}
	pubs := make([]string, 0, len(pubLast))
	for pub := range pubLast {
		pubs = append(pubs, pub)
	}
	sort.Strings(pubs)
	for _, pub := range pubs {
		origin := pubNode[pub]
		var seq, cursor uint64 // the publisher's last row so far
		check := func(next, at uint64) {
			if next > seq+1 && !covered(origin, cursor, at) {
				res.StoreHoles += int64(next - seq - 1)
				res.violate("store %s: %s's messages %d to %d are missing between cursors %d and %d, and no gap row of %s says so",
					store, pub, seq+1, next-1, cursor, at, origin)
			}
		}
		for _, r := range byPub[pub] {
			check(r.seq, r.cursor)
			if r.seq > seq {
				seq, cursor = r.seq, r.cursor
			}
		}
		check(pubLast[pub]+1, end)
	}
}

// rowAt returns the row with cursor c (rows are contiguous from their
// first cursor).
func rowAt(rows []StoreRow, c uint64) (StoreRow, bool) {
	if len(rows) == 0 || c < rows[0].Cursor {
		return StoreRow{}, false
	}
	i := c - rows[0].Cursor
	if i >= uint64(len(rows)) || rows[i].Cursor != c {
		return StoreRow{}, false
	}
	return rows[i], true
}

func checkSession(res *SessionCheck, r *sessionRun, rows []StoreRow, committed uint64, real *gapJudge) {
	name := r.owner + "/" + r.id
	pos := r.from // the next row owed
	closed := false
	for _, ev := range r.events {
		if closed && ev[0] != "x" && ev[0] != "k" {
			res.AfterClose++
			res.violate("%s: %v after SessionClosed", name, ev)
		}
		switch ev[0] {
		case "e":
			c, _ := strconv.ParseUint(ev[2], 10, 64)
			seq, _ := strconv.ParseUint(ev[4], 10, 64)
			res.Envelopes++
			if ev[5] == "1" {
				res.Replayed++
			}
			switch {
			case c <= committed && c < r.from:
				res.RedeliveredAfterAck++
				res.violate("%s: row %d delivered again; the owner committed %d and resumed from %d", name, c, committed, r.from)
				continue
			case c < pos:
				res.Reorders++
				res.violate("%s: row %d after row %d (out of cursor order, or twice)", name, c, pos-1)
				continue
			case c > pos:
				res.jumped(rows, pos, c, false)
				res.violate("%s: rows %d to %d never arrived, no notice (%d of them messages)", name, pos, c-1, gapRows(rows, pos, c))
			}
			row, ok := rowAt(rows, c)
			if ok && row.Unknown {
				res.Unjudged++
			} else if !ok || row.Gap || row.Publisher != ev[3] || row.Seq != seq {
				res.WrongRows++
				res.violate("%s: envelope at cursor %d carries %s/%d; the store holds %+v (found %v)", name, c, ev[3], seq, row, ok)
			}
			pos = c + 1
		case "g":
			c, _ := strconv.ParseUint(ev[2], 10, 64)
			res.StreamGaps++
			if c > pos {
				res.jumped(rows, pos, c, false)
				res.violate("%s: rows %d to %d never arrived, no notice (%d of them messages), before a StreamGap at %d",
					name, pos, c-1, gapRows(rows, pos, c), c)
			} else if c < pos {
				res.Reorders++
				res.violate("%s: StreamGap at %d after row %d", name, c, pos-1)
				continue
			}
			row, ok := rowAt(rows, c)
			switch {
			case ok && row.Unknown:
				res.Unjudged++
			case !ok || !row.Gap:
				res.FalseAlarms++
				res.violate("%s: StreamGap at %d, where the store holds %+v (found %v)", name, c, row, ok)
			case real.lost(r.store, row):
			case strings.Contains(row.Reason, "restarted"):
				res.Precautionary++ // a producer restart: whether its last writes reached this node is unknowable
			default:
				res.FalseAlarms++
				res.violate("%s: false alarm: StreamGap at %d (origin %s, %q), and the store misses nothing of that origin's around it",
					name, c, row.Origin, row.Reason)
			}
			pos = c + 1
		case "t":
			from, _ := strconv.ParseUint(ev[2], 10, 64)
			first, _ := strconv.ParseUint(ev[3], 10, 64)
			res.Truncated++
			if from != pos {
				res.Reorders++
				res.violate("%s: StreamTruncated from %d, the next row owed is %d", name, from, pos)
			}
			// Retention forgets the oldest rows first: the notice is true if
			// the last row it says was forgotten was gone by the end.
			if row, ok := rowAt(rows, max(first, from+1)-1); ok && !row.Trimmed {
				res.FalseAlarms++ // the store still holds at the end rows it said it forgot
				res.violate("%s: false alarm: StreamTruncated from %d to %d, and the store still holds row %d", name, from, first, row.Cursor)
			}
			pos = max(pos, first)
		case "c":
			closed = true
			if ev[2] != "SESSION_CLOSE_REASON_PUBSUB_STOPPED" {
				res.ClosedWithCause++
			}
		case "k":
			res.Commits++
		case "x":
			res.OtherNotices[ev[2]]++
			if ev[2] == "*messages.CursorExpired" {
				res.Expired++
			}
		}
	}
	// What the session owed: every row from its cursor to where it got
	// (and to its store's end, for a session alive at the end).
	if len(rows) > 0 {
		end := rows[len(rows)-1].Cursor + 1
		owedTo := pos
		if !r.dead && !(closed && lastIsCause(r)) {
			owedTo = end
			if pos < end {
				res.jumped(rows, pos, end, true)
				res.violate("%s: alive at the end, stopped before row %d of %d (%d of the rows it never got are messages; no notice)",
					name, pos, end-1, gapRows(rows, pos, end))
			}
		}
		if owedTo > r.from {
			res.Rows += int64(owedTo - r.from)
		}
	}
}

// lastIsCause reports whether r was closed by the library for a cause (not
// the run's final stop).
func lastIsCause(r *sessionRun) bool {
	for i := len(r.events) - 1; i >= 0; i-- {
		if r.events[i][0] == "c" {
			return r.events[i][2] != "SESSION_CLOSE_REASON_PUBSUB_STOPPED"
		}
	}
	return false
}

// pubRow is one stored message of a publisher: its cursor and number.
type pubRow struct{ cursor, seq uint64 }

// gapJudge tells whether a gap row stands for a real loss.
type gapJudge struct {
	pubNode map[string]string
	pubLast map[string]uint64
	stores  map[string]map[string][]pubRow // store -> publisher -> its rows, in cursor order
}

// lost reports whether some publisher of gap's origin node has a hole in
// its numbers in store at the gap row: the message stored before the row
// and the one stored after it (or, with none after, the last published)
// are not consecutive. A producer keeps its order, so a publisher's
// numbers rise with the store's cursors.
func (j *gapJudge) lost(store string, gap StoreRow) bool {
	for pub, node := range j.pubNode {
		if node != gap.Origin {
			continue
		}
		rows := j.stores[store][pub]
		i := sort.Search(len(rows), func(i int) bool { return rows[i].cursor > gap.Cursor })
		before, after := uint64(0), j.pubLast[pub]+1
		if i > 0 {
			before = rows[i-1].seq
		}
		if i < len(rows) {
			after = rows[i].seq
		}
		if after > before+1 {
			return true
		}
	}
	return false
}

// jumped counts a silent jump over the rows in [from, to).
func (s *SessionCheck) jumped(rows []StoreRow, from, to uint64, tail bool) {
	if tail {
		s.TailGaps += int64(to - from)
	} else {
		s.SilentGaps += int64(to - from)
	}
	s.GapRowsJumped += int64(to-from) - gapRows(rows, from, to)
}

// gapRows counts the rows in [from, to) that are messages (a gap row
// jumped over is a StreamGap lost: counted in GapRowsJumped).
func gapRows(rows []StoreRow, from, to uint64) int64 {
	var n int64
	for c := from; c < to; c++ {
		if row, ok := rowAt(rows, c); !ok || !row.Gap {
			n++
		}
	}
	return n
}

// Committed returns each owner's last committed cursor in one record (k
// lines; owners that committed nothing there are absent).
func Committed(path string) (map[string]uint64, error) {
	owners := map[string]string{}
	out := map[string]uint64{}
	err := scan(path, nil, func(f [][]byte) error {
		switch string(f[0]) {
		case "o":
			owners[string(f[1])] = string(f[2])
		case "k":
			c, _ := strconv.ParseUint(string(f[2]), 10, 64)
			o := owners[string(f[1])]
			out[o] = max(out[o], c)
		}
		return nil
	})
	return out, err
}
