package storekit

import (
	"fmt"

	"github.com/echopubsub/echopubsub"
)

// ValidateRecord checks what a store needs of a record before it appends
// it (Store implementations call it).
func ValidateRecord(r *echopubsub.Record) error {
	switch {
	case r.Stream == "":
		return fmt.Errorf("echopubsub: record stream must not be empty")
	case r.Kind != echopubsub.RecordMessage && r.Kind != echopubsub.RecordGap:
		return fmt.Errorf("echopubsub: record kind must be RecordMessage or RecordGap, got %d", uint8(r.Kind))
	case r.Kind == echopubsub.RecordMessage && r.PayloadType == "":
		return fmt.Errorf("echopubsub: message record of stream %q has no payload type", r.Stream)
	}
	return nil
}
