// Package admin serves the operator's endpoint of a running projector, on
// a listener of its own (off unless --admin-addr is set) so that nothing of
// it is ever reachable through the metrics port: it lists the member's
// partitions with their state, and resumes a halted partition without a
// restart, which would rebalance every partition of the member. Kafka
// Connect users know the same as restarting a failed task.
//
//	GET  /partitions                              the partitions, as JSON
//	POST /partitions/{topic}/{partition}/resume   resume a halted partition
//
// With a token every request must carry "Authorization: Bearer <token>".
package admin

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/projector/projector/internal/consume"
)

// Partitions is what the endpoint needs of the consumer.
type Partitions interface {
	Partitions() []consume.PartitionState
	Resume(ctx context.Context, topic string, partition int32) error
}

var _ Partitions = (*consume.Consumer)(nil)

// Config configures the endpoint.
type Config struct {
	// Addr is the listen address, host:port.
	Addr string
	// Token, when set, is required as a bearer token.
	Token string
}

// Server is the admin endpoint.
type Server struct {
	cfg Config
	log *zap.Logger
	srv *http.Server
}

// resumeTimeout bounds a resume request: the poll loop serves it between
// two polls.
const resumeTimeout = 30 * time.Second

// New builds the endpoint over p; Run serves it.
func New(cfg Config, log *zap.Logger, p Partitions) *Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /partitions", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(p.Partitions())
	})
	mux.HandleFunc("POST /partitions/{topic}/{partition}/resume", func(w http.ResponseWriter, r *http.Request) {
		topic := r.PathValue("topic")
		partition, err := strconv.ParseInt(r.PathValue("partition"), 10, 32)
		if err != nil || partition < 0 {
			http.Error(w, "partition: want a whole number", http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), resumeTimeout)
		defer cancel()
		switch err := p.Resume(ctx, topic, int32(partition)); {
		case err == nil:
			log.Info("partition resumed through the admin endpoint", zap.String("topic", topic), zap.Int64("partition", partition),
				zap.String("remote", r.RemoteAddr))
			fmt.Fprintf(w, "resumed %s/%d\n", topic, partition)
		case errors.Is(err, consume.ErrNotAssigned):
			http.Error(w, err.Error(), http.StatusNotFound)
		case errors.Is(err, consume.ErrNotHalted):
			http.Error(w, err.Error(), http.StatusConflict)
		default:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
	var h http.Handler = mux
	if cfg.Token != "" {
		h = requireToken(cfg.Token, mux)
	}
	return &Server{cfg: cfg, log: log, srv: &http.Server{
		Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: resumeTimeout + 10*time.Second, IdleTimeout: 60 * time.Second,
	}}
}

// requireToken refuses requests without the bearer token, comparing in
// constant time so the token cannot be guessed byte by byte.
func requireToken(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "a bearer token is required (--admin-token-file)", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Run serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.cfg.Addr, err)
	}
	s.log.Info("serving the admin endpoint", zap.String("addr", ln.Addr().String()), zap.Bool("token", s.cfg.Token != ""))
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("admin endpoint: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(shutdownCtx)
	<-errc
	return nil
}

// Loopback reports whether addr listens on the loopback interface only,
// where the machine's own users are the only ones who can reach it.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
