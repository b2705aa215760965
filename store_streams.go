package echopubsub

import "github.com/echopubsub/echopubsub/store"

// The admin endpoint's optional store interface, under this package's
// names like the rest of the contract (aliases).
type (
	// StreamInfo is what a store keeps of one durable stream: see
	// store.StreamInfo.
	StreamInfo = store.StreamInfo
	// StreamLister is a Store that lists its streams: see
	// store.StreamLister.
	StreamLister = store.StreamLister
)
