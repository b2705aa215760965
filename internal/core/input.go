package core

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// Input the wire cannot carry is refused where it enters (issue 37). A
// topic travels to every node in a batch whose names the producer encodes
// by hand (messages.BatchEncoder): protobuf's own Marshal, which refuses a
// proto3 string that is not UTF-8 before anything is sent, never sees it.
// A topic that is not UTF-8 used to be accepted, delivered here, and then
// refused by every peer's decoder, which wedged the producer's stream to
// that peer. Everything else that crosses a node boundary is either
// checked by Config.Validate (the pubsub's name), a node address, or
// encoded by proto.Marshal (payloads, session messages and their context),
// which fails the call instead.
//
// The rule lives here, once: CheckTopic for every path that names a topic
// (publishing, subscribing, sessions, replay), CheckWrite for every path
// that hands a write to a producer.

var (
	// ErrEmptyTopic: a topic must not be empty.
	ErrEmptyTopic = errors.New("echopubsub: topic must not be empty")
	// ErrInvalidTopic: a topic that is not valid UTF-8, or longer than
	// Config.MaxTopicBytes.
	ErrInvalidTopic = errors.New("echopubsub: invalid topic")
	// ErrInvalidPID: a sender PID whose address or id is not valid UTF-8
	// (a ...From broadcast carries it to every node).
	ErrInvalidPID = errors.New("echopubsub: invalid PID")
)

// MaxTopicBytesLimit is the largest Config.MaxTopicBytes: a durable topic is
// its stream's name in a store, and PostgreSQL refuses an index entry over
// about 2.7 kB (bbolt a key over 32 KiB).
const MaxTopicBytesLimit = 2048

// CheckTopic is the rule for a topic (and a stream's name, which is its
// topic): not empty, valid UTF-8, at most max bytes. The error names the
// rule and the value, escaped.
func CheckTopic(topic string, max int) error {
	if topic == "" {
		return ErrEmptyTopic
	}
	return wireString(ErrInvalidTopic, "topic", topic, max)
}

// CheckTopic is CheckTopic with this pubsub's Config.MaxTopicBytes.
func (rt *Runtime) CheckTopic(topic string) error { return CheckTopic(topic, rt.Cfg.MaxTopicBytes) }

// CheckWrite refuses a write a producer could not send: its topic
// (CheckTopic), its excluded subscriber's key (ErrInvalidPID) and its size
// (CheckSize). OnlyNode is a member's address, checked by the caller.
func (rt *Runtime) CheckWrite(w *Write) error {
	if err := rt.CheckTopic(w.Topic); err != nil {
		return err
	}
	if err := wireString(ErrInvalidPID, "sender PID", w.Exclude, 0); err != nil {
		return err
	}
	return rt.CheckSize(len(w.Topic), len(w.Payload))
}

// wireString refuses s, named what, when it is not valid UTF-8 or longer
// than max bytes (max 0: no bound), wrapping sentinel.
func wireString(sentinel error, what, s string, max int) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s must be valid UTF-8 (it crosses nodes as a protobuf string), got %s", sentinel, what, quoteClip(s))
	}
	if max > 0 && len(s) > max {
		return fmt.Errorf("%w: %s must be at most %d bytes (Config.MaxTopicBytes), got %d: %s", sentinel, what, max, len(s), quoteClip(s))
	}
	return nil
}

// quoteClip quotes s (Go syntax: invalid bytes escaped), its first 64
// bytes only when longer, so that an error never carries a huge value.
func quoteClip(s string) string {
	const keep = 64
	if len(s) <= keep {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q...", s[:keep])
}
