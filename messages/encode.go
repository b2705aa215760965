package messages

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// BatchEncoder writes a Batch's wire encoding straight from the entries: the
// bytes proto.Marshal gives for the Batch that Add would build (the same
// bytes, field by field), without building the Batch's columns first and
// without protobuf's reflective marshal. A producer encodes a batch once and
// sends the bytes to every node that needs that range (Encoded).
//
// An encoder is reused batch after batch (Reset), keeping its storage (as
// much as its largest batch); it is not safe for concurrent use.
type BatchEncoder struct {
	topics, types []string
	// the packed columns, as varints: topic_index, type_index, payload_size
	topicIdx, typeIdx, sizes []byte
	payloads                 []byte // the payloads, one after the other
	options                  []byte // the encoded options field (14), each entry's
	n                        int
	head                     []byte // scratch for Encode's fields 1-9
}

// BatchHeader is a Batch's fields other than its entries.
type BatchHeader struct {
	ProtocolVersion     uint32
	PubsubName          string
	ProducerNode        string
	ProducerIncarnation uint64
	Group               uint32
	FirstCursor         uint64
	Awaited             bool // field 15: a receipt waits on an entry
}

// Reset empties the encoder for the next batch, keeping its storage.
func (e *BatchEncoder) Reset() {
	e.topics, e.types = e.topics[:0], e.types[:0]
	e.topicIdx, e.typeIdx, e.sizes = e.topicIdx[:0], e.typeIdx[:0], e.sizes[:0]
	e.payloads, e.options, e.n = e.payloads[:0], e.options[:0], 0
}

// Add appends one entry, as Batch.Add does (payload is copied).
func (e *BatchEncoder) Add(topic, payloadType string, payload []byte, exclude, onlyNode string, storeCursor uint64) {
	e.AddTraced(topic, payloadType, payload, exclude, onlyNode, storeCursor, "", "")
}

// AddTraced is Add for an entry published in a trace, with its W3C trace
// context, as Batch.Add and Batch.SetTrace do. A traceparent "" is none:
// the same bytes as Add.
func (e *BatchEncoder) AddTraced(topic, payloadType string, payload []byte, exclude, onlyNode string, storeCursor uint64, traceparent, tracestate string) {
	if traceparent == "" {
		tracestate = ""
	}
	e.topicIdx = appendVarint(e.topicIdx, uint64(intern(&e.topics, topic)))
	e.typeIdx = appendVarint(e.typeIdx, uint64(intern(&e.types, payloadType)))
	e.sizes = appendVarint(e.sizes, uint64(len(payload)))
	e.payloads = append(e.payloads, payload...)
	if exclude != "" || onlyNode != "" || storeCursor != 0 || traceparent != "" {
		n := 0
		if e.n != 0 {
			n += 1 + protowire.SizeVarint(uint64(e.n))
		}
		if exclude != "" {
			n += 1 + protowire.SizeBytes(len(exclude))
		}
		if onlyNode != "" {
			n += 1 + protowire.SizeBytes(len(onlyNode))
		}
		if storeCursor != 0 {
			n += 1 + protowire.SizeVarint(storeCursor)
		}
		if traceparent != "" {
			n += 1 + protowire.SizeBytes(len(traceparent))
		}
		if tracestate != "" {
			n += 1 + protowire.SizeBytes(len(tracestate))
		}
		o := protowire.AppendTag(e.options, 14, protowire.BytesType)
		o = protowire.AppendVarint(o, uint64(n))
		if e.n != 0 {
			o = protowire.AppendVarint(protowire.AppendTag(o, 1, protowire.VarintType), uint64(e.n))
		}
		if exclude != "" {
			o = protowire.AppendString(protowire.AppendTag(o, 2, protowire.BytesType), exclude)
		}
		if onlyNode != "" {
			o = protowire.AppendString(protowire.AppendTag(o, 3, protowire.BytesType), onlyNode)
		}
		if storeCursor != 0 {
			o = protowire.AppendVarint(protowire.AppendTag(o, 4, protowire.VarintType), storeCursor)
		}
		if traceparent != "" {
			o = protowire.AppendString(protowire.AppendTag(o, 5, protowire.BytesType), traceparent)
		}
		if tracestate != "" {
			o = protowire.AppendString(protowire.AppendTag(o, 6, protowire.BytesType), tracestate)
		}
		e.options = o
	}
	e.n++
}

// appendVarint is protowire.AppendVarint with the one-byte case inline:
// batch columns are mostly small numbers.
func appendVarint(b []byte, v uint64) []byte {
	if v < 0x80 {
		return append(b, byte(v))
	}
	return protowire.AppendVarint(b, v)
}

// Len is the number of entries added since the last Reset.
func (e *BatchEncoder) Len() int { return e.n }

// Encode returns the wire encoding of the Batch with header h and the
// entries added, in a new slice of exactly its size. The encoder keeps its
// entries: Encode again gives the same batch under another header.
func (e *BatchEncoder) Encode(h BatchHeader) []byte {
	// The header and the name tables (fields 1-9) are a few bytes: written
	// to scratch first, which sizes them. The columns and the payloads
	// (fields 10-13, each length-delimited) are sized from their lengths.
	e.head = e.appendHead(e.head[:0], h)
	fields := [4][]byte{e.topicIdx, e.typeIdx, e.sizes, e.payloads}
	n := len(e.head) + len(e.options)
	for i, f := range fields {
		if len(f) > 0 {
			n += protowire.SizeTag(protowire.Number(10+i)) + protowire.SizeBytes(len(f))
		}
	}
	if h.Awaited {
		n += protowire.SizeTag(15) + 1
	}
	buf := append(make([]byte, 0, n), e.head...)
	for i, f := range fields {
		if len(f) > 0 {
			buf = protowire.AppendBytes(protowire.AppendTag(buf, protowire.Number(10+i), protowire.BytesType), f)
		}
	}
	buf = append(buf, e.options...)
	if h.Awaited { // after the options (14), as proto.Marshal orders fields
		buf = protowire.AppendVarint(protowire.AppendTag(buf, 15, protowire.VarintType), 1)
	}
	return buf
}

// appendHead appends fields 1-9: the header, then the topic and type names.
func (e *BatchEncoder) appendHead(buf []byte, h BatchHeader) []byte {
	if h.ProtocolVersion != 0 {
		buf = protowire.AppendVarint(protowire.AppendTag(buf, 1, protowire.VarintType), uint64(h.ProtocolVersion))
	}
	if h.PubsubName != "" {
		buf = protowire.AppendString(protowire.AppendTag(buf, 2, protowire.BytesType), h.PubsubName)
	}
	if h.ProducerNode != "" {
		buf = protowire.AppendString(protowire.AppendTag(buf, 3, protowire.BytesType), h.ProducerNode)
	}
	if h.ProducerIncarnation != 0 {
		buf = protowire.AppendVarint(protowire.AppendTag(buf, 4, protowire.VarintType), h.ProducerIncarnation)
	}
	if h.Group != 0 {
		buf = protowire.AppendVarint(protowire.AppendTag(buf, 5, protowire.VarintType), uint64(h.Group))
	}
	if h.FirstCursor != 0 {
		buf = protowire.AppendVarint(protowire.AppendTag(buf, 6, protowire.VarintType), h.FirstCursor)
	}
	for _, s := range e.topics {
		buf = protowire.AppendString(protowire.AppendTag(buf, 8, protowire.BytesType), s)
	}
	for _, s := range e.types {
		buf = protowire.AppendString(protowire.AppendTag(buf, 9, protowire.BytesType), s)
	}
	return buf
}

// Encoded returns a Batch that marshals to encoding (a Batch's wire
// encoding, as BatchEncoder.Encode returns it) and holds nothing else: it is
// for sending. A node that receives it through the wire decodes an ordinary
// Batch; one handed it in process reads it with Decoded.
func Encoded(encoding []byte) *Batch {
	b := &Batch{}
	b.ProtoReflect().SetUnknown(encoding)
	return b
}

// Decoded returns b itself, or, for a batch made by Encoded that reached its
// worker without crossing the wire (an in-process send), the Batch its
// encoding holds.
func (b *Batch) Decoded() (*Batch, error) {
	u := b.ProtoReflect().GetUnknown()
	if len(u) == 0 || b.PubsubName != "" || b.ProtocolVersion != 0 {
		return b, nil
	}
	var d Batch
	if err := proto.Unmarshal(u, &d); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadBatch, err)
	}
	return &d, nil
}
