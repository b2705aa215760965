package storekit

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/echopubsub/echopubsub"
)

// The record encoding's versions (its first byte), shared by the embedded
// stores: store/bolt's values, store/seglog's rows.
const (
	// RecordFormat is what AppendRecord writes.
	RecordFormat = 2
	// RecordFormatV1 had no append time; ParseRecord still reads it (the
	// zero Time).
	RecordFormatV1 = 1
)

// AppendRecord appends r's encoding to b (everything but Stream and
// Cursor, which the store keeps beside it): format byte, kind byte, the
// append time (8 bytes big-endian, Unix nanoseconds; 0: none), then
// uvarint-length-prefixed origin, payload type, payload and reason, and
// uvarint missed.
func AppendRecord(b []byte, r *echopubsub.Record) []byte {
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
	return binary.AppendUvarint(b, r.Missed)
}

// RecordSize is an upper bound of what AppendRecord appends for r.
func RecordSize(r *echopubsub.Record) int {
	return 10 + 5*binary.MaxVarintLen64 + len(r.Origin) + len(r.PayloadType) + len(r.Payload) + len(r.Reason)
}

// Parsed is an encoded record's parts, pointing into the encoding.
type Parsed struct {
	Kind   echopubsub.RecordKind
	Time   time.Time
	Fields [4][]byte // origin, payload type, payload, reason
	Missed uint64
}

// ParseRecord splits what AppendRecord (or format 1) wrote. It never
// panics: a malformed b is an error.
func ParseRecord(b []byte) (Parsed, error) {
	var p Parsed
	if len(b) < 2 || (b[0] != RecordFormat && b[0] != RecordFormatV1) {
		return p, fmt.Errorf("record of unknown format")
	}
	p.Kind = echopubsub.RecordKind(b[1])
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
	if k <= 0 {
		return p, fmt.Errorf("truncated record")
	}
	p.Missed = missed
	return p, nil
}

// DecodeRecord decodes what AppendRecord wrote; the payload is copied (b
// may be the storage's memory, valid only in its transaction).
func DecodeRecord(b []byte) (echopubsub.Record, error) {
	p, err := ParseRecord(b)
	if err != nil {
		return echopubsub.Record{}, err
	}
	return echopubsub.Record{Kind: p.Kind, Time: p.Time, Origin: string(p.Fields[0]), PayloadType: string(p.Fields[1]),
		Reason: string(p.Fields[3]), Missed: p.Missed, Payload: append([]byte(nil), p.Fields[2]...)}, nil
}

// ReadFrom checks Read's arguments (limit > 0, ctx not done) and returns
// the first cursor to read (from, or 1 for 0).
func ReadFrom(ctx context.Context, from uint64, limit int) (uint64, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("%w: Read limit %d", echopubsub.ErrBadLimit, limit)
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
		return fmt.Errorf("%w: stream %q cursor %d, end %d", echopubsub.ErrCursorBeyondEnd, stream, from, end)
	}
	return nil
}
