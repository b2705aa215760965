package postgres

import (
	"context"
	"fmt"

	"github.com/echopubsub/echopubsub/store"
)

// Streams implements store.StreamLister with one query: each
// stream's end from the streams table, and the count, first cursor and
// payload bytes of its rows (a scan of the rows kept: an operator's look,
// not a hot path).
func (s *Store) Streams(ctx context.Context) ([]store.StreamInfo, error) {
	if s.closed.Load() {
		return nil, store.ErrStoreClosed
	}
	rows, err := s.pool.Query(ctx, `SELECT s.stream, s.last_cursor, r.first, coalesce(r.n, 0), coalesce(r.bytes, 0)
		FROM `+s.streams+` s LEFT JOIN (SELECT stream, min(cursor) AS first, count(*) AS n,
			sum(octet_length(payload)) AS bytes FROM `+s.records+` GROUP BY stream) r ON r.stream = s.stream
		ORDER BY s.stream`)
	if err != nil {
		return nil, s.streamsErr(err)
	}
	defer rows.Close()
	var out []store.StreamInfo
	for rows.Next() {
		var name string
		var last, n, bytes int64
		var first *int64
		if err := rows.Scan(&name, &last, &first, &n, &bytes); err != nil {
			return nil, s.streamsErr(err)
		}
		info := store.StreamInfo{Stream: name, Last: uint64(last), First: uint64(last) + 1, Rows: uint64(n), Bytes: uint64(bytes)}
		if first != nil {
			info.First = uint64(*first)
		}
		out = append(out, info)
	}
	if err := rows.Err(); err != nil {
		return nil, s.streamsErr(err)
	}
	return out, nil
}

func (s *Store) streamsErr(err error) error {
	if isClosed(err) {
		return fmt.Errorf("echopubsub postgres: streams: %w: %w", store.ErrStoreClosed, err)
	}
	return fmt.Errorf("echopubsub postgres: streams: %w", err)
}
