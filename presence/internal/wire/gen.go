// Package wire holds the messages trackers send one another (wire.proto).
// The generated wire.pb.go is committed; regenerate with go generate.
package wire

//go:generate sh -c "d=$(mktemp -d) && go build -o $d/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go && protoc --plugin=protoc-gen-go=$d/protoc-gen-go --go_out=paths=source_relative:. wire.proto && rm -rf $d"
