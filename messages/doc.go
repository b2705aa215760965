// Package messages holds every message that crosses a node boundary or
// reaches a subscriber, defined in echopubsub.proto.
//
// The generated echopubsub.pb.go is committed, so users need no protoc.
// To regenerate after editing the .proto (Debian: apt-get install
// protobuf-compiler; protoc-gen-go is pinned by this module's go.mod):
//
//	go generate ./messages
package messages

//go:generate sh -c "d=$(mktemp -d) && go build -o $d/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go && protoc --plugin=protoc-gen-go=$d/protoc-gen-go --go_out=paths=source_relative:. echopubsub.proto && rm -rf $d"

// ProtocolVersion is the wire protocol this build speaks. See the versioning
// note at the top of echopubsub.proto. Version 2 made Register a probe and an
// idempotent join (see Register); a version 2 node still speaks version 1
// (PreviousProtocolVersion) to a node not upgraded yet, with version 1's
// meaning, and refuses any other version with a reason rather than misread.
const ProtocolVersion = 2

// PreviousProtocolVersion is the version before ProtocolVersion, which this
// build still speaks so that a cluster can be upgraded one node at a time:
// version 1, the one-step Register (no probe, no join field; the worker
// seeds a producer it does not hold at next_cursor, tells CursorExpired when
// a Register skips its cursor forwards, and a Batch past its cursor is told
// as a gap rather than refused). Version 1 has no Retire.
const PreviousProtocolVersion = 1

// SupportedVersions is what this build lists in Register and RegisterAck.
func SupportedVersions() []uint32 { return []uint32{PreviousProtocolVersion, ProtocolVersion} }

// Speaks reports whether a list of supported versions (as a Register or
// RegisterAck carries it) includes v. An empty list is a version 1 node's.
func Speaks(versions []uint32, v uint32) bool {
	if len(versions) == 0 {
		return v == 1
	}
	for _, s := range versions {
		if s == v {
			return true
		}
	}
	return false
}
