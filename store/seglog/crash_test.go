package seglog_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store"
	"github.com/echopubsub/echopubsub/store/seglog"
	"github.com/echopubsub/echopubsub/store/storetest"
	"github.com/echopubsub/echopubsub/test"
)

func openStore(path string) (echopubsub.Store, error) { return seglog.Open(path) }

func init() {
	storetest.RunKillChild(openStore)
	storetest.RunRestartChild(openStore)
}

// TestFullClusterRestartProcessByProcessWritesNoGapRow: storetest's
// FullClusterRestart on a log directory per node: three node processes
// stopped one by one with SIGTERM and started again on their logs replay
// every message and no gap row.
func TestFullClusterRestartProcessByProcessWritesNoGapRow(t *testing.T) {
	storetest.FullClusterRestart(t, openStore)
}

// TestSeglogSurvivesKill9: storetest.SurvivesKill9 on a log directory.
func TestSeglogSurvivesKill9(t *testing.T) {
	storetest.SurvivesKill9(t, filepath.Join(t.TempDir(), "log"), openStore)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

func rec(stream string, i int) echopubsub.Record {
	return echopubsub.Record{Stream: stream, Kind: echopubsub.RecordMessage, Origin: "n1",
		PayloadType: "test.Stamp", Payload: []byte(fmt.Sprintf("payload %d", i))}
}

func mustOpen(t *testing.T, dir string, opts ...seglog.Option) *seglog.Store {
	t.Helper()
	s, err := seglog.Open(dir, append([]seglog.Option{seglog.WithLogger(test.Logger(t, zerolog.WarnLevel))}, opts...)...)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	return s
}

// all reads every row of stream.
func all(t *testing.T, s echopubsub.Store, stream string) []echopubsub.Record {
	t.Helper()
	recs, _, err := s.Read(ctx(t), stream, 0, 1<<20)
	if err != nil {
		t.Fatalf("read %q: %v", stream, err)
	}
	return recs
}

func segment(t *testing.T, dir string, n int) string {
	t.Helper()
	p := filepath.Join(dir, fmt.Sprintf("%08d.seg", n))
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func copyDir(t *testing.T, from string) string {
	t.Helper()
	to := filepath.Join(t.TempDir(), "copy")
	if err := os.CopyFS(to, os.DirFS(from)); err != nil {
		t.Fatal(err)
	}
	return to
}

// TestSeglogTornTail: the last call's frame cut at every byte (a write the
// crash cut short) is gone after Open, whole (all or nothing), the calls
// before it all there, and the log goes on from there.
func TestSeglogTornTail(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	s := mustOpen(t, dir)
	for i := 1; i <= 3; i++ {
		if err := s.Append(ctx(t), []echopubsub.Record{rec("a", i)}); err != nil {
			t.Fatal(err)
		}
	}
	seg := segment(t, dir, 1)
	st, _ := os.Stat(seg)
	before := st.Size()
	if err := s.Append(ctx(t), []echopubsub.Record{rec("a", 4), rec("b", 1), rec("a", 5)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	st, _ = os.Stat(seg)
	after := st.Size()
	for cut := before; cut < after; cut++ {
		d := copyDir(t, dir)
		if err := os.Truncate(segment(t, d, 1), cut); err != nil {
			t.Fatal(err)
		}
		s := mustOpen(t, d)
		if a, b := all(t, s, "a"), all(t, s, "b"); len(a) != 3 || len(b) != 0 {
			t.Fatalf("cut at %d of %d..%d: a %d rows, b %d rows; want 3 and 0", cut, before, after, len(a), len(b))
		}
		more := []echopubsub.Record{rec("a", 9)}
		if err := s.Append(ctx(t), more); err != nil || more[0].Cursor != 4 {
			t.Fatalf("cut at %d: append after recovery: cursor %d, %v", cut, more[0].Cursor, err)
		}
		_ = s.Close()
		s = mustOpen(t, d)
		if a := all(t, s, "a"); len(a) != 4 || !bytes.Equal(a[3].Payload, rec("a", 9).Payload) {
			t.Fatalf("cut at %d: after reopen %d rows", cut, len(a))
		}
		_ = s.Close()
	}
	// Garbage after the last whole frame, and a flipped byte in it: cut.
	for name, hurt := range map[string]func([]byte) []byte{
		"garbage":     func(b []byte) []byte { return append(b, 0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9) },
		"flipped":     func(b []byte) []byte { b[len(b)-3] ^= 0x40; return b },
		"zero-filled": func(b []byte) []byte { return append(b, make([]byte, 4096)...) },
	} {
		d := copyDir(t, dir)
		p := segment(t, d, 1)
		b, _ := os.ReadFile(p)
		if err := os.WriteFile(p, hurt(b), 0o600); err != nil {
			t.Fatal(err)
		}
		s := mustOpen(t, d)
		want := 5
		if name == "flipped" {
			want = 3
		}
		if a := all(t, s, "a"); len(a) != want {
			t.Fatalf("%s: %d rows of a, want %d", name, len(a), want)
		}
		_ = s.Close()
	}
}

// TestSeglogCorruptionIsAnError: a bad frame that is not the last
// segment's tail is an error naming the file and the offset (Open never
// skips acknowledged rows), and never a panic.
func TestSeglogCorruptionIsAnError(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "log")
	s := mustOpen(t, dir, seglog.WithSegmentSize(seglog.MinSegmentSize))
	for i := 1; i <= 200; i++ {
		if err := s.Append(ctx(t), []echopubsub.Record{rec("a", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = mustOpen(t, dir)
	if a := all(t, s, "a"); len(a) != 200 || a[199].Cursor != 200 {
		t.Fatalf("across segments: %d rows", len(a))
	}
	_ = s.Close()
	segment(t, dir, 3) // it rotated
	for name, hurt := range map[string]func(p string) error{
		"flipped": func(p string) error {
			b, _ := os.ReadFile(p)
			b[100] ^= 1
			return os.WriteFile(p, b, 0o600)
		},
		"truncated": func(p string) error { return os.Truncate(p, 1000) },
		"header":    func(p string) error { return os.WriteFile(p, []byte("not a segment at all"), 0o600) },
	} {
		d := copyDir(t, dir)
		p := segment(t, d, 1)
		if err := hurt(p); err != nil {
			t.Fatal(err)
		}
		_, err := seglog.Open(d)
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Fatalf("%s segment 1: Open error %v, want one naming %s", name, err, p)
		}
		if name != "header" && !strings.Contains(err.Error(), "offset") {
			t.Fatalf("%s: error %v names no offset", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	d := copyDir(t, dir)
	if err := os.Remove(segment(t, d, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := seglog.Open(d); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("segment 2 removed: Open error %v", err)
	}
}

// FuzzSeglogOpen: whatever the last segment holds, Open does not panic,
// damage (ErrDamaged) is repaired by WithRepair, and what it opens reads
// back.
func FuzzSeglogOpen(f *testing.F) {
	dir := f.TempDir()
	s, err := seglog.Open(dir)
	if err != nil {
		f.Fatal(err)
	}
	_ = s.Append(context.Background(), []echopubsub.Record{rec("a", 1), rec("b", 2)})
	_ = s.AppendAt(context.Background(), []echopubsub.Record{rec("a", 3)}, store.ProducerPosition{Node: "n2", Incarnation: 1, Next: 4})
	seed, _ := os.ReadFile(filepath.Join(dir, "00000001.seg"))
	_, _ = s.Trim(context.Background(), echopubsub.Retention{MaxRows: 1}) // a snapshot frame
	_ = s.Close()
	trimmed, _ := os.ReadFile(filepath.Join(dir, "00000001.seg"))
	f.Add(seed)
	f.Add(trimmed)
	f.Add(seed[:len(seed)-1])
	f.Add([]byte("EPSLOG\x00\x01\x05\x00\x00\x00\x00\x00\x00\x00\x01\x02"))
	f.Fuzz(func(t *testing.T, b []byte) {
		d := t.TempDir()
		if err := os.WriteFile(filepath.Join(d, "00000001.seg"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := seglog.Open(d, seglog.WithLogger(zerolog.Nop()))
		if errors.Is(err, seglog.ErrDamaged) { // a repair opens it
			s, err = seglog.Open(d, seglog.WithLogger(zerolog.Nop()), seglog.WithRepair(true))
			if err != nil {
				t.Fatalf("damaged, then repair: %v", err)
			}
		}
		if err != nil {
			return
		}
		defer s.Close()
		for _, st := range []string{"a", "b"} {
			if _, _, err := s.Read(context.Background(), st, 0, 100); err != nil {
				t.Fatalf("read %q: %v", st, err)
			}
		}
	})
}
