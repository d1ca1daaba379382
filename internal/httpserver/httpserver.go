// Package httpserver serves the operational endpoints: /metrics, /healthz,
// /livez and /readyz, and nothing else. It builds its own mux, so nothing
// registered on http.DefaultServeMux (pprof, for one) is exposed by accident.
package httpserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"

	"github.com/projector/projector/internal/health"
)

// Config configures the server.
type Config struct {
	Addr string
	// Pprof also serves /debug/pprof/; off by default because profiles
	// reveal internals and cost CPU.
	Pprof bool
}

// Server is the HTTP server.
type Server struct {
	cfg    Config
	log    *zap.Logger
	srv    *http.Server
	health *health.Status
}

// New builds the server; Run starts it. /readyz reports the problems open
// on h; health.Status.Watch keeps the stores' part of them current.
func New(cfg Config, log *zap.Logger, gatherer prometheus.Gatherer, h *health.Status) *Server {
	s := &Server{cfg: cfg, log: log, health: h}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.HandleFunc("GET /livez", s.livez)
	if cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	s.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
	}
	return s
}

// Run listens on the configured address until ctx ends, then shuts down.
func (s *Server) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", s.cfg.Addr, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.log.Info("serving /metrics, /healthz, /livez and /readyz", zap.String("addr", ln.Addr().String()))
	errc := make(chan error, 1)
	go func() { errc <- s.srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(shutdownCtx)
	if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	return err
}

// livez answers 200 unless the process is wedged in a way only a restart
// cures (health.Status.Live), for a liveness probe; /healthz only says the
// process serves HTTP.
func (s *Server) livez(w http.ResponseWriter, _ *http.Request) {
	if err := s.health.Live(); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "not live:", err)
		return
	}
	fmt.Fprintln(w, "live")
}

// readyz answers 200 when no component reports a problem, otherwise 503
// with one reason a line.
func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	problems := s.health.Problems()
	if len(problems) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "not ready:")
		fmt.Fprintln(w, strings.Join(problems, "\n"))
		return
	}
	fmt.Fprintln(w, "ready")
}
