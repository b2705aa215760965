package messages

import (
	"errors"
	"fmt"
)

// ErrVersionNotSupported is a worker's refusal of a request in a protocol
// version it does not speak (a *VersionError).
var ErrVersionNotSupported = errors.New("protocol version not supported")

// VersionError refuses a request in protocol version Version; the worker
// speaks Speaks. It crosses the wire as the text of RegisterAck.error (or
// BatchAck.error) in version 1's words, which a version 1 node also sends
// and which lists no supported_versions: RegisterAck.Refusal reads it back.
type VersionError struct{ Version, Speaks uint32 }

// versionRefusal is version 1's wording of a VersionError: keep it, or
// producers stop recognising version 1 workers.
const versionRefusal = "protocol version %d not supported (this node speaks %d)"

func (e *VersionError) Error() string { return fmt.Sprintf(versionRefusal, e.Version, e.Speaks) }

// Is makes errors.Is(err, ErrVersionNotSupported) true for a *VersionError.
func (e *VersionError) Is(target error) bool { return target == ErrVersionNotSupported }

// Refusal is the error a refused RegisterAck carries: a *VersionError when
// its error is a VersionError's text, otherwise an error with that text
// (nil for an ack that is not REJECTED).
func (a *RegisterAck) Refusal() error {
	if a.GetStatus() != AckStatus_ACK_STATUS_REJECTED {
		return nil
	}
	var v VersionError
	if n, err := fmt.Sscanf(a.Error, versionRefusal, &v.Version, &v.Speaks); err == nil && n == 2 {
		return &v
	}
	return errors.New(a.Error)
}
