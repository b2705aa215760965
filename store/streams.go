package store

import "context"

// StreamInfo is what a store keeps of one durable stream (StreamLister).
type StreamInfo struct {
	Stream string `json:"stream"`
	// First and Last are the first and last cursors kept; with no row kept
	// (every row removed by retention), First is Last + 1. Last is the
	// stream's end: the cursor of the last row ever appended.
	First uint64 `json:"first"`
	Last  uint64 `json:"last"`
	// Rows is the rows kept; Bytes their payload bytes (what
	// Retention.MaxBytes counts).
	Rows  uint64 `json:"rows"`
	Bytes uint64 `json:"bytes"`
}

// StreamLister is implemented by a Store that can list its streams: the
// admin endpoint's streams (echopubsub.AdminHandler) needs it. It is
// optional, like Trimmer; store/seglog, store/bolt and store/postgres
// implement it. Streams returns every stream the store holds, by name.
// Its cost grows with the rows kept (Bytes sums them): it is for an
// operator's look, not a hot path.
type StreamLister interface {
	Streams(ctx context.Context) ([]StreamInfo, error)
}
