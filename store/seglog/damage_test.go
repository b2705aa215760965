package seglog_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store"
	"github.com/echopubsub/echopubsub/store/seglog"
	"github.com/echopubsub/echopubsub/store/storetest"
	"github.com/echopubsub/echopubsub/test"
)

// TestSeglogReadServesNoDamagedRow: storetest.ServesNoDamagedRow on a log
// directory: a bit flipped under an open store is an error naming the
// segment and the offset, never a row.
func TestSeglogReadServesNoDamagedRow(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	s := mustOpen(t, dir)
	defer s.Close()
	storetest.ServesNoDamagedRow(t, s, func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, "*.seg"))
		return m
	})
}

// recoveryCut is the value of echopubsub.store.recovery_cut with cause
// cause, read the way an exporter would.
func recoveryCut(t *testing.T, r *sdkmetric.ManualReader, cause string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var v int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "echopubsub.store.recovery_cut" {
				for _, p := range sum.DataPoints {
					if c, _ := p.Attributes.Value("cause"); c.AsString() == cause {
						v += p.Value
					}
				}
			}
		}
	}
	return v
}

// damagedLog is a log of 300 rows of "a" (and one "b" row in ten, and
// "c" rows at 100..102 and 148..152), one call each, in one segment, and
// where row 150's payload is.
func damagedLog(t *testing.T) (dir string, mid int) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "log")
	s := mustOpen(t, dir)
	for i := 1; i <= 300; i++ {
		recs := []echopubsub.Record{rec("a", i)}
		if i%10 == 0 {
			recs = append(recs, rec("b", i))
		}
		if i >= 100 && i <= 102 || i >= 148 && i <= 152 { // c: cursors 1..3, then 4..8 where the damage goes
			recs = append(recs, rec("c", i))
		}
		if err := s.Append(ctx(t), recs); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(segment(t, dir, 1))
	return dir, bytes.Index(b, []byte("payload 150"))
}

// TestSeglogDamageInTheLastSegmentIsAnError: a bit flip, or a zeroed 4
// KiB block, in the middle of the last segment (whole frames after it:
// not what a crash leaves) is an Open error naming the file and the
// offset, and Open changes nothing.
func TestSeglogDamageInTheLastSegmentIsAnError(t *testing.T) {
	dir, mid := damagedLog(t)
	for name, hurt := range map[string]func([]byte){
		"flipped": func(b []byte) { b[mid] ^= 0x10 },
		"zeroed":  func(b []byte) { clear(b[mid-2048 : mid+2048]) },
	} {
		d := copyDir(t, dir)
		p := segment(t, d, 1)
		b, _ := os.ReadFile(p)
		hurt(b)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := seglog.Open(d)
		if !errors.Is(err, seglog.ErrDamaged) || !strings.Contains(err.Error(), p+" offset ") {
			t.Fatalf("%s: Open: %v; want ErrDamaged naming %s and the offset", name, err, p)
		}
		if after, _ := os.ReadFile(p); !bytes.Equal(after, b) {
			t.Fatalf("%s: Open changed the damaged segment", name)
		}
		t.Logf("%s: %v", name, err)
	}
}

// TestSeglogRepairTellsAndReusesNoCursor: with WithRepair, the same
// damage opens: every row before and after it reads back at its cursor,
// each row lost is a gap row at its own cursor (a reader is told), the
// next row gets a cursor past every one handed out, the cut bytes are
// kept in a .cut file, and the repair is logged and counted. A zeroed
// block leaves nothing to decode: a gap row (Missed 0: unknown) stands
// for each cursor its bytes may have held past the last one found.
func TestSeglogRepairTellsAndReusesNoCursor(t *testing.T) {
	dir, mid := damagedLog(t)
	for name, hurt := range map[string]func([]byte){
		"flipped": func(b []byte) { b[mid] ^= 0x10 },
		"zeroed":  func(b []byte) { clear(b[mid-2048 : mid+2048]) },
	} {
		d := copyDir(t, dir)
		p := segment(t, d, 1)
		b, _ := os.ReadFile(p)
		hurt(b)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		var c []echopubsub.Record
		log, logged := test.CapturingLogger(t, zerolog.WarnLevel)
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		s := mustOpen(t, d, seglog.WithRepair(true), seglog.WithLogger(log), seglog.WithMeterProvider(mp))
		lost := map[string]int{}
		for _, stream := range []string{"a", "b"} {
			rows := all(t, s, stream)
			for i, r := range rows {
				if r.Cursor != uint64(i+1) {
					t.Fatalf("%s: %s row %d has cursor %d", name, stream, i, r.Cursor)
				}
				want := i + 1
				if stream == "b" {
					want = (i + 1) * 10
				}
				switch {
				case r.Kind == echopubsub.RecordGap:
					lost[stream]++
					if !strings.Contains(r.Reason, p) {
						t.Fatalf("%s: gap row %+v does not name the file", name, r)
					}
				case !bytes.Equal(r.Payload, rec(stream, want).Payload):
					t.Fatalf("%s: %s cursor %d holds %q, want %q or a gap row", name, stream, r.Cursor, r.Payload, rec(stream, want).Payload)
				}
			}
			if len(rows) < map[string]int{"a": 300, "b": 30}[stream] {
				t.Fatalf("%s: %s has %d rows, fewer than the %d cursors handed out", name, stream, len(rows), 300)
			}
			more := []echopubsub.Record{rec(stream, 1000)}
			if err := s.Append(ctx(t), more); err != nil || more[0].Cursor != uint64(len(rows)+1) {
				t.Fatalf("%s: append after the repair: cursor %d (of %d rows), %v", name, more[0].Cursor, len(rows), err)
			}
		}
		// Flipped: the one frame it hit (row 150 of a and row 15 of b) is
		// lost; zeroed: what 4 KiB held (frames of one row of a take
		// over 50 bytes). Every other row reads back.
		if want := map[string]int{"a": 1, "b": 1}; name == "flipped" && (lost["a"] != want["a"] || lost["b"] != want["b"]) ||
			name == "zeroed" && (lost["a"] == 0 || lost["a"] > 4096/50 || lost["b"] > 4096/500+1) {
			t.Fatalf("%s: gap rows: %v", name, lost)
		}
		// c's rows 4..8 were only near the damage: zeroed, nothing after
		// says how many there were, so gap rows stand for as many as the
		// zeroed bytes could hold (Missed 0), and none of 4..8 is reused.
		c = all(t, s, "c")
		if len(c) < 8 || name == "flipped" && len(c) != 8 || !bytes.Equal(c[2].Payload, rec("c", 102).Payload) {
			t.Fatalf("%s: c has %d rows (want at least its 8)", name, len(c))
		}
		for _, r := range c[3:8] {
			if r.Kind != echopubsub.RecordGap && !bytes.Equal(r.Payload, rec("c", 144+int(r.Cursor)).Payload) {
				t.Fatalf("%s: c cursor %d holds %q", name, r.Cursor, r.Payload)
			}
		}
		cuts, _ := filepath.Glob(filepath.Join(d, "*.cut"))
		if len(cuts) != 1 {
			t.Fatalf("%s: cut files %v", name, cuts)
		}
		if n := recoveryCut(t, reader, "repair"); n <= 0 || !logged.Contains("repaired damage") {
			t.Fatalf("%s: recovery_cut{repair} %d", name, n)
		}
		_ = s.Close()
		s = mustOpen(t, d) // the repaired log opens as it is
		if a := all(t, s, "a"); a[len(a)-1].Cursor <= 300 || !bytes.Equal(a[len(a)-1].Payload, rec("a", 1000).Payload) {
			t.Fatalf("%s: after reopen: %d rows of a", name, len(a))
		}
		_ = s.Close()
		t.Logf("%s: %d of 300 rows of a and %d of 30 of b are gap rows now; c has %d rows", name, lost["a"], lost["b"], len(c))
	}
}

// TestSeglogTornUnsyncedFramesAreCut: a crash may leave the last commits
// with a hole and whole frames after it (their pages reached the disk in
// another order): frames written after the last fdatasync that returned
// (here positions alone, which no fdatasync covers) are a torn tail, cut
// off, logged and counted, not damage.
func TestSeglogTornUnsyncedFramesAreCut(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	s := mustOpen(t, dir)
	for i := 1; i <= 5; i++ {
		if err := s.Append(ctx(t), []echopubsub.Record{rec("a", i)}); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := os.Stat(segment(t, dir, 1))
	synced := st.Size()
	for i := 1; i <= 3; i++ {
		if err := s.AppendAt(ctx(t), nil, store.ProducerPosition{Node: "n2", Incarnation: 1, Next: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Close()
	p := segment(t, dir, 1)
	b, _ := os.ReadFile(p)
	b[synced+2] ^= 0xff // the first position frame's length
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	log, logged := test.CapturingLogger(t, zerolog.WarnLevel)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	s = mustOpen(t, dir, seglog.WithLogger(log), seglog.WithMeterProvider(mp))
	defer s.Close()
	if a := all(t, s, "a"); len(a) != 5 {
		t.Fatalf("%d rows", len(a))
	}
	if n := recoveryCut(t, reader, "torn_tail"); n != int64(len(b))-synced || !logged.Contains("torn tail") {
		t.Fatalf("recovery_cut{torn_tail} %d, want %d", n, int64(len(b))-synced)
	}
}

// TestSeglogRepairSealedSegment: damage in a sealed segment is an Open
// error; WithRepair keeps the log up to it, moves the segments after it
// to .cut files and appends their rows again at their cursors: the one
// row hit is a gap row, every other reads back.
func TestSeglogRepairSealedSegment(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	s := mustOpen(t, dir, seglog.WithSegmentSize(seglog.MinSegmentSize))
	for i := 1; i <= 200; i++ {
		if err := s.Append(ctx(t), []echopubsub.Record{rec("a", i)}); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Close()
	p := segment(t, dir, 1)
	b, _ := os.ReadFile(p)
	b[bytes.Index(b, []byte("payload 20"))] ^= 1
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := seglog.Open(dir); !errors.Is(err, seglog.ErrDamaged) || !strings.Contains(err.Error(), p+" offset ") {
		t.Fatalf("Open: %v", err)
	}
	s = mustOpen(t, dir, seglog.WithRepair(true))
	a := all(t, s, "a")
	if len(a) != 200 {
		t.Fatalf("%d rows after the repair, want 200", len(a))
	}
	for i, r := range a {
		if i+1 == 20 {
			if r.Kind != echopubsub.RecordGap || r.Missed != 1 {
				t.Fatalf("cursor 20: %+v, want a gap row", r)
			}
		} else if !bytes.Equal(r.Payload, rec("a", i+1).Payload) {
			t.Fatalf("cursor %d: %q", r.Cursor, r.Payload)
		}
	}
	more := []echopubsub.Record{rec("a", 201)}
	if err := s.Append(ctx(t), more); err != nil || more[0].Cursor != 201 {
		t.Fatalf("append: cursor %d, %v", more[0].Cursor, err)
	}
	_ = s.Close()
	if cuts, _ := filepath.Glob(filepath.Join(dir, "*.cut")); len(cuts) < 2 {
		t.Fatalf(".cut files: %v", cuts)
	}
	s = mustOpen(t, dir)
	defer s.Close()
	if a := all(t, s, "a"); len(a) != 201 {
		t.Fatalf("after reopen: %d rows", len(a))
	}
}

// TestSeglogTornBeforeASnapshotIsCut: a trim's snapshot frame records,
// as a row frame does, what was fdatasynced when it was written: a torn
// frame before it (positions alone, not synced) with the snapshot whole
// after it (its fdatasync had not returned) is a torn tail, not damage.
func TestSeglogTornBeforeASnapshotIsCut(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	s := mustOpen(t, dir)
	for i := 1; i <= 5; i++ {
		if err := s.Append(ctx(t), []echopubsub.Record{rec("a", i)}); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := os.Stat(segment(t, dir, 1))
	synced := st.Size()
	if err := s.AppendAt(ctx(t), nil, store.ProducerPosition{Node: "n2", Incarnation: 1, Next: 9}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Trim(ctx(t), echopubsub.Retention{MaxRows: 2}); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	p := segment(t, dir, 1)
	b, _ := os.ReadFile(p)
	b[synced+5] ^= 0xff // the position frame's checksum
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, dir)
	defer s.Close()
	if a := all(t, s, "a"); len(a) != 5 {
		t.Fatalf("%d rows of a, want the 5 (the trim's snapshot was cut with the torn tail)", len(a))
	}
}

// TestSeglogRepairTrustsNoNameFromADamagedFrame: a damaged frame is read
// for its rows' cursors only when they go on from the log before it: a
// flipped stream name (here "a" read as "c") makes no stream "c" with gap
// rows, and "a" loses exactly the row hit.
func TestSeglogRepairTrustsNoNameFromADamagedFrame(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	s := mustOpen(t, dir)
	for i := 1; i <= 10; i++ {
		if err := s.Append(ctx(t), []echopubsub.Record{rec("a", i)}); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Close()
	p := segment(t, dir, 1)
	b, _ := os.ReadFile(p)
	name := bytes.Index(b, []byte("payload 5")) - 28 // the row's stream name: see frame.go and storekit.AppendRecord
	if b[name] != 'a' {
		t.Fatalf("byte %d is %q, not the stream name", name, b[name])
	}
	b[name] = 'c'
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, dir, seglog.WithRepair(true))
	defer s.Close()
	if c, next, err := s.Read(ctx(t), "c", 1, 100); err != nil || len(c) != 0 || next != 1 {
		t.Fatalf("stream c: %d rows, next %d, %v; want none", len(c), next, err)
	}
	a := all(t, s, "a")
	if len(a) != 10 || a[4].Kind != echopubsub.RecordGap || !bytes.Equal(a[5].Payload, rec("a", 6).Payload) {
		t.Fatalf("a: %d rows, row 5 %+v", len(a), a[4])
	}
}
