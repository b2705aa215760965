package storekit

import (
	"encoding/json"
	"sort"
	"time"

	"github.com/echopubsub/echopubsub/store"
)

// ConsumerTable is every stream's named consumers (store.ConsumerStore),
// in memory: stream -> name -> consumer. The zero value is not usable
// (make one with NewConsumerTable); not safe for concurrent use.
type ConsumerTable map[string]map[string]store.Consumer

// NewConsumerTable returns an empty table.
func NewConsumerTable() ConsumerTable { return ConsumerTable{} }

// Commit sets name's cursor in stream, stamped at now (UTC, to the
// microsecond, as Stamp does).
func (t ConsumerTable) Commit(stream, name string, cursor uint64, now time.Time) {
	m := t[stream]
	if m == nil {
		m = map[string]store.Consumer{}
		t[stream] = m
	}
	m[name] = store.Consumer{Name: name, Cursor: cursor, Time: now.UTC().Truncate(time.Microsecond)}
}

// List is stream's consumers, sorted by name.
func (t ConsumerTable) List(stream string) []store.Consumer {
	out := make([]store.Consumer, 0, len(t[stream]))
	for _, c := range t[stream] {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Delete forgets name in stream.
func (t ConsumerTable) Delete(stream, name string) {
	delete(t[stream], name)
	if len(t[stream]) == 0 {
		delete(t, stream)
	}
}

// Held is store.Held of stream's consumers.
func (t ConsumerTable) Held(stream string) uint64 {
	held := uint64(store.NoHold)
	for _, c := range t[stream] {
		held = min(held, c.Cursor)
	}
	return held
}

// Marshal encodes the table (for a store that keeps it in a file of its own).
func (t ConsumerTable) Marshal() ([]byte, error) { return json.Marshal(t) }

// ParseConsumerTable decodes what Marshal encoded.
func ParseConsumerTable(b []byte) (ConsumerTable, error) {
	t := ConsumerTable{}
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, err
	}
	return t, nil
}
