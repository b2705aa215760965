package storekit

import (
	"fmt"

	"github.com/echopubsub/echopubsub/store"
)

// ValidateRecord checks what a store needs of a record before it appends
// it (Store implementations call it).
func ValidateRecord(r *store.Record) error {
	switch {
	case r.Stream == "":
		return fmt.Errorf("echopubsub: record stream must not be empty")
	case r.Kind != store.RecordMessage && r.Kind != store.RecordGap:
		return fmt.Errorf("echopubsub: record kind must be RecordMessage or RecordGap, got %d", uint8(r.Kind))
	case r.Kind == store.RecordMessage && r.PayloadType == "":
		return fmt.Errorf("echopubsub: message record of stream %q has no payload type", r.Stream)
	}
	return nil
}
