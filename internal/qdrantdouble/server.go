// Package qdrantdouble is an in-process test double of Qdrant's gRPC API, for
// machines where no Qdrant can run (no Docker, no network). It is not a Qdrant:
// users run the real one (docker-compose.yml, image qdrant/qdrant).
//
// The double is built on the go-client's own generated server interfaces, so
// the wire format is Qdrant's by construction. Its behaviour follows Qdrant's
// documentation and source for the calls the projector makes, including the
// exact error codes and messages a caller may branch on; every other RPC
// answers codes.Unimplemented, and every request option the double cannot
// honour faithfully is refused (codes.Unimplemented) rather than ignored.
//
// Implemented: HealthCheck; collections Create (one unnamed dense vector),
// CollectionExists, Get, List, Delete; points CreateFieldIndex (keyword,
// integer), Upsert, Delete, Get, Count, Scroll and Facet, with filters made of
// must, must_not, should, min_should, field match / match-any / match-except,
// range, is_empty, is_null, has_id and nested filters.
//
// It scales as Qdrant does for the projector's calls, so that end-to-end
// tests draining 100,000 documents measure the projector rather than the
// double: payload indexes are inverted indexes kept up to date by every
// write, a filter whose must holds a match on an indexed key or a has_id is
// evaluated only on the points those name (plan.go), and scrolls read the
// points in id order from an ordered index instead of sorting the collection
// for every page. BenchmarkDrainBatch measures a drain's batch.
package qdrantdouble

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Version is what HealthCheck reports. The go-client compares major and minor
// with its own on connect, so it names the Qdrant release whose behaviour the
// double follows; the suffix keeps a double from passing for a real server.
const Version = "1.17.0-double"

// healthCheckMethod is the one RPC Qdrant answers without an API key, so that
// liveness probes and the client's version check work before authentication.
const healthCheckMethod = "/qdrant.Qdrant/HealthCheck"

// Options configures a Server.
type Options struct {
	// APIKey, when non-empty, must accompany every call except HealthCheck,
	// as metadata "api-key" or "authorization: Bearer <key>", exactly as a
	// Qdrant started with service.api_key requires. Empty disables the check.
	APIKey string
	// TLS, when set, makes Start serve over TLS with its certificate, as a
	// Qdrant started with service.enable_tls does; nil serves plain gRPC.
	TLS *tls.Config
}

// Server holds the double's state and serves it over gRPC. All of its state is
// in memory and lives as long as the Server; it is safe for concurrent use.
type Server struct {
	apiKey string
	tls    *tls.Config
	store  *store
}

// New returns an empty Server: no collections.
func New(opts Options) *Server {
	return &Server{apiKey: opts.APIKey, tls: opts.TLS, store: newStore()}
}

// Register adds the Qdrant, Collections and Points services to g.
//
// The API key check is wrapped around each method handler of the services
// rather than installed as a server interceptor, so it holds whatever options
// g was built with, and it covers the RPCs the double leaves unimplemented
// too: like Qdrant, an unauthenticated call is refused before it is decoded.
func (s *Server) Register(g *grpc.Server) {
	g.RegisterService(s.guarded(&qdrant.Qdrant_ServiceDesc), qdrantService{})
	g.RegisterService(s.guarded(&qdrant.Collections_ServiceDesc), &collectionsService{store: s.store})
	g.RegisterService(s.guarded(&qdrant.Points_ServiceDesc), &pointsService{store: s.store})
}

// guarded returns a copy of desc whose method handlers first check the API key.
// The generated descriptors have no streaming methods, so wrapping Methods
// covers every RPC.
func (s *Server) guarded(desc *grpc.ServiceDesc) *grpc.ServiceDesc {
	out := *desc
	out.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, m := range desc.Methods {
		fullMethod := "/" + desc.ServiceName + "/" + m.MethodName
		handler := m.Handler
		out.Methods[i] = grpc.MethodDesc{
			MethodName: m.MethodName,
			Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				if err := s.authenticate(ctx, fullMethod); err != nil {
					return nil, err
				}
				return handler(srv, ctx, dec, ic)
			},
		}
	}
	return &out
}

// authenticate applies Qdrant's API key rule to one call: HealthCheck is open;
// otherwise the key comes from "api-key" or an "authorization" bearer token,
// and both a missing and a wrong key are codes.Unauthenticated with Qdrant's
// messages.
func (s *Server) authenticate(ctx context.Context, fullMethod string) error {
	if s.apiKey == "" || fullMethod == healthCheckMethod {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	key, ok := "", false
	if v := md.Get("api-key"); len(v) > 0 {
		key, ok = v[0], true
	} else if v := md.Get("authorization"); len(v) > 0 {
		key, ok = strings.CutPrefix(v[0], "Bearer ")
	}
	if !ok {
		return status.Error(codes.Unauthenticated, "Must provide an API key or an Authorization bearer token")
	}
	if subtle.ConstantTimeCompare([]byte(key), []byte(s.apiKey)) != 1 {
		return status.Error(codes.Unauthenticated, "Invalid API key or JWT")
	}
	return nil
}

// Running is a Server listening on a TCP address, started by Start.
type Running struct {
	addr *net.TCPAddr
	srv  *grpc.Server
	done chan struct{}
	err  error // what Serve returned; written before done is closed
}

// Start listens on addr (use "127.0.0.1:0" in tests for a free port) and
// serves s until Close. ctx bounds only the listen: the server runs until
// Close, so its owner decides when it stops and waits for it.
func (s *Server) Start(ctx context.Context, addr string) (*Running, error) {
	var lc net.ListenConfig
	lis, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	serverOpts := []grpc.ServerOption{
		// Qdrant answers the go-client's keepalive pings (every 10 s, also
		// on idle connections); Go's default policy would send GOAWAY
		// "too_many_pings" after three and make every idle client reconnect.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}
	if s.tls != nil {
		serverOpts = append(serverOpts, grpc.Creds(credentials.NewTLS(s.tls)))
	}
	g := grpc.NewServer(serverOpts...)
	s.Register(g)
	r := &Running{addr: lis.Addr().(*net.TCPAddr), srv: g, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = g.Serve(lis)
	}()
	return r, nil
}

// Addr returns the address the server listens on, as host:port.
func (r *Running) Addr() string { return r.addr.String() }

// Port returns the TCP port the server listens on; with ":0" it is the one the
// system chose.
func (r *Running) Port() int { return r.addr.Port }

// Done is closed when the server has stopped serving, whether Close stopped it
// or the listener failed; Close then reports why.
func (r *Running) Done() <-chan struct{} { return r.done }

// Close stops the server, cancelling calls in flight and closing client
// connections, waits until its goroutine has returned, and reports a serve
// failure if there was one. Calling it more than once is safe.
func (r *Running) Close() error {
	r.srv.Stop()
	<-r.done
	if r.err != nil {
		return fmt.Errorf("serve: %w", r.err)
	}
	return nil
}

// qdrantService answers the Qdrant service, whose only RPC is HealthCheck.
type qdrantService struct {
	qdrant.UnimplementedQdrantServer
}

// HealthCheck reports the double's title and Version.
func (qdrantService) HealthCheck(context.Context, *qdrant.HealthCheckRequest) (*qdrant.HealthCheckReply, error) {
	return &qdrant.HealthCheckReply{Title: "qdrant - vector search engine (test double)", Version: Version}, nil
}
