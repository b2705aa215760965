package bolt

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"testing"

	bbolt "go.etcd.io/bbolt"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/storetest"
)

// encodeV1 is a record as format 1 wrote it (before append times).
func encodeV1(r *echopubsub.Record) []byte {
	b := []byte{boltFormatV1, byte(r.Kind)}
	for _, f := range [][]byte{[]byte(r.Origin), []byte(r.PayloadType), r.Payload, []byte(r.Reason)} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	return binary.AppendUvarint(b, r.Missed)
}

// TestFormat1RowsReadAndTrim: a file written before rows carried their
// append time is read (the zero Time), keeps its cursors, and MaxAge
// removes its rows only together with a later timed row that is too old:
// never on their own (their age is unknown).
func TestFormat1RowsReadAndTrim(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	old := echopubsub.Record{Kind: echopubsub.RecordMessage, Origin: "node-a:1", PayloadType: "test.Stamp", Payload: []byte("old \x00")}
	if err := s.db.Update(func(tx *bbolt.Tx) error {
		for _, name := range []string{"legacy", "mixed"} {
			b, err := tx.Bucket(bucketStreams).CreateBucket([]byte(name))
			if err != nil {
				return err
			}
			for i := 0; i < 3; i++ {
				c, _ := b.NextSequence()
				if err := b.Put(cursorKey(c), encodeV1(&old)); err != nil {
					return err
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	storetest.UntimedRows(t, s, old)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	if recs, next, err := s.Read(ctx, "mixed", 1, 10); err != nil || len(recs) != 1 || recs[0].Cursor != 5 || next != 6 {
		t.Fatalf("mixed after trim and reopen: %+v next %d err %v", recs, next, err)
	}
	if recs, _, err := s.Read(ctx, "legacy", 1, 10); err != nil || len(recs) != 3 {
		t.Fatalf("legacy after trim: %+v err %v", recs, err)
	}
}
