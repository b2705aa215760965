package seglog

import (
	"context"
	"sort"

	"github.com/echopubsub/echopubsub/store"
)

// Streams implements store.StreamLister from the index in memory:
// no record is read; the payload bytes are summed over each stream's rows.
func (s *Store) Streams(ctx context.Context) ([]store.StreamInfo, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, store.ErrStoreClosed
	}
	out := make([]store.StreamInfo, 0, len(s.streams))
	for name, st := range s.streams {
		info := store.StreamInfo{Stream: name, First: st.first, Last: st.end(), Rows: uint64(len(st.rows))}
		for _, l := range st.rows {
			info.Bytes += uint64(l.bytes)
		}
		out = append(out, info)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Stream < out[j].Stream })
	return out, ctx.Err()
}
