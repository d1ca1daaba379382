package services

import (
	"context"
	"crypto/sha1"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"
)

// No package registry these machines reach ships the Qdrant server, but
// crates.io ships its engine, the crate qdrant-edge. qdrant-engine/ is the
// project's own small server of Qdrant's gRPC API on that engine; it is
// built here with cargo once per source (about 8 minutes on two cores),
// outside the work tree so a clean checkout reuses it. A real Qdrant server
// takes precedence: QDRANT_BIN names one to run instead, QDRANT_ADDR
// (host:port, gRPC) one already running, which the suite then shares (the
// secured instance and the tests' private servers still come from
// QDRANT_BIN or qdrant-engine). The service qdrant is two servers: the
// plain one (unless QDRANT_ADDR) and qdrant-secure, with an API key and TLS.

func (r *Runner) qdrant() service {
	home := filepath.Join(r.cfg.servicesDir(), "qdrant")
	secureHome := filepath.Join(r.cfg.servicesDir(), "qdrant-secure")
	return service{
		name: "qdrant",
		addr: func() string {
			if r.cfg.QdrantAddr != "" {
				return r.cfg.QdrantAddr
			}
			return fmt.Sprintf("127.0.0.1:%d", r.cfg.QdrantGRPCPort)
		},
		up:    r.qdrantRunning,
		start: func(ctx context.Context) error { return r.startQdrant(ctx, home, secureHome) },
		wait:  r.waitQdrant,
		stop:  r.stopQdrant,
		kill: func(ctx context.Context) error {
			if err := r.killPIDService(ctx, "qdrant-secure"); err != nil {
				return err
			}
			return r.killPIDService(ctx, "qdrant")
		},
		data: func(context.Context) []string { return []string{home, secureHome} },
	}
}

// engineKey is a hash of all qdrant-engine is built from (lock file,
// manifest, toolchain and sources), so a change to any of them builds it
// again: the first 12 hex digits of the SHA-1 of sha1sum's lines for those
// files in byte order, as the script computed it, so the cache it filled
// is found again.
func engineKey(src string) (string, error) {
	var files []string
	for _, root := range []string{"Cargo.lock", "Cargo.toml", "rust-toolchain.toml", "src"} {
		err := filepath.WalkDir(filepath.Join(src, root), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Type().IsRegular() {
				rel, err := filepath.Rel(src, path)
				if err != nil {
					return err
				}
				files = append(files, rel)
			}
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("qdrant: hash the sources of qdrant-engine: %w", err)
		}
	}
	sort.Strings(files)
	all := sha1.New()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return "", fmt.Errorf("qdrant: hash the sources of qdrant-engine: %w", err)
		}
		sum := sha1.Sum(b)
		fmt.Fprintf(all, "%s  %s\n", hex.EncodeToString(sum[:]), f)
	}
	return hex.EncodeToString(all.Sum(nil))[:12], nil
}

// qdrantBinPath is where the Qdrant server to run is, without building it:
// QDRANT_BIN, else qdrant-engine in the cache under its source's key.
func (r *Runner) qdrantBinPath() (string, error) {
	if r.cfg.QdrantBin != "" {
		return r.cfg.QdrantBin, nil
	}
	key, err := engineKey(filepath.Join(r.cfg.Root, "qdrant-engine"))
	if err != nil {
		return "", err
	}
	return r.cfg.QdrantEngineCache + "/" + key + "/qdrant-engine", nil
}

// qdrantBin returns the Qdrant server to run, building qdrant-engine first
// if this source has not been built yet.
func (r *Runner) qdrantBin(ctx context.Context) (string, error) {
	bin, err := r.qdrantBinPath()
	if err != nil {
		return "", err
	}
	if r.cfg.QdrantBin != "" {
		if !executable(bin) {
			return "", fmt.Errorf("qdrant: QDRANT_BIN=%s is not an executable file", bin)
		}
		return bin, nil
	}
	if executable(bin) {
		return bin, nil
	}
	return bin, r.buildEngine(ctx, bin)
}

// buildEngine builds qdrant-engine/ with cargo, with its locked
// dependencies from crates.io, on the toolchain its rust-toolchain.toml
// names, into dest.
func (r *Runner) buildEngine(ctx context.Context, dest string) error {
	src := filepath.Join(r.cfg.Root, "qdrant-engine")
	logf := filepath.Join(r.cfg.logDir(), "qdrant-engine-build.log")
	if _, err := exec.LookPath("cargo"); err != nil {
		return fmt.Errorf("qdrant: cargo not found; install Rust with rustup (qdrant-engine needs its nightly toolchain), or set QDRANT_BIN to a Qdrant server")
	}
	toolchain := exec.CommandContext(ctx, "rustup", "which", "rustc")
	toolchain.Dir = src
	if toolchain.Run() != nil {
		return fmt.Errorf("qdrant: the Rust toolchain of qdrant-engine/rust-toolchain.toml is not installed (rustup toolchain install nightly), or set QDRANT_BIN to a Qdrant server")
	}
	r.logf("qdrant: building qdrant-engine (Qdrant's engine, the crate qdrant-edge, behind the project's Qdrant API server) into %s; about 8 minutes on two cores, once per source; log in %s", filepath.Dir(dest), logf)
	cargo := exec.CommandContext(ctx, "cargo", "build", "--release", "--locked")
	cargo.Dir = src
	cargo.Env = append(os.Environ(), "CARGO_TARGET_DIR="+r.cfg.QdrantEngineCache+"/target")
	if err := overwritten(cargo, logf); err != nil {
		return &Failure{Service: "qdrant", Log: logf, Reason: "cargo could not build qdrant-engine"}
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	b, err := os.ReadFile(r.cfg.QdrantEngineCache + "/target/release/qdrant-engine")
	if err != nil {
		return err
	}
	if err := writeFile(dest+".part", b, 0o755); err != nil {
		return err
	}
	return os.Rename(dest+".part", dest)
}

// qdrantConfig is one server's configuration, written on every start so
// that port overrides take effect. The secured server (apiKey set)
// requires the key and serves REST and gRPC over TLS only. qdrant-engine
// takes Qdrant's keys.
func qdrantConfig(home string, http, grpc int, apiKey, tlsDir string) string {
	s := fmt.Sprintf(`# Written by scripts/services.sh on every start; edits are lost.
log_level: INFO
telemetry_disabled: true
storage:
  storage_path: %[1]s/storage
  snapshots_path: %[1]s/snapshots
service:
  host: 127.0.0.1
  http_port: %[2]d
  grpc_port: %[3]d
`, home, http, grpc)
	if apiKey != "" {
		s += fmt.Sprintf(`  api_key: %s
  enable_tls: true
tls:
  cert: %[2]s/server.crt
  key: %[2]s/server.key
`, apiKey, tlsDir)
	}
	return s
}

// writeQdrantConfig writes home/config.yaml; it may hold the API key, so
// it is readable by this user only.
func writeQdrantConfig(home, config string) error {
	if err := os.MkdirAll(home, 0o755); err != nil {
		return err
	}
	return writeFile(filepath.Join(home, "config.yaml"), []byte(config), 0o600)
}

// qdrantExternalUp reports whether the server of QDRANT_ADDR accepts connections.
func (r *Runner) qdrantExternalUp() bool {
	c, err := net.DialTimeout("tcp", r.cfg.QdrantAddr, 3*time.Second)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

func (r *Runner) qdrantRunning(context.Context) bool {
	if _, ok := r.runningPID("qdrant-secure"); !ok {
		return false
	}
	if r.cfg.QdrantAddr != "" {
		return r.qdrantExternalUp()
	}
	_, ok := r.runningPID("qdrant")
	return ok
}

func (r *Runner) startQdrant(ctx context.Context, home, secureHome string) error {
	if r.qdrantRunning(ctx) {
		r.logf("qdrant: already running")
		return nil
	}
	if err := r.stopQdrant(ctx); err != nil {
		return err
	}
	ports := []struct {
		port     int
		variable string
	}{{r.cfg.QdrantSecureHTTPPort, "QDRANT_SECURE_HTTP_PORT"}, {r.cfg.QdrantSecureGRPCPort, "QDRANT_SECURE_GRPC_PORT"}}
	if r.cfg.QdrantAddr == "" {
		ports = append([]struct {
			port     int
			variable string
		}{{r.cfg.QdrantHTTPPort, "QDRANT_HTTP_PORT"}, {r.cfg.QdrantGRPCPort, "QDRANT_GRPC_PORT"}}, ports...)
	}
	for _, p := range ports {
		if err := requireFreePort(ctx, "qdrant", p.port, p.variable); err != nil {
			return err
		}
	}
	bin, err := r.qdrantBin(ctx)
	if err != nil {
		return err
	}
	apiKey, err := r.secret("qdrant-api-key")
	if err != nil {
		return err
	}
	c := r.cfg
	if err := writeQdrantConfig(secureHome, qdrantConfig(secureHome, c.QdrantSecureHTTPPort, c.QdrantSecureGRPCPort, apiKey, c.tlsDir())); err != nil {
		return err
	}
	// Qdrant looks for its optional config/ directory in its working directory.
	if c.QdrantAddr == "" {
		if err := writeQdrantConfig(home, qdrantConfig(home, c.QdrantHTTPPort, c.QdrantGRPCPort, "", "")); err != nil {
			return err
		}
		r.logf("qdrant: starting %s on 127.0.0.1:%d (gRPC) and :%d (REST); with an API key and TLS on :%d and :%d",
			bin, c.QdrantGRPCPort, c.QdrantHTTPPort, c.QdrantSecureGRPCPort, c.QdrantSecureHTTPPort)
		if err := r.launch("qdrant", home, bin, "--config-path", home+"/config.yaml"); err != nil {
			return err
		}
	} else {
		r.logf("qdrant: using the Qdrant server at %s (QDRANT_ADDR); starting %s with an API key and TLS on :%d and :%d",
			c.QdrantAddr, bin, c.QdrantSecureGRPCPort, c.QdrantSecureHTTPPort)
	}
	return r.launch("qdrant-secure", secureHome, bin, "--config-path", secureHome+"/config.yaml")
}

func (r *Runner) stopQdrant(ctx context.Context) error {
	if err := r.stopPIDService(ctx, "qdrant-secure"); err != nil {
		return err
	}
	return r.stopPIDService(ctx, "qdrant")
}

// qdrantReady reports whether the REST /readyz at url answers 200, which
// it does once the collections on disk are loaded; the gRPC port opens
// only then too.
func qdrantReady(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s/readyz: %s", url, resp.Status)
	}
	return nil
}

// qdrantVersion says what serves the index, from the REST root at url: the
// Qdrant server's version, or qdrant-engine's API version and engine.
// apiKey, when set, is sent as the secured server requires.
func qdrantVersion(ctx context.Context, client *http.Client, url, apiKey string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/", nil)
	if err != nil {
		return "version unknown"
	}
	if apiKey != "" {
		req.Header.Set("api-key", apiKey)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "version unknown"
	}
	defer resp.Body.Close()
	var root struct{ Version, Engine string }
	if resp.StatusCode >= 400 || json.NewDecoder(resp.Body).Decode(&root) != nil {
		return "version unknown"
	}
	return describeQdrant(root.Version, root.Engine)
}

func describeQdrant(version, engine string) string {
	if engine != "" {
		return fmt.Sprintf("qdrant-engine: Qdrant API %s on Qdrant's engine %s", version, engine)
	}
	if version == "" {
		version = "of unknown version"
	}
	return "the Qdrant server " + version
}

func (r *Runner) waitQdrant(ctx context.Context) error {
	c := r.cfg
	plain := &http.Client{Timeout: 3 * time.Second}
	roots, err := readCA(filepath.Join(c.tlsDir(), "ca.crt"))
	if err != nil {
		return err
	}
	secured := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}
	defer secured.CloseIdleConnections()
	plainURL := fmt.Sprintf("http://127.0.0.1:%d", c.QdrantHTTPPort)
	secureURL := fmt.Sprintf("https://127.0.0.1:%d", c.QdrantSecureHTTPPort)
	if c.QdrantAddr == "" {
		if err := r.waitUntil(ctx, "qdrant", c.logFile("qdrant"), c.StartTimeoutQdrant, r.qdrantRunning, func(ctx context.Context) error {
			return qdrantReady(ctx, plain, plainURL)
		}); err != nil {
			return err
		}
	} else {
		deadline := time.Now().Add(c.StartTimeoutQdrant)
		for !r.qdrantExternalUp() {
			if !time.Now().Before(deadline) {
				return fmt.Errorf("qdrant: nothing answers on QDRANT_ADDR=%s after %s", c.QdrantAddr, seconds(c.StartTimeoutQdrant))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(r.poll):
			}
		}
	}
	if err := r.waitUntil(ctx, "qdrant-secure", c.logFile("qdrant-secure"), c.StartTimeoutQdrant, r.pidUp("qdrant-secure"), func(ctx context.Context) error {
		return qdrantReady(ctx, secured, secureURL)
	}); err != nil {
		return err
	}
	if c.QdrantAddr == "" {
		r.logf("qdrant: up on 127.0.0.1:%d (%s); API key and TLS on 127.0.0.1:%d", c.QdrantGRPCPort, qdrantVersion(ctx, plain, plainURL, ""), c.QdrantSecureGRPCPort)
	} else {
		apiKey, err := r.secret("qdrant-api-key")
		if err != nil {
			return err
		}
		r.logf("qdrant: the Qdrant server at %s answers; API key and TLS on 127.0.0.1:%d (%s)", c.QdrantAddr, c.QdrantSecureGRPCPort,
			qdrantVersion(ctx, secured, secureURL, apiKey))
	}
	return nil
}
