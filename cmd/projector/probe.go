package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// probeCommand checks an HTTP endpoint of a running projector and exits 0
// when it answers 200. The container image has no shell and no HTTP
// client, so container health checks call the binary itself.
func probeCommand(ctx context.Context, args []string, e env) error {
	fs := newFlagSet("probe", "probe [--url URL]", e)
	url := fs.String("url", "http://127.0.0.1:8080/healthz", "endpoint to check: /healthz (alive) or /readyz (ready)")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	if err := parse(fs, args, e); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return &exitError{code: 2, err: fmt.Errorf("--url: %w", err)}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("probe %s: %w", *url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("probe %s: %s\n%s", *url, resp.Status, body)
	}
	fmt.Fprint(e.stdout, string(body))
	return nil
}
