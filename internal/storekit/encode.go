package storekit

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/echopubsub/echopubsub"
)

// RecordFormat is the version byte AppendRecord writes first (store/bolt's
// values and store/seglog's rows).
const RecordFormat = 1

// AppendRecord appends r's encoding to b (everything but Stream and
// Cursor, which the store keeps beside it): the format byte, the kind
// byte, then uvarint-length-prefixed origin, payload type, payload and
// reason, and uvarint missed.
func AppendRecord(b []byte, r *echopubsub.Record) []byte {
	b = append(b, RecordFormat, byte(r.Kind))
	for _, f := range [][]byte{[]byte(r.Origin), []byte(r.PayloadType), r.Payload, []byte(r.Reason)} {
		b = binary.AppendUvarint(b, uint64(len(f)))
		b = append(b, f...)
	}
	return binary.AppendUvarint(b, r.Missed)
}

// RecordSize is an upper bound of what AppendRecord appends for r.
func RecordSize(r *echopubsub.Record) int {
	return 2 + 5*binary.MaxVarintLen64 + len(r.Origin) + len(r.PayloadType) + len(r.Payload) + len(r.Reason)
}

// DecodeRecord decodes what AppendRecord wrote (the payload is copied: b
// may be the storage's memory). It never panics: a malformed b is an
// error.
func DecodeRecord(b []byte) (echopubsub.Record, error) {
	var r echopubsub.Record
	if len(b) < 2 || b[0] != RecordFormat {
		return r, fmt.Errorf("record of unknown format")
	}
	r.Kind = echopubsub.RecordKind(b[1])
	b = b[2:]
	var fields [4][]byte
	for i := range fields {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return r, fmt.Errorf("truncated record")
		}
		fields[i] = b[k : k+int(n)]
		b = b[k+int(n):]
	}
	missed, k := binary.Uvarint(b)
	if k <= 0 {
		return r, fmt.Errorf("truncated record")
	}
	r.Origin, r.PayloadType, r.Reason, r.Missed = string(fields[0]), string(fields[1]), string(fields[3]), missed
	r.Payload = append([]byte(nil), fields[2]...)
	return r, nil
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
