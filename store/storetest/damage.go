package storetest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/echopubsub/echopubsub"
)

// ServesNoDamagedRow checks that s never serves a row whose bytes on disk
// changed after it was written (a bit flip the storage did not report):
// it appends rows to stream "damage", then flips, one at a time, each
// bit of each row's encoded record in the files (files lists them: s
// keeps them open) and reads the stream. Every read must fail with an
// error naming the file (and where in it) or, for storage that reads
// rows from a copy of its own, return exactly the rows written; a row
// that differs is a failure. It reports how many flips were refused.
// The record layout is storekit.AppendRecord's: s writes it byte for byte
// (origin, payload type and payload below 128 bytes).
func ServesNoDamagedRow(t *testing.T, s echopubsub.Store, files func() []string) {
	t.Helper()
	c := context.Background()
	var want []echopubsub.Record
	for i := 0; i < 4; i++ {
		r := echopubsub.Record{Stream: "damage", Kind: echopubsub.RecordMessage, Origin: "node-a:1", PayloadType: "test.Stamp",
			Payload: []byte(fmt.Sprintf("damage-row-%02d-payload", i)), Reason: ""}
		want = append(want, r)
	}
	if err := s.Append(c, want); err != nil {
		t.Fatal(err)
	}
	flips, refused := 0, 0
	for i, w := range want {
		path, at := findIn(t, files(), w.Payload)
		// The record: format, kind, 8 bytes of time, then the lengths and
		// fields, missed, 4 bytes of checksum.
		start := at - 1 - len(w.PayloadType) - 1 - len(w.Origin) - 1 - 8 - 2
		end := at + len(w.Payload) + 1 + len(w.Reason) + 1 + 4
		for off := start; off < end; off++ {
			for bit := 0; bit < 8; bit++ {
				flip(t, path, off, bit)
				recs, _, err := s.Read(c, "damage", 1, 10)
				flip(t, path, off, bit)
				flips++
				if err != nil {
					if !strings.Contains(err.Error(), path) {
						t.Fatalf("row %d, bit %d of byte %d flipped: the error does not name the file %s: %v", i, bit, off, path, err)
					}
					refused++
					continue
				}
				if len(recs) != len(want) {
					t.Fatalf("row %d, bit %d of byte %d flipped: %d rows read, want %d or an error", i, bit, off, len(recs), len(want))
				}
				for j, r := range recs {
					if !sameRow(r, want[j]) {
						t.Fatalf("row %d, bit %d of byte %d flipped: row %d served damaged: %+v, want %+v", i, bit, off, j, r, want[j])
					}
				}
			}
		}
	}
	t.Logf("%T: %d single-bit flips in the records on disk, %d refused with an error naming the file, 0 served", s, flips, refused)
}

func sameRow(a, b echopubsub.Record) bool {
	return a.Kind == b.Kind && a.Origin == b.Origin && a.PayloadType == b.PayloadType && bytes.Equal(a.Payload, b.Payload) &&
		a.Reason == b.Reason && a.Missed == b.Missed
}

// findIn is the file among paths holding b, once, and where.
func findIn(t *testing.T, paths []string, b []byte) (string, int) {
	t.Helper()
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(data, b); i >= 0 {
			if bytes.LastIndex(data, b) != i {
				t.Fatalf("%q is in %s more than once", b, p)
			}
			return p, i
		}
	}
	t.Fatalf("%q is in none of %v", b, paths)
	return "", 0
}

// flip inverts one bit of the file at path, as the disk under it would.
func flip(t *testing.T, path string, off, bit int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, int64(off)); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 1 << bit
	if _, err := f.WriteAt(b, int64(off)); err != nil {
		t.Fatal(err)
	}
}
