package seglog

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/store/storekit"
)

// frameV1 is a frame as version 1 wrote it (before checksummed records
// and synced): its rows' records are format 2.
func frameV1(stream string, first uint64, recs ...echopubsub.Record) []byte {
	body := []byte{frameVersionV1}
	body = binary.AppendUvarint(body, uint64(len(recs)))
	for i := range recs {
		rec := storekit.AppendRecord(nil, &recs[i])
		rec[0] = storekit.RecordFormatV2
		rec = rec[:len(rec)-4]
		body = binary.AppendUvarint(body, uint64(len(stream)))
		body = append(body, stream...)
		body = binary.AppendUvarint(body, first+uint64(i))
		body = binary.AppendUvarint(body, uint64(len(rec)))
		body = append(body, rec...)
	}
	body = append(body, 0)
	out := binary.LittleEndian.AppendUint32(nil, uint32(len(body)))
	out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(body, castagnoli))
	return append(out, body...)
}

// TestVersion1FramesReadAndChecked: a log written before records carried
// a checksum opens, reads back, goes on with version 3 frames, and Read
// checks a version 1 row against its frame's checksum: a flipped bit is
// an error naming the file and the offset.
func TestVersion1FramesReadAndChecked(t *testing.T) {
	dir := t.TempDir()
	r := echopubsub.Record{Kind: echopubsub.RecordMessage, Origin: "n1", PayloadType: "test.Stamp", Payload: []byte("old row one")}
	r2 := r
	r2.Payload = []byte("old row two")
	seg := append([]byte(segMagic), frameV1("a", 1, r, r2)...)
	path := filepath.Join(dir, segName(1))
	if err := os.WriteFile(path, seg, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := context.Background()
	if err := s.Append(c, []echopubsub.Record{{Stream: "a", Kind: echopubsub.RecordMessage, PayloadType: "t", Payload: []byte("new")}}); err != nil {
		t.Fatal(err)
	}
	recs, next, err := s.Read(c, "a", 1, 10)
	if err != nil || len(recs) != 3 || next != 4 || string(recs[0].Payload) != "old row one" || string(recs[1].Payload) != "old row two" ||
		string(recs[2].Payload) != "new" || recs[1].Cursor != 2 {
		t.Fatalf("read: %+v next %d err %v", recs, next, err)
	}
	at := strings.Index(string(seg), "old row two")
	f, _ := os.OpenFile(path, os.O_RDWR, 0)
	defer f.Close()
	if _, err := f.WriteAt([]byte{'O'}, int64(at)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Read(c, "a", 2, 1); !errors.Is(err, storekit.ErrChecksum) || !strings.Contains(err.Error(), path+" offset ") {
		t.Fatalf("a version 1 row flipped: err %v, want ErrChecksum naming %s and the offset", err, path)
	}
}
