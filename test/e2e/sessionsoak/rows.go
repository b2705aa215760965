package sessionsoak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/echopubsub/echopubsub"
	"github.com/echopubsub/echopubsub/test/chaos"
	"github.com/echopubsub/echopubsub/test/testpb"
	"google.golang.org/protobuf/proto"
)

// With retention on, the stores forget their oldest rows while the soak
// runs, so what a store holds at the end is not all the truth. Each node
// process copies its store's rows, as they appear, to a rows log (JSON
// lines, one write per poll, kept across the slot's processes): before
// the pubsub starts (Start trims at once) and then every RowLogEvery. A
// row is immutable once appended and a cursor is never reused, so the
// truth is the union of every copy and the final read, and two copies
// that disagree on a cursor are a broken store (Run fails naming it).

// RowLogEvery is how often a session node copies its store's new rows to
// its rows log; retention must keep rows far longer than this.
const RowLogEvery = 50 * time.Millisecond

// ReadRows reads the soak topic's rows of st from cursor from on.
func ReadRows(ctx context.Context, st echopubsub.Store, from uint64) ([]chaos.StoreRow, error) {
	var out []chaos.StoreRow
	for {
		recs, next, err := st.Read(ctx, chaos.SessionTopic, from, 1000)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			row := chaos.StoreRow{Cursor: r.Cursor, Gap: r.Kind == echopubsub.RecordGap, Origin: r.Origin, Reason: r.Reason}
			if !row.Gap {
				var stamp testpb.Stamp
				if err := proto.Unmarshal(r.Payload, &stamp); err != nil {
					return nil, fmt.Errorf("row %d: %w", r.Cursor, err)
				}
				row.Publisher, row.Seq = stamp.Publisher, stamp.Seq
			}
			out = append(out, row)
		}
		if len(recs) < 1000 {
			return out, nil
		}
		from = next
	}
}

// RowLog is a node's copy of its store's rows (see above).
type RowLog struct {
	f    *os.File
	last uint64 // the last cursor copied
}

// OpenRowLog opens (or creates) the rows log at path and finds the last
// cursor an earlier process of the slot copied. A torn last line (a kill
// -9 in the middle of a large write) is cut off first, so that the next
// line does not run on from it.
func OpenRowLog(path string) (*RowLog, error) {
	rows, valid, err := loadRows(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(valid); err != nil {
		_ = f.Close()
		return nil, err
	}
	l := &RowLog{f: f}
	for _, r := range rows {
		l.last = max(l.last, r.Cursor)
	}
	return l, nil
}

// Copy appends st's rows after the last one copied (one write).
func (l *RowLog) Copy(ctx context.Context, st echopubsub.Store) error {
	rows, err := ReadRows(ctx, st, l.last+1)
	if err != nil || len(rows) == 0 {
		return err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	if _, err := l.f.Write(buf.Bytes()); err != nil {
		return err
	}
	l.last = rows[len(rows)-1].Cursor
	return nil
}

// Close closes the log.
func (l *RowLog) Close() error { return l.f.Close() }

// LoadRows reads a rows log (a torn last line, from a kill -9 in the
// middle of a write, is left out).
func LoadRows(path string) ([]chaos.StoreRow, error) {
	rows, _, err := loadRows(path)
	return rows, err
}

// loadRows is LoadRows, and the length of the whole lines.
func loadRows(path string) ([]chaos.StoreRow, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	var out []chaos.StoreRow
	var valid int64
	rd := bufio.NewReader(f)
	for {
		line, err := rd.ReadBytes('\n')
		if err == io.EOF {
			return out, valid, nil // a last line without its newline is torn
		}
		if err != nil {
			return nil, 0, err
		}
		var r chaos.StoreRow
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, 0, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, r)
		valid += int64(len(line))
	}
}

// mergeRows is a store's truth: every row of the copies and of the final
// read (the rows it still holds), in cursor order. A row the final read
// does not hold is marked Trimmed; a cursor no copy holds (a copy fell
// behind retention) is an Unknown row. Two different rows at one cursor
// are an error.
func mergeRows(copies [][]chaos.StoreRow, final []chaos.StoreRow) ([]chaos.StoreRow, error) {
	byCursor := map[uint64]chaos.StoreRow{}
	add := func(r chaos.StoreRow) error {
		if old, ok := byCursor[r.Cursor]; ok && old != r {
			return fmt.Errorf("cursor %d: two different rows, %+v and %+v", r.Cursor, old, r)
		}
		byCursor[r.Cursor] = r
		return nil
	}
	for _, rows := range copies {
		for _, r := range rows {
			r.Trimmed = true // until the final read says it is still held
			if err := add(r); err != nil {
				return nil, err
			}
		}
	}
	for _, r := range final {
		if old, ok := byCursor[r.Cursor]; ok {
			old.Trimmed = false
			if old != r {
				return nil, fmt.Errorf("cursor %d: the copy holds %+v, the store %+v", r.Cursor, old, r)
			}
		}
		byCursor[r.Cursor] = r
	}
	if len(byCursor) == 0 {
		return nil, nil
	}
	cursors := make([]uint64, 0, len(byCursor))
	for c := range byCursor {
		cursors = append(cursors, c)
	}
	sort.Slice(cursors, func(i, j int) bool { return cursors[i] < cursors[j] })
	var out []chaos.StoreRow
	for c := cursors[0]; c <= cursors[len(cursors)-1]; c++ {
		r, ok := byCursor[c]
		if !ok {
			r = chaos.StoreRow{Cursor: c, Unknown: true, Trimmed: true}
		}
		out = append(out, r)
	}
	return out, nil
}
