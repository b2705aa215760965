package messages

// RangeKnown reports whether the notice says exactly which cursors this
// node will not get: producer incarnation ProducerIncarnation's [From, To).
// False for a notice whose end or incarnation is not known (To or
// ProducerIncarnation 0: a producer that restarted without saying where
// it ended, a notice about an incarnation this node never held, or one
// built by a node of an earlier build, which has neither field).
func (x *CursorExpired) RangeKnown() bool {
	return x != nil && x.To != 0 && x.ProducerIncarnation != 0
}

// GapRangeType is the PayloadType of a node-local store's gap row that
// carries its range (a GapRange: see store.Record).
const GapRangeType = "echopubsub.v1.GapRange"
