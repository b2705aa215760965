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
// idempotent join (see Register): a version 1 node is refused with a reason
// rather than misread.
const ProtocolVersion = 2
