package echopubsub

import (
	"crypto/x509"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/echopubsub/echopubsub/internal/core"
	"github.com/echopubsub/echopubsub/messages"
)

// The edge guard is the one place that decides what a peer may do
// (docs/architecture.md, "Where each rule lives"). It wraps protoactor's
// gRPC stream and looks at every decoded envelope before protoactor hands
// it to an actor:
//
//   - TLS identity (when the remote runs WithTLS): every sender address, the
//     address in the connect handshake and the node an ack names must be one
//     the peer's certificate stands for (see certAllows);
//   - the tree's well-known actors (echopubsub/<name>/...) accept from the
//     wire only EchoPubSub's requests, each at its own actor: Broadcast at
//     the root, Register, Batch and Expire at a worker. Anything else, and
//     protoactor's system messages first of all (Stop, PoisonPill, Restart,
//     Terminated, Watch, Unwatch, ...), is dropped and logged once per sender;
//   - those requests must come from a current member of that pubsub, and a
//     producer's requests must name the node they come from; a received batch
//     must be within this node's MaxBatchMessages and MaxBatchBytes. A request
//     that fails is answered with a negative ack or result that says why (the
//     producer retries, as after any refused call), and logged once per
//     sender and reason;
//   - acks (BatchAck, RegisterAck) must name a current member.
//
// Which pubsubs run on a node, and their members, comes from pubsubs: Start
// adds each pubsub under its node address, Stop removes it, and the pubsub's
// root publishes its member list (core.Runtime.IsMember). The guard looks a
// request's pubsub up by its target's address and actor name; a target that
// is no running pubsub's is refused.

// pubsubs is every pubsub running in this process, by node address and name.
var pubsubs = &pubsubTable{m: map[string]map[string]*core.Runtime{}, stopped: map[string]bool{}}

type pubsubTable struct {
	mu sync.RWMutex
	m  map[string]map[string]*core.Runtime
	// stopped: the node addresses whose pubsubs Stop stopped, none started
	// since (a graceful stop, on purpose).
	stopped map[string]bool
}

// add enters rt, returning the runtime it replaces (nil: none), for
// putBack should rt's tree not start.
func (t *pubsubTable) add(rt *core.Runtime) (prev *core.Runtime) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.stopped, rt.Node)
	byName := t.m[rt.Node]
	if byName == nil {
		byName = map[string]*core.Runtime{}
		t.m[rt.Node] = byName
	}
	prev = byName[rt.Cfg.Name]
	byName[rt.Cfg.Name] = rt
	return prev
}

func (t *pubsubTable) remove(rt *core.Runtime) { t.putBack(rt, nil) }

// stop removes rt, which Stop stopped: once no pubsub runs on its node, the
// node counts as stopped on purpose (stoppedOnPurpose).
func (t *pubsubTable) stop(rt *core.Runtime) {
	t.putBack(rt, nil)
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.m[rt.Node]) == 0 {
		t.stopped[rt.Node] = true
	}
}

// stoppedOnPurpose reports whether the connection between node self and
// node peer ends because a pubsub was stopped on purpose: self's own pubsubs
// were stopped (Stop), peer's were (in this process), or every pubsub
// running on self was told that peer's stopped (its producers retired).
func (t *pubsubTable) stoppedOnPurpose(self, peer string) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	running := t.m[self]
	if len(running) == 0 {
		return t.stopped[self]
	}
	if len(t.m[peer]) == 0 && t.stopped[peer] {
		return true
	}
	for _, rt := range running {
		if !rt.Departed(peer) {
			return false
		}
	}
	return true
}

// putBack replaces rt, if it is still entered, with prev (nil: removes it).
func (t *pubsubTable) putBack(rt, prev *core.Runtime) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if byName := t.m[rt.Node]; byName != nil && byName[rt.Cfg.Name] == rt {
		if prev != nil {
			byName[rt.Cfg.Name] = prev
			return
		}
		delete(byName, rt.Cfg.Name)
		if len(byName) == 0 {
			delete(t.m, rt.Node)
		}
	}
}

func (t *pubsubTable) get(node, name string) *core.Runtime {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.m[node][name]
}

// memberOfAny reports whether addr is a member of some pubsub on node, and
// whether any pubsub runs on node.
func (t *pubsubTable) memberOfAny(node, addr string) (member, runs bool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for _, rt := range t.m[node] {
		if rt.IsMember(addr) {
			return true, true
		}
	}
	return false, len(t.m[node]) > 0
}

// Wire type names and field numbers, from the generated descriptors.
var (
	typeRegister    = typeName(&messages.Register{})
	typeBatch       = typeName(&messages.Batch{})
	typeExpire      = typeName(&messages.Expire{})
	typeRetire      = typeName(&messages.Retire{})
	typeBroadcast   = typeName(&messages.Broadcast{})
	typeBatchAck    = typeName(&messages.BatchAck{})
	typeRegisterAck = typeName(&messages.RegisterAck{})

	fieldPayloadSize = fieldNumber(&messages.Batch{}, "payload_size")
	fieldPayloads    = fieldNumber(&messages.Batch{}, "payloads")
	// nodeField is the field naming the node a request or ack claims to
	// come from.
	nodeField = map[string]protowire.Number{
		typeRegister:    fieldNumber(&messages.Register{}, "producer_node"),
		typeBatch:       fieldNumber(&messages.Batch{}, "producer_node"),
		typeExpire:      fieldNumber(&messages.Expire{}, "producer_node"),
		typeRetire:      fieldNumber(&messages.Retire{}, "producer_node"),
		typeBatchAck:    fieldNumber(&messages.BatchAck{}, "worker_node"),
		typeRegisterAck: fieldNumber(&messages.RegisterAck{}, "worker_node"),
	}
)

func typeName(m proto.Message) string { return string(proto.MessageName(m)) }

func fieldNumber(m proto.Message, name string) protowire.Number {
	return m.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(name)).Number()
}

const (
	// protoLocalAddress is protoactor's address for this actor system
	// (actor.localAddress, unexported): a PID with it is delivered locally.
	protoLocalAddress = "nonhost"
	treePrefix        = "echopubsub/"
	consulPrefix      = "echopubsub-consul/"
	// sessionsPrefix names the session manager and its session actors
	// (sessionManagerName): local only, they take nothing from the wire.
	sessionsPrefix = "echopubsub-sessions/"
	// maxTold bounds the guard's memory of what it already logged.
	maxTold = 4096
)

type guard struct {
	log  zerolog.Logger
	mu   sync.Mutex
	told map[string]struct{}
}

func newGuard(log zerolog.Logger) *guard {
	return &guard{log: log.With().Str("component", "echopubsub-guard").Logger(), told: map[string]struct{}{}}
}

// once reports whether key is logged for the first time. The memory is
// bounded: past maxTold keys it starts over.
func (g *guard) once(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.told[key]; ok {
		return false
	}
	if len(g.told) >= maxTold {
		g.told = map[string]struct{}{}
	}
	g.told[key] = struct{}{}
	return true
}

// intercept is the stream interceptor: the peer's certificate (if any) and a
// stream that filters what protoactor receives.
func (g *guard) intercept(srv interface{}, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	gs := &guardedStream{ServerStream: ss, g: g}
	if p, ok := peer.FromContext(ss.Context()); ok {
		if p.Addr != nil {
			gs.peerAddr = p.Addr.String()
		}
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			if len(ti.State.PeerCertificates) == 0 {
				g.log.Error().Str("peer", gs.peerAddr).Msg("refused a TLS peer without a client certificate")
				return status.Error(codes.Unauthenticated, "echopubsub: a client certificate is required")
			}
			gs.cert = ti.State.PeerCertificates[0]
		}
	}
	return handler(srv, gs)
}

type guardedStream struct {
	grpc.ServerStream
	g        *guard
	cert     *x509.Certificate // nil without TLS
	peerAddr string            // the TCP peer
	claimed  string            // the address the peer gave in its connect request
}

func (s *guardedStream) RecvMsg(m interface{}) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	rm, ok := m.(*remote.RemoteMessage)
	if !ok {
		return nil
	}
	switch t := rm.MessageType.(type) {
	case *remote.RemoteMessage_ConnectRequest:
		if sc := t.ConnectRequest.GetServerConnection(); sc != nil {
			s.claimed = sc.Address
			if s.cert != nil && !certAllows(s.cert, sc.Address) {
				s.g.log.Error().Str("peer", s.peerAddr).Str("claimed", sc.Address).Str("certificate", certName(s.cert)).
					Msg("refused a peer whose certificate is not for the node address it claims")
				return status.Errorf(codes.PermissionDenied, "echopubsub: certificate %s is not for node %q", certName(s.cert), sc.Address)
			}
		}
	case *remote.RemoteMessage_MessageBatch:
		return s.filter(t.MessageBatch)
	}
	return nil
}

// who names the sender of an envelope for the logs.
func (s *guardedStream) who(sender *actor.PID) string {
	switch {
	case sender != nil:
		return sender.Address
	case s.claimed != "":
		return s.claimed
	default:
		return s.peerAddr
	}
}

// filter drops, in place, the envelopes of b that the node must not act on.
// A malformed batch ends the stream, as protoactor itself would.
func (s *guardedStream) filter(b *remote.MessageBatch) error {
	kept := b.Envelopes[:0]
	for _, env := range b.Envelopes {
		target, sender, typ, err := envelopeParts(b, env)
		if err != nil {
			return s.malformed(err)
		}
		ok, err := s.check(env, target, sender, typ)
		if err != nil {
			return s.malformed(err)
		}
		if ok {
			kept = append(kept, env)
		}
	}
	b.Envelopes = kept
	return nil
}

func (s *guardedStream) malformed(err error) error {
	s.g.log.Error().Err(err).Str("peer", s.peerAddr).Str("claimed", s.claimed).
		Msg("peer sent a message this node cannot decode: closed its stream")
	return status.Errorf(codes.InvalidArgument, "echopubsub: malformed message: %v", err)
}

// envelopeParts resolves an envelope's indexes as protoactor will, and
// fails where protoactor would panic.
func envelopeParts(b *remote.MessageBatch, env *remote.MessageEnvelope) (target, sender *actor.PID, typ string, err error) {
	if env == nil {
		return nil, nil, "", fmt.Errorf("nil envelope")
	}
	if env.TypeId < 0 || int(env.TypeId) >= len(b.TypeNames) {
		return nil, nil, "", fmt.Errorf("type id %d out of %d type names", env.TypeId, len(b.TypeNames))
	}
	if env.Target < 0 || int(env.Target) >= len(b.Targets) || b.Targets[env.Target] == nil {
		return nil, nil, "", fmt.Errorf("target %d out of %d targets", env.Target, len(b.Targets))
	}
	if env.Sender < 0 || int(env.Sender) > len(b.Senders) || (env.Sender > 0 && b.Senders[env.Sender-1] == nil) {
		return nil, nil, "", fmt.Errorf("sender %d out of %d senders", env.Sender, len(b.Senders))
	}
	if env.SerializerId != 0 && env.SerializerId != 1 {
		return nil, nil, "", fmt.Errorf("unknown serializer %d", env.SerializerId)
	}
	target = b.Targets[env.Target]
	if env.Sender > 0 {
		sender = b.Senders[env.Sender-1]
		if env.SenderRequestId > 0 { // as protoactor's deserializeSender
			sender = proto.Clone(sender).(*actor.PID)
			sender.RequestId = env.SenderRequestId
		}
	}
	return target, sender, b.TypeNames[env.TypeId], nil
}

// check decides one envelope: ok false drops it; an error ends the stream.
func (s *guardedStream) check(env *remote.MessageEnvelope, target, sender *actor.PID, typ string) (bool, error) {
	g := s.g
	if s.cert != nil && sender != nil && !certAllows(s.cert, sender.Address) {
		if g.once("cert|" + s.peerAddr + "|" + sender.Address) {
			g.log.Error().Str("sender", sender.Address).Str("certificate", certName(s.cert)).Str("type", typ).
				Msg("dropped messages whose sender address the peer's certificate is not for")
		}
		return false, nil
	}
	switch {
	case typ == typeBatchAck && core.IsProducerID(target.Id):
		// A worker's answer to a producer's batch (sent to the producer
		// itself, not a future): checked as any ack.
		return s.checkAck(env, target, typ)
	case strings.HasPrefix(target.Id, treePrefix):
		return s.checkTree(env, target, sender, typ)
	case strings.HasPrefix(target.Id, consulPrefix), strings.HasPrefix(target.Id, sessionsPrefix):
		s.dropTree(target, sender, typ)
		return false, nil
	case typ == typeBatchAck || typ == typeRegisterAck:
		return s.checkAck(env, target, typ)
	}
	return true, nil
}

// dropTree drops a message to the tree that the wire may not send,
// logged once per sender.
func (s *guardedStream) dropTree(target, sender *actor.PID, typ string) {
	who := s.who(sender)
	if s.g.once("tree|" + who) {
		s.g.log.Warn().Str("sender", who).Str("type", typ).Str("target", target.Id).
			Msg("dropped a message from the wire to the pubsub tree that peers may not send (logged once per sender)")
	}
}

func (s *guardedStream) checkTree(env *remote.MessageEnvelope, target, sender *actor.PID, typ string) (bool, error) {
	name, rest, _ := strings.Cut(strings.TrimPrefix(target.Id, treePrefix), "/")
	at, known := wireRequests[typ]
	if !known || !at(rest) {
		if _, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(typ)); err != nil && env.SerializerId == 0 {
			// protoactor cannot decode it either: end the stream as it would.
			return false, fmt.Errorf("unknown type name %q", typ)
		}
		if strings.HasPrefix(typ, "echopubsub.") && !known && s.g.once("unlisted|"+typ) {
			s.g.log.Error().Str("type", typ).Str("target", target.Id).
				Msg("dropped an EchoPubSub wire type the guard does not list: add it to wireRequests in guard.go")
		}
		s.dropTree(target, sender, typ)
		return false, nil
	}
	if env.SerializerId != 0 {
		return false, fmt.Errorf("%s must be protobuf-serialized, got serializer %d", typ, env.SerializerId)
	}
	claim, entries, payloadBytes, err := scanRequest(env.MessageData, typ)
	if err != nil {
		return false, fmt.Errorf("failed to deserialize %s: %w", typ, err)
	}
	if sender == nil {
		who := s.who(nil)
		if s.g.once("nosender|" + who) {
			s.g.log.Warn().Str("peer", who).Str("type", typ).Str("target", target.Id).
				Msg("dropped a request without a sender: the guard cannot check it comes from a member (logged once per peer)")
		}
		return false, nil
	}
	rt := pubsubs.get(target.Address, name)
	_, claims := nodeField[typ]
	var reason string
	switch {
	case rt == nil && (target.Address == protoLocalAddress || target.Address == ""):
		// protoactor hands a target addressed "nonhost" to the local actor
		// of that id: a live tree actor, whose pubsub the table knows only
		// under the node's address. Such a target is no peer's to name.
		reason = fmt.Sprintf("target %s/%s is not addressed to a node", target.Address, target.Id)
	case rt == nil:
		// No pubsub of that name runs here (never started, or stopped while
		// the remote still runs): nothing here can act on the request, so it
		// passes to protoactor, whose dead-letter process answers it with a
		// DeadLetterResponse at once. The sender's call fails now instead of
		// after its CallTimeout (a graceful Stop elsewhere then gives up on
		// this node in RetryInterval steps, not CallTimeout steps).
		return true, nil
	case !rt.IsMember(sender.Address):
		reason = fmt.Sprintf("%s is not a member of pubsub %q on %s", sender.Address, name, rt.Node)
	case claims && claim != sender.Address:
		reason = fmt.Sprintf("request claims producer node %q but comes from %s", claim, sender.Address)
	case typ == typeBatch && entries > rt.Cfg.MaxBatchMessages:
		reason = fmt.Sprintf("batch of %d entries is over this node's MaxBatchMessages %d", entries, rt.Cfg.MaxBatchMessages)
	case typ == typeBatch && payloadBytes > rt.Cfg.MaxBatchBytes:
		reason = fmt.Sprintf("batch of %d payload bytes is over this node's MaxBatchBytes %d", payloadBytes, rt.Cfg.MaxBatchBytes)
	default:
		return true, nil
	}
	if s.g.once("reject|" + sender.Address + "|" + typ + "|" + reasonKind(reason)) {
		s.g.log.Warn().Str("sender", sender.Address).Str("type", typ).Str("reason", reason).
			Msg("rejected a request at the edge (logged once per sender and reason)")
	}
	if rt != nil {
		rt.System.Root.Send(sender, rejection(rt, typ, reason))
	}
	return false, nil
}

// reasonKind is the first words of a reason, for logging once per kind.
func reasonKind(reason string) string {
	if i := strings.IndexAny(reason, "0123456789\""); i > 0 {
		return reason[:i]
	}
	return reason
}

func rejection(rt *core.Runtime, typ, reason string) proto.Message {
	reason = "echopubsub: " + reason
	switch typ {
	case typeBroadcast:
		return &messages.BroadcastResult{Error: reason}
	case typeRegister:
		return &messages.RegisterAck{Status: messages.AckStatus_ACK_STATUS_REJECTED, WorkerNode: rt.Node,
			WorkerIncarnation: rt.Incarnation, Error: reason}
	default:
		return &messages.BatchAck{Status: messages.AckStatus_ACK_STATUS_REJECTED, WorkerNode: rt.Node,
			WorkerIncarnation: rt.Incarnation, Error: reason}
	}
}

// wireRequests is every message a peer may send to a pubsub's tree, with
// the actor (its id below the root, "" for the root) that takes it. A new
// wire request must be added here, and to nodeField if it names the node
// it comes from; anything else is dropped at the edge.
var wireRequests = map[string]func(rest string) bool{
	typeBroadcast: func(rest string) bool { return rest == "" },
	typeRegister:  isWorker,
	typeBatch:     isWorker,
	typeExpire:    isWorker,
	typeRetire:    isWorker,
}

// isWorker reports whether rest (an actor id below a pubsub's root) is a
// worker: g<group>/worker.
func isWorker(rest string) bool { return core.IsGroupChild(rest, "worker") }

// checkAck passes an ack only if the worker node it names is a member of a
// pubsub on the target's node (and, with TLS, one the certificate is for).
// On a node that runs no pubsub acks are no producer's: they pass (protoactor
// delivers locally only to this node's address, or to "nonhost", which is
// refused).
func (s *guardedStream) checkAck(env *remote.MessageEnvelope, target *actor.PID, typ string) (bool, error) {
	if env.SerializerId != 0 {
		return false, fmt.Errorf("%s must be protobuf-serialized, got serializer %d", typ, env.SerializerId)
	}
	node, _, _, err := scanRequest(env.MessageData, typ)
	if err != nil {
		return false, fmt.Errorf("failed to deserialize %s: %w", typ, err)
	}
	reason := ""
	member, runs := pubsubs.memberOfAny(target.Address, node)
	switch {
	case s.cert != nil && !certAllows(s.cert, node):
		reason = fmt.Sprintf("names worker node %q, which certificate %s is not for", node, certName(s.cert))
	case !member && (runs || target.Address == protoLocalAddress || target.Address == ""):
		reason = fmt.Sprintf("names worker node %q, not a member of any pubsub on %s", node, target.Address)
	default:
		return true, nil
	}
	who := s.who(nil)
	if s.g.once("ack|" + who + "|" + node) {
		s.g.log.Warn().Str("peer", who).Str("type", typ).Str("reason", reason).Msg("dropped an ack (logged once per peer and node)")
	}
	return false, nil
}

// scanRequest reads, without decoding the rest, what the guard checks in a
// request or ack: the node it claims (producer_node, or worker_node in an
// ack) and, in a Batch, its entry count and payload bytes. It follows
// protobuf's rules: the last occurrence of a field wins, a field with an
// unexpected wire type is an unknown field.
func scanRequest(b []byte, typ string) (node string, entries, payloadBytes int, err error) {
	nodeNum, hasNode := nodeField[typ]
	for len(b) > 0 {
		num, wt, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", 0, 0, protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		if wt == protowire.BytesType {
			v, n = protowire.ConsumeBytes(b)
		} else {
			n = protowire.ConsumeFieldValue(num, wt, b)
		}
		if n < 0 {
			return "", 0, 0, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case hasNode && num == nodeNum && wt == protowire.BytesType:
			node = string(v)
		case typ == typeBatch && num == fieldPayloadSize && wt == protowire.BytesType:
			for _, c := range v { // packed varints: one ends at each byte below 0x80
				if c < 0x80 {
					entries++
				}
			}
		case typ == typeBatch && num == fieldPayloadSize && wt == protowire.VarintType:
			entries++
		case typ == typeBatch && num == fieldPayloads && wt == protowire.BytesType:
			payloadBytes = len(v)
		}
	}
	return node, entries, payloadBytes, nil
}

// certAllows reports whether cert stands for the node at addr (host:port).
// A certificate with URI SANs of the form echopubsub://host:port (see
// NodeURI) stands exactly for those addresses; one without any stands for
// every port of the hosts in its IP and DNS SANs.
func certAllows(cert *x509.Certificate, addr string) bool {
	if cert == nil || addr == "" {
		return false
	}
	strict := false
	for _, u := range cert.URIs {
		if u.Scheme == uriScheme {
			strict = true
			if u.Host == addr {
				return true
			}
		}
	}
	if strict {
		return false
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		for _, c := range cert.IPAddresses {
			if c.Equal(ip) {
				return true
			}
		}
		return false
	}
	return cert.VerifyHostname(host) == nil
}

func certName(c *x509.Certificate) string {
	var sans []string
	for _, u := range c.URIs {
		sans = append(sans, u.String())
	}
	for _, ip := range c.IPAddresses {
		sans = append(sans, ip.String())
	}
	sans = append(sans, c.DNSNames...)
	return fmt.Sprintf("%q (SANs %s)", c.Subject.CommonName, strings.Join(sans, ", "))
}
