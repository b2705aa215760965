package storekit

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/echopubsub/echopubsub/store"
)

// The record encoding's versions (its first byte), shared by the embedded
// stores: store/bolt's values, store/seglog's rows.
const (
	// RecordFormat is what AppendRecord writes: format 2 with a checksum.
	RecordFormat = 3
	// RecordFormatV2 had no checksum; RecordFormatV1 no append time either
	// (the zero Time). ParseRecord still reads both: a store that holds
	// rows written before checksums says which it accepts (ParseChecked
	// accepts none).
	RecordFormatV2 = 2
	RecordFormatV1 = 1
)

// ErrChecksum: a record's bytes are not what was written (its CRC-32C
// does not match): damage on the disk, never served as a row.
var ErrChecksum = errors.New("record checksum mismatch: the bytes on disk are damaged")

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// AppendRecord appends r's encoding to b (everything but Stream and
// Cursor, which the store keeps beside it): format byte, kind byte, the
// append time (8 bytes big-endian, Unix nanoseconds; 0: none), then
// uvarint-length-prefixed origin, payload type, payload and reason,
// uvarint missed, and the CRC-32C (Castagnoli) of all of it before, 4
// bytes big-endian.
func AppendRecord(b []byte, r *store.Record) []byte {
	start := len(b)
	b = append(b, RecordFormat, byte(r.Kind))
	var nanos uint64
	if !r.Time.IsZero() {
		nanos = uint64(r.Time.UnixNano())
	}
	b = binary.BigEndian.AppendUint64(b, nanos)
	for _, f := range [][]byte{[]byte(r.Origin), []byte(r.PayloadType), r.Payload, []byte(r.Reason)} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	b = binary.AppendUvarint(b, r.Missed)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli))
}

// RecordSize is an upper bound of what AppendRecord appends for r.
func RecordSize(r *store.Record) int {
	return 14 + 5*binary.MaxVarintLen64 + len(r.Origin) + len(r.PayloadType) + len(r.Payload) + len(r.Reason)
}

// Parsed is an encoded record's parts, pointing into the encoding.
type Parsed struct {
	Kind   store.RecordKind
	Time   time.Time
	Fields [4][]byte // origin, payload type, payload, reason
	Missed uint64
}

// ParseChecked splits what AppendRecord wrote, after checking its
// checksum (ErrChecksum); a record of an earlier format, with no
// checksum, is an error too: for a store whose every row has one, such a
// first byte is damage. It never panics.
func ParseChecked(b []byte) (Parsed, error) {
	if len(b) < 1 || b[0] != RecordFormat {
		return Parsed{}, fmt.Errorf("%w (format byte %d, want %d)", ErrChecksum, firstByte(b), RecordFormat)
	}
	return ParseRecord(b)
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}

// ParseRecord splits what AppendRecord (or format 1 or 2) wrote,
// checking the checksum of format 3 (ErrChecksum). It never panics: a
// malformed b is an error.
func ParseRecord(b []byte) (Parsed, error) {
	var p Parsed
	if len(b) < 2 || b[0] < RecordFormatV1 || b[0] > RecordFormat {
		return p, fmt.Errorf("record of unknown format")
	}
	if b[0] == RecordFormat {
		if len(b) < 6 {
			return p, fmt.Errorf("truncated record")
		}
		sum := binary.BigEndian.Uint32(b[len(b)-4:])
		if b = b[:len(b)-4]; crc32.Checksum(b, castagnoli) != sum {
			return p, ErrChecksum
		}
	}
	p.Kind = store.RecordKind(b[1])
	if b[0] == RecordFormatV1 {
		b = b[2:]
	} else {
		if len(b) < 10 {
			return p, fmt.Errorf("truncated record")
		}
		if nanos := binary.BigEndian.Uint64(b[2:10]); nanos != 0 {
			p.Time = time.Unix(0, int64(nanos)).UTC()
		}
		b = b[10:]
	}
	for i := range p.Fields {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return p, fmt.Errorf("truncated record")
		}
		p.Fields[i] = b[k : k+int(n)]
		b = b[k+int(n):]
	}
	missed, k := binary.Uvarint(b)
	if k <= 0 || k != len(b) {
		return p, fmt.Errorf("truncated record")
	}
	p.Missed = missed
	return p, nil
}

// DecodeRecord decodes what AppendRecord wrote (ParseRecord), or with
// checked what AppendRecord of this format wrote only (ParseChecked); the
// payload is copied (b may be the storage's memory, valid only in its
// transaction).
func DecodeRecord(b []byte, checked bool) (store.Record, error) {
	parse := ParseRecord
	if checked {
		parse = ParseChecked
	}
	p, err := parse(b)
	if err != nil {
		return store.Record{}, err
	}
	return store.Record{Kind: p.Kind, Time: p.Time, Origin: string(p.Fields[0]), PayloadType: string(p.Fields[1]),
		Reason: string(p.Fields[3]), Missed: p.Missed, Payload: append([]byte(nil), p.Fields[2]...)}, nil
}

// ReadFrom checks Read's arguments (limit > 0, ctx not done) and returns
// the first cursor to read (from, or 1 for 0).
func ReadFrom(ctx context.Context, from uint64, limit int) (uint64, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("%w: Read limit %d", store.ErrBadLimit, limit)
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	return max(from, 1), nil
}

// BeyondEnd is Read's error for a from past end + 1 (end: the stream's
// last cursor handed out), nil otherwise.
func BeyondEnd(stream string, from, end uint64) error {
	if from > end+1 {
		return fmt.Errorf("%w: stream %q cursor %d, end %d", store.ErrCursorBeyondEnd, stream, from, end)
	}
	return nil
}
