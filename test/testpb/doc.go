// Package testpb holds the payload types of EchoPubSub's tests and harness.
//
// Regenerate with `go generate ./test/testpb` (see messages/doc.go).
package testpb

//go:generate sh -c "d=$(mktemp -d) && go build -o $d/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go && protoc --plugin=protoc-gen-go=$d/protoc-gen-go --go_out=paths=source_relative:. testpb.proto && rm -rf $d"
