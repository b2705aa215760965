package messages

import (
	"errors"
	"testing"
)

// A version 1 node's refusal is recognised by its words alone (it lists no
// versions), and only that refusal is.
func TestRegisterAckRefusal(t *testing.T) {
	rejected := func(text string) *RegisterAck {
		return &RegisterAck{Status: AckStatus_ACK_STATUS_REJECTED, Error: text}
	}
	for _, tc := range []struct {
		name    string
		ack     *RegisterAck
		version uint32 // 0: not a version refusal
	}{
		{"version 1's words", rejected("protocol version 2 not supported (this node speaks 1)"), 2},
		{"this build's", rejected((&VersionError{Version: 3, Speaks: 2}).Error()), 3},
		{"another refusal", rejected(`pubsub name "a" does not match "b"`), 0},
		{"not refused", &RegisterAck{Status: AckStatus_ACK_STATUS_OK, Error: "protocol version 2 not supported (this node speaks 1)"}, 0},
	} {
		err := tc.ack.Refusal()
		var v *VersionError
		switch {
		case tc.version != 0 && (!errors.Is(err, ErrVersionNotSupported) || !errors.As(err, &v) || v.Version != tc.version):
			t.Errorf("%s: Refusal() = %v, want a VersionError for version %d", tc.name, err, tc.version)
		case tc.version == 0 && errors.Is(err, ErrVersionNotSupported):
			t.Errorf("%s: Refusal() = %v, want no VersionError", tc.name, err)
		case tc.ack.Status == AckStatus_ACK_STATUS_OK && err != nil:
			t.Errorf("%s: Refusal() = %v, want nil", tc.name, err)
		}
	}
}
