package echopubsub

import (
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// MaxFrameBytes is the gRPC message limit RemoteConfig sets on both sides.
// protoactor's endpoint writer packs many queued messages into one frame;
// over the limit the stream is torn down and every queued message is dropped
// silently, so the limit sits far above Config.MaxBatchBytes.
const MaxFrameBytes = 64 << 20

// RemoteConfig returns the protoactor remote configuration EchoPubSub is
// meant to run on. Start the remote with it before Start:
//
//	r := remote.NewRemote(system, echopubsub.RemoteConfig("127.0.0.1", 8090, zlog))
//	r.Start()
//
// It adds, before opts:
//   - the edge guard (guardStream) around protoactor's gRPC stream handler:
//     what a peer may send to this node's pubsubs, checked in one place;
//     malformed traffic closes only that peer's stream;
//   - a 64 MiB message limit on the server and on dials (see MaxFrameBytes);
//   - keepalive pings (every 2 s, 2 s timeout) so a silently dead peer is
//     noticed in seconds rather than at TCP's timeout, and a server policy
//     that accepts them;
//   - a 2 s connect timeout and a single connect attempt per endpoint, so a
//     cut-off peer fails fast and is retried by EchoPubSub's own loop;
//   - endpoint queues that start at 4096 slots and grow, instead of
//     protoactor's preallocated 1,000,000 (16 MiB per peer, scanned by the GC).
//
// Without WithTLS among opts, node-to-node traffic is plaintext and a peer's
// addresses are what it says they are: the guard still keeps non-members and
// system messages away from the pubsubs, but only WithTLS proves who a peer
// is (see README, "Securing a cluster").
func RemoteConfig(host string, port int, log zerolog.Logger, opts ...remote.ConfigOption) *remote.Config {
	base := []remote.ConfigOption{
		remote.WithServerOptions(
			grpc.ChainStreamInterceptor(guardStream(log)),
			grpc.MaxRecvMsgSize(MaxFrameBytes),
			grpc.MaxSendMsgSize(MaxFrameBytes),
			grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
			grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * time.Second, Timeout: 2 * time.Second}),
		),
		remote.WithDialOptions(
			grpc.WithInsecure(), //nolint:staticcheck // protoactor's own default
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxFrameBytes), grpc.MaxCallSendMsgSize(MaxFrameBytes)),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 2 * time.Second, Timeout: 2 * time.Second, PermitWithoutStream: true}),
			grpc.WithConnectParams(grpc.ConnectParams{MinConnectTimeout: 2 * time.Second}),
		),
	}
	// protoactor preallocates a 1,000,000-slot queue per endpoint (16 MiB of
	// pointers the GC scans on every cycle); the queue grows on demand, so
	// start small.
	base = append(base, remote.WithEndpointWriterQueueSize(4096), remote.WithEndpointManagerQueueSize(4096))
	cfg := remote.Configure(host, port, append(base, opts...)...)
	cfg.MaxRetryCount = 1
	return cfg
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
func ActorSystemLogger(zlog zerolog.Logger) actor.ConfigOption {
	return actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(zerolog.NewSlogHandler(zlog))
	})
}
