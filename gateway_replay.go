package echopubsub

import "google.golang.org/protobuf/proto"

// replay answers the replay command. It needs a store (ReplaySession), which
// this build does not have yet: the command is refused with
// replay_unavailable.
func (s *socket) replay(f *clientFrame) *frameError {
	return ferr(CodeReplayUnavailable, "replay needs a store: this pubsub has none")
}

// publish broadcasts a client's message.
func (s *socket) publish(topic string, msg proto.Message) error {
	return s.gw.ps.Broadcast(nil, topic, msg)
}
