package bolt

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/storekit"
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

// encodeV2 is a record as format 2 wrote it (before checksums): format
// 3 without its last 4 bytes, and its first byte 2.
func encodeV2(r *echopubsub.Record) []byte {
	b := storekit.AppendRecord(nil, r)
	b[0] = boltFormatV2
	return b[:len(b)-4]
}

// TestFormat1RowsReadAndTrim: a file written before rows carried their
// append time is read (the zero Time), keeps its cursors, and MaxAge
// removes its rows only together with a later timed row that is too old:
// never on their own (their age is unknown). Its rows (and format 2's,
// before checksums) are rewritten with a checksum at Open (upgrade):
// after that, a row of an earlier format is damage.
func TestFormat1RowsReadAndTrim(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	old := echopubsub.Record{Kind: echopubsub.RecordMessage, Origin: "node-a:1", PayloadType: "test.Stamp", Payload: []byte("old \x00")}
	timed := old
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
		timed.Time = time.Now().Add(-time.Minute).UTC()
		b, err := tx.Bucket(bucketStreams).CreateBucket([]byte("v2"))
		if err != nil {
			return err
		}
		c, _ := b.NextSequence()
		if err := b.Put(cursorKey(c), encodeV2(&timed)); err != nil {
			return err
		}
		return tx.Bucket(bucketMeta).Delete(keyFormat) // as written before checksums
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(path); err != nil {
		t.Fatal(err)
	}
	if recs, next, err := s.Read(context.Background(), "v2", 1, 10); err != nil || len(recs) != 1 || next != 2 ||
		!recs[0].Time.Equal(timed.Time) || string(recs[0].Payload) != string(old.Payload) {
		t.Fatalf("a format 2 row after the upgrade: %+v next %d err %v", recs, next, err)
	}
	storetest.UntimedRows(t, s, old)
	if err := s.db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketStreams).Bucket([]byte("v2")).Put(cursorKey(1), encodeV2(&old))
	}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Read(context.Background(), "v2", 1, 10); !errors.Is(err, storekit.ErrChecksum) || !strings.Contains(err.Error(), path) {
		t.Fatalf("a row without a checksum in an upgraded file: err %v, want ErrChecksum naming %s", err, path)
	}
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

// TestBoltReadServesNoDamagedRow: storetest.ServesNoDamagedRow on a bbolt
// file (rows format 3, with a checksum).
func TestBoltReadServesNoDamagedRow(t *testing.T) {
	path := filepath.Join(t.TempDir(), "node.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.ServesNoDamagedRow(t, s, func() []string { return []string{path} })
}

// TestUpgradeInChunks: a file of 25,000 rows without checksums, in three
// streams, is rewritten in chunks of upgradeChunk rows: every row reads
// back, checked, at its cursor, and each stream goes on after its end.
func TestUpgradeInChunks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{"s1": 12_000, "s2": 3, "s3": 12_997}
	if err := s.db.Update(func(tx *bbolt.Tx) error {
		for name, n := range counts {
			b, err := tx.Bucket(bucketStreams).CreateBucket([]byte(name))
			if err != nil {
				return err
			}
			for i := 1; i <= n; i++ {
				c, _ := b.NextSequence()
				r := echopubsub.Record{Kind: echopubsub.RecordMessage, PayloadType: "t", Payload: []byte(fmt.Sprint(name, "/", i))}
				if err := b.Put(cursorKey(c), encodeV2(&r)); err != nil {
					return err
				}
			}
		}
		return tx.Bucket(bucketMeta).Delete(keyFormat)
	}); err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	if s, err = Open(path); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for name, n := range counts {
		recs, next, err := s.Read(context.Background(), name, 1, 20_000)
		if err != nil || len(recs) != n || next != uint64(n+1) {
			t.Fatalf("%s: %d rows, next %d, err %v; want %d", name, len(recs), next, err, n)
		}
		for i, r := range recs {
			if string(r.Payload) != fmt.Sprint(name, "/", i+1) || r.Cursor != uint64(i+1) {
				t.Fatalf("%s row %d: cursor %d %q", name, i, r.Cursor, r.Payload)
			}
		}
		more := []echopubsub.Record{{Stream: name, Kind: echopubsub.RecordMessage, PayloadType: "t"}}
		if err := s.Append(context.Background(), more); err != nil || more[0].Cursor != uint64(n+1) {
			t.Fatalf("%s: append: cursor %d, %v", name, more[0].Cursor, err)
		}
	}
}
