package echopubsub

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// MaxFrameBytes is the gRPC message limit RemoteConfig sets on both sides.
// protoactor's endpoint writer packs many queued messages into one frame;
// over the limit the stream is torn down and every queued message is dropped
// silently, so the limit sits far above Config.MaxBatchBytes.
const MaxFrameBytes = 64 << 20

// FlowWindowBytes is the HTTP/2 flow-control window RemoteConfig sets on
// both sides, per stream and per connection: what a peer may have sent that
// this node has not read yet. A fixed window: gRPC's default starts at 64
// KiB and grows by probing the link, and while probing it answers nearly
// every data frame of a moderate stream with a WINDOW_UPDATE and a PING,
// which the sender answers in turn. At 10,000 msg/s on 3 nodes those
// probes were about 40 % of the cluster's system calls and 17-36 % of its
// CPU (docs/benchmarks.md, "Figures behind code comments"). 16 MiB is the most
// gRPC's probing ever grows the window to; a message larger than it still
// passes, in parts.
const FlowWindowBytes = 16 << 20

// RemoteConfig returns the protoactor remote configuration EchoPubSub is
// meant to run on. Start the remote with it before Start:
//
//	r := remote.NewRemote(system, echopubsub.RemoteConfig("127.0.0.1", 8090, zlog))
//	r.Start()
//
// It is remote.Configure with, before opts, Guard(log) (the edge guard, the
// frame limit, keepalives and a fast connect: see Guard), plus:
//   - a single connect attempt per endpoint, so a cut-off peer fails fast
//     and is retried by EchoPubSub's own loop;
//   - endpoint queues that start at 4096 slots and grow, instead of
//     protoactor's preallocated 1,000,000 (16 MiB per peer, scanned by the GC).
//
// An application that already configures its remote with remote.Configure
// adds Guard(log) to that call instead.
//
// Without WithTLS among opts, node-to-node traffic is plaintext and a peer's
// addresses are what it says they are: the guard still keeps non-members and
// system messages away from the pubsubs, but only WithTLS proves who a peer
// is (see README, "Securing a cluster").
func RemoteConfig(host string, port int, log zerolog.Logger, opts ...remote.ConfigOption) *remote.Config {
	// protoactor preallocates a 1,000,000-slot queue per endpoint (16 MiB of
	// pointers the GC scans on every cycle); the queue grows on demand, so
	// start small.
	base := []remote.ConfigOption{Guard(log), remote.WithEndpointWriterQueueSize(4096), remote.WithEndpointManagerQueueSize(4096)}
	cfg := remote.Configure(host, port, append(base, opts...)...)
	cfg.MaxRetryCount = 1
	return cfg
}

// Guard is the remote.ConfigOption that makes a protoactor remote safe for
// EchoPubSub, for an application that builds its remote itself:
//
//	cfg := remote.Configure(host, port, echopubsub.Guard(zlog), ...your options)
//
// It appends (never replaces) to the remote's options:
//   - the edge guard (guardStream) around protoactor's gRPC stream handler:
//     what a peer may send to this node's pubsubs, checked in one place;
//     system messages from the wire (Stop, PoisonPill, Terminated, Watch,
//     Unwatch) never reach the pubsub's actors; malformed traffic closes
//     only that peer's stream;
//   - a 64 MiB message limit on the server and on dials (see MaxFrameBytes);
//   - a fixed 16 MiB flow-control window on both sides, so that a moderate
//     stream is not answered frame by frame (see FlowWindowBytes);
//   - keepalive pings (every 2 s, 2 s timeout) so a silently dead peer is
//     noticed in seconds rather than at TCP's timeout, and a server policy
//     that accepts them;
//   - a 2 s connect timeout.
//
// Start refuses a remote without it (ErrUnguardedRemote). protoactor's
// remote.WithServerOptions replaces the server options given before it:
// put Guard after it (or Start tells you the guard is gone).
func Guard(log zerolog.Logger) remote.ConfigOption {
	guard := grpc.ChainStreamInterceptor(guardStream(log))
	guardOptions.Store(guard, true)
	return func(rc *remote.Config) {
		rc.ServerOptions = append(rc.ServerOptions, guard,
			grpc.MaxRecvMsgSize(MaxFrameBytes),
			grpc.MaxSendMsgSize(MaxFrameBytes),
			grpc.InitialWindowSize(FlowWindowBytes), grpc.InitialConnWindowSize(FlowWindowBytes),
			grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
			grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * time.Second, Timeout: 2 * time.Second}),
		)
		// Dial options before the caller's own (WithTLS's credentials come
		// later and win: the last transport credentials given are used).
		rc.DialOptions = append([]grpc.DialOption{
			grpc.WithTransportCredentials(insecure.NewCredentials()), // protoactor's own default
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxFrameBytes), grpc.MaxCallSendMsgSize(MaxFrameBytes)),
			grpc.WithInitialWindowSize(FlowWindowBytes), grpc.WithInitialConnWindowSize(FlowWindowBytes),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 2 * time.Second, Timeout: 2 * time.Second, PermitWithoutStream: true}),
			grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 2 * time.Second}),
		}, rc.DialOptions...)
	}
}

// checkGuard is Start's check that system's remote runs the edge guard.
func checkGuard(system *actor.ActorSystem, allowUnguarded bool, log zerolog.Logger) error {
	guarded, known := remoteGuarded(system)
	switch {
	case guarded:
		return nil
	case !allowUnguarded && !known:
		return fmt.Errorf("%w (this protoactor version's remote config cannot be inspected)", ErrUnguardedRemote)
	case !allowUnguarded:
		return ErrUnguardedRemote
	}
	log.Warn().Str("node", system.Address()).
		Msg("echopubsub: starting on a remote without the edge guard (WithUnguardedRemote): any process that reaches this port " +
			"can stop the pubsub's actors or cut subscribers off with forged system messages, and non-members' requests are not refused")
	return nil
}

// guardOptions holds the guard's server option of every Guard call (values
// are pointers, so comparable): Start looks for one of them among the
// options of the remote it is given.
var guardOptions sync.Map

// remoteGuarded reports whether system's remote was configured with Guard,
// and its server options still hold it. protoactor keeps a remote's config
// unexported and offers no getter; the field is read by reflection on the
// pinned protoactor version (known is false if its layout ever differs).
func remoteGuarded(system *actor.ActorSystem) (guarded, known bool) {
	defer func() {
		if recover() != nil { // no remote extension: GetRemote's type assertion
			guarded, known = false, false
		}
	}()
	r := remote.GetRemote(system)
	if r == nil {
		return false, false
	}
	f := reflect.ValueOf(r).Elem().FieldByName("config")
	if !f.IsValid() || f.Type() != reflect.TypeOf((*remote.Config)(nil)) || f.IsNil() {
		return false, false
	}
	rc := (*remote.Config)(f.UnsafePointer())
	for _, o := range rc.ServerOptions {
		if _, ok := guardOptions.Load(o); ok {
			return true, true
		}
	}
	return false, true
}

// guardStream is the gRPC stream interceptor RemoteConfig installs, the one
// place that decides what a peer may do (see guard.go for the rules): it
// filters every envelope protoactor decodes from the stream before any actor
// sees it, and turns a panic in protoactor's stream handler (a hostile or
// broken peer) into an error for that stream alone.
func guardStream(log zerolog.Logger) grpc.StreamServerInterceptor {
	g := newGuard(log)
	return func(srv interface{}, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				log.Error().Str("method", info.FullMethod).Interface("panic", r).
					Msg("peer sent a message this node cannot decode: closed its stream")
				err = status.Errorf(codes.InvalidArgument, "echopubsub: malformed message: %v", r)
			}
		}()
		return g.intercept(srv, ss, info, handler)
	}
}

// ActorSystemLogger routes protoactor's own log/slog output through zlog:
//
//	system := actor.NewActorSystem(echopubsub.ActorSystemLogger(zlog))
//
// A normal stop logs no error: protoactor's errors about the connection to
// a node (its endpoint writer's "lost connection", "failed to connect", ...)
// are logged at Info when a pubsub was stopped on purpose at either end
// (this node's, or a peer's that retired its producers here before it
// went).
func ActorSystemLogger(zlog zerolog.Logger) actor.ConfigOption {
	return actor.WithLoggerFactory(func(system *actor.ActorSystem) *slog.Logger {
		return slog.New(stopAware{Handler: zerolog.NewSlogHandler(zlog), system: system})
	})
}

// stopAware is protoactor's log handler that downgrades its errors about
// the connection to a node stopped on purpose (pubsubs.stoppedOnPurpose) to
// Info.
type stopAware struct {
	slog.Handler
	system *actor.ActorSystem
}

func (h stopAware) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError && connectionErrors[r.Message] {
		var peer string
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "address" {
				peer = a.Value.String()
				return false
			}
			return true
		})
		if pubsubs.stoppedOnPurpose(h.system.Address(), peer) {
			if !h.Handler.Enabled(ctx, slog.LevelInfo) {
				return nil
			}
			r = r.Clone()
			r.Level = slog.LevelInfo
			r.AddAttrs(slog.String("cause", "node stopped on purpose"))
		}
	}
	return h.Handler.Handle(ctx, r)
}

// connectionErrors are protoactor's endpoint writer errors (remote
// endpoint_writer.go) about its connection to the node at "address".
var connectionErrors = map[string]bool{
	"EndpointWriter lost connection":                    true,
	"EndpointWriter failed to connect":                  true,
	"EndpointWriter failed to create receive stream":    true,
	"EndpointWriter failed to send connect request":     true,
	"EndpointWriter failed to receive connect response": true,
}

func (h stopAware) WithAttrs(as []slog.Attr) slog.Handler {
	return stopAware{Handler: h.Handler.WithAttrs(as), system: h.system}
}

func (h stopAware) WithGroup(name string) slog.Handler {
	return stopAware{Handler: h.Handler.WithGroup(name), system: h.system}
}
