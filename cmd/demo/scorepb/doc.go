// Package scorepb holds the ScoreBoard demo's wire message, defined in
// score.proto. The generated score.pb.go is committed; to regenerate after
// editing the .proto (Debian: apt-get install protobuf-compiler):
//
//	go generate ./cmd/demo/scorepb
package scorepb

//go:generate sh -c "d=$(mktemp -d) && go build -o $d/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go && protoc --plugin=protoc-gen-go=$d/protoc-gen-go --go_out=paths=source_relative:. score.proto && rm -rf $d"
