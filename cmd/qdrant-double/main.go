// Command qdrant-double serves a test double of Qdrant's gRPC API, for
// machines that cannot run Qdrant (no Docker, no network). It is NOT a Qdrant:
// it keeps everything in memory, implements only the calls the projector makes
// (see package internal/qdrantdouble) and answers everything else with
// Unimplemented. Users run the real Qdrant, from docker-compose.yml (image
// qdrant/qdrant).
//
// Usage:
//
//	qdrant-double [--addr 127.0.0.1:6334] [--api-key-file FILE] [--tls-cert-file FILE --tls-key-file FILE]
//
// With --api-key-file every call but HealthCheck must carry that key, as with
// a Qdrant started with service.api_key. The key is read from the file so that
// it never appears in a process listing, and it is never logged. With
// --tls-cert-file and --tls-key-file it serves gRPC over TLS only, as a Qdrant
// started with service.enable_tls does.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"go.uber.org/zap"

	"github.com/projector/projector/internal/qdrantdouble"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "qdrant-double:", err)
		os.Exit(1)
	}
}

// run serves until ctx is cancelled (SIGINT, SIGTERM) or serving fails.
func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("qdrant-double", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:6334", "gRPC listen address (Qdrant's gRPC port is 6334)")
	keyFile := fs.String("api-key-file", "", "file holding the API key every call must carry; none if empty")
	certFile := fs.String("tls-cert-file", "", "PEM server certificate (chain): serve over TLS only; needs --tls-key-file")
	certKeyFile := fs.String("tls-key-file", "", "PEM private key of --tls-cert-file")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	apiKey, err := readAPIKey(*keyFile)
	if err != nil {
		return err
	}
	tlsConfig, err := serverTLS(*certFile, *certKeyFile)
	if err != nil {
		return err
	}

	log, err := zap.NewProduction()
	if err != nil {
		return fmt.Errorf("build logger: %w", err)
	}
	defer func() { _ = log.Sync() }()
	log = log.With(zap.String("component", "qdrant-double"))

	running, err := qdrantdouble.New(qdrantdouble.Options{APIKey: apiKey, TLS: tlsConfig}).Start(ctx, *addr)
	if err != nil {
		return err
	}
	log.Info("listening; this is a test double, not Qdrant",
		zap.String("addr", running.Addr()),
		zap.Bool("api_key_required", apiKey != ""),
		zap.Bool("tls", tlsConfig != nil),
		zap.String("version", qdrantdouble.Version))

	select {
	case <-ctx.Done():
	case <-running.Done():
	}
	return running.Close()
}

// readAPIKey returns the key in path without surrounding whitespace, or no key
// when path is empty. An empty key file is an error: it would silently turn
// authentication off.
func readAPIKey(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read api key: %w", err)
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", fmt.Errorf("read api key: %s is empty", path)
	}
	return key, nil
}

// serverTLS returns the TLS configuration of a certificate and its key, or
// nil when neither is given.
func serverTLS(certFile, keyFile string) (*tls.Config, error) {
	switch {
	case certFile == "" && keyFile == "":
		return nil, nil
	case certFile == "" || keyFile == "":
		return nil, errors.New("--tls-cert-file and --tls-key-file go together")
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load TLS certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}
