package gateway

import (
	"context"
	"errors"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/echopubsub/echopubsub"
)

// receiptJSON is a publish's receipt in its result frame: the message's
// place in its producer's stream and each member's answer
// (echopubsub.Receipt). incarnation is a string, as protojson writes a
// 64-bit integer (a JavaScript number cannot hold it).
type receiptJSON struct {
	Node        string            `json:"node"`
	Group       uint32            `json:"group"`
	Incarnation string            `json:"incarnation"`
	Cursor      uint64            `json:"cursor"`
	Complete    bool              `json:"complete"`
	Nodes       []nodeReceiptJSON `json:"nodes"`
}

type nodeReceiptJSON struct {
	Node   string `json:"node"`
	Status string `json:"status"`
}

// publishReceipt is publish with "receipt": true: BroadcastAwait with
// AwaitAll, bounded by ReceiptTimeout (at most half of WriteTimeout: the
// socket reads no pong meanwhile) and by the socket's close. A
// receipt the bound cut short is a result too ("complete": false): the
// message was published. An error is one the message was refused with.
func (s *socket) publishReceipt(topic string, msg proto.Message, traced context.Context) (*receiptJSON, error) {
	base := context.Background()
	if traced != nil { // the client's trace (traceparent), which the broadcast continues
		base = traced
	}
	ctx, cancel := context.WithTimeout(base, min(s.gw.cfg.ReceiptTimeout, s.gw.cfg.WriteTimeout/2))
	defer cancel()
	go func() { // ends with the call (cancel above)
		select {
		case <-s.closeCh:
			cancel()
		case <-ctx.Done():
		}
	}()
	r, err := s.gw.ps.BroadcastAwait(ctx, nil, topic, msg)
	if err != nil && (errors.Is(err, echopubsub.ErrBusy) || ctx.Err() == nil) {
		return nil, err // refused, not cut short
	}
	out := &receiptJSON{Node: r.Node, Group: r.Group, Incarnation: strconv.FormatUint(r.Incarnation, 10), Cursor: r.Cursor,
		Complete: err == nil, Nodes: []nodeReceiptJSON{}}
	for _, n := range r.Nodes {
		out.Nodes = append(out.Nodes, nodeReceiptJSON{Node: n.Node, Status: n.Status.String()})
	}
	return out, nil
}
