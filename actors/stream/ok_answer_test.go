package stream

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub/messages"
)

// An OK answer says the worker delivered every cursor below next_cursor,
// so every flight that ends at or below it is done, whatever batch the
// answer names. (Found in review: left in flight, such flights kept the
// window shut until onAckCheck gave up on them: rewind, failed(), a
// RetryInterval pause, for a peer that had answered everything.)
func TestOKAnswerCoversEveryDeliveredFlight(t *testing.T) {
	ok := messages.AckStatus_ACK_STATUS_OK
	fl := func(first, to, epoch uint64) flight {
		return flight{first: first, to: to, n: int(to - first), size: int(to-first) * 10, epoch: epoch}
	}
	mk := func(fs ...flight) *peer {
		pe := &peer{}
		for _, f := range fs {
			pe.flights = append(pe.flights, f)
			pe.flight++
			pe.flightMsgs += f.n
			pe.flightBytes += f.size
		}
		return pe
	}

	// A redelivery: the producer gave up on [0,5) (CallTimeout) and resent
	// [0,2) after a rewind; the worker, at 5 already, answers OK at 5
	// naming batch 0. The flight [0,2) is delivered.
	pe := mk(fl(0, 2, 2))
	pe.answeredBy(&messages.BatchAck{Status: ok, NextCursor: 5, BatchFirstCursor: proto.Uint64(0)})
	if pe.flight != 0 {
		t.Errorf("redelivery answered OK at 5: %d flight(s) left in flight (%v), want 0: the worker delivered them", pe.flight, pe.flights)
	}

	// The same batch [2,3) in flight twice: once from an earlier epoch
	// (its answer lost), once resent after the rewind. The worker's
	// cumulative answer (OK at 3, naming 2) says everything below 3 is
	// delivered: no flight is left.
	pe = mk(fl(2, 3, 1), fl(0, 1, 2), fl(1, 2, 2), fl(2, 3, 2))
	pe.answeredBy(&messages.BatchAck{Status: ok, NextCursor: 3, BatchFirstCursor: proto.Uint64(2)})
	if pe.flight != 0 {
		t.Errorf("cumulative OK at 3 with [2,3) in flight twice: %d flight(s) left (%v), want 0", pe.flight, pe.flights)
	}
}
