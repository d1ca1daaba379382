package main

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/projector/projector/internal/config"
)

func TestEmbedderFlagsResolve(t *testing.T) {
	keyFile := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(keyFile, []byte("file-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	httpArgs := []string{"--embedder", "http", "--embed-url", "http://tei", "--embed-model", "bge"}
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		dim     int    // the resolved dimension, when no error
		key     string // the resolved API key
		wantErr string
	}{
		{name: "hashing default", dim: 384},
		{name: "hashing with --vector-dim", args: []string{"--vector-dim", "64"}, dim: 64},
		{name: "hashing with --embed-dim", args: []string{"--embed-dim", "64"}, dim: 64},
		{name: "both, equal", args: []string{"--embed-dim", "64", "--vector-dim", "64"}, dim: 64},
		{name: "both, different", args: []string{"--embed-dim", "64", "--vector-dim", "32"}, wantErr: "disagree"},
		{name: "both, one from the environment", args: []string{"--embed-dim", "64"}, env: map[string]string{"PROJECTOR_VECTOR_DIM": "768"}, wantErr: "disagree"},
		{name: "http without a dimension", args: httpArgs, wantErr: "set --embed-dim"},
		{name: "http with --embed-dim", args: append([]string{"--embed-dim", "768"}, httpArgs...), dim: 768},
		{name: "http with --vector-dim", args: append([]string{"--vector-dim", "768"}, httpArgs...), dim: 768},
		{name: "http with PROJECTOR_EMBED_DIM", args: httpArgs, env: map[string]string{"PROJECTOR_EMBED_DIM": "1024"}, dim: 1024},
		{name: "http without a URL", args: []string{"--embedder", "http", "--embed-dim", "8", "--embed-model", "m"}, wantErr: "--embed-url"},
		{name: "http without a model", args: []string{"--embedder", "http", "--embed-dim", "8", "--embed-url", "http://x"}, wantErr: "--embed-model"},
		{name: "http, batch 0", args: append([]string{"--embed-dim", "8", "--embed-batch", "0"}, httpArgs...), wantErr: "--embed-batch"},
		{name: "unknown embedder", args: []string{"--embedder", "magic"}, wantErr: "want hashing or http"},
		{name: "key from the environment", args: append([]string{"--embed-dim", "8"}, httpArgs...), env: map[string]string{"PROJECTOR_EMBED_API_KEY": "env-key"}, dim: 8, key: "env-key"},
		{name: "key from a file", args: append([]string{"--embed-dim", "8", "--embed-api-key-file", keyFile}, httpArgs...), dim: 8, key: "file-key"},
		{name: "key twice", args: append([]string{"--embed-dim", "8", "--embed-api-key-file", keyFile}, httpArgs...), env: map[string]string{"PROJECTOR_EMBED_API_KEY": "env-key"}, wantErr: "not both"},
		{name: "key file missing", args: append([]string{"--embed-dim", "8", "--embed-api-key-file", keyFile + ".gone"}, httpArgs...), wantErr: "--embed-api-key-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			getenv := func(k string) string { return tt.env[k] }
			var f runFlags
			fs := newFlagSet("run", "run", env{stderr: io.Discard, getenv: getenv})
			f.register(fs)
			if err := parse(fs, tt.args, env{getenv: getenv}); err != nil {
				t.Fatal(err)
			}
			err := f.embed.resolve(fs, &f.stores.vectorDim, getenv)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("resolve = %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.stores.vectorDim != tt.dim || f.embed.dim != tt.dim {
				t.Errorf("dimension: index %d, embedder %d; want both %d", f.stores.vectorDim, f.embed.dim, tt.dim)
			}
			if f.embed.apiKey != tt.key {
				t.Errorf("API key = %q, want %q", f.embed.apiKey, tt.key)
			}
		})
	}
}

// The key must never be a flag: a flag value shows in ps and in -h.
func TestEmbedAPIKeyIsNoFlag(t *testing.T) {
	var f runFlags
	fs := newFlagSet("run", "run", env{stderr: io.Discard})
	f.register(fs)
	if fl := fs.Lookup("embed-api-key"); fl != nil {
		t.Errorf("flag --embed-api-key exists, want the key only from %s or a file", embedAPIKeyEnv)
	}
}

// Every PROJECTOR_* setting of the embeddings compose override and of
// docs/embeddings.md must be a flag of `projector run`, or the key.
func TestEmbeddingsDocsNameRealFlags(t *testing.T) {
	var f runFlags
	fs := newFlagSet("run", "run", env{stderr: io.Discard})
	f.register(fs)
	known := map[string]bool{embedAPIKeyEnv: true}
	fs.VisitAll(func(fl *flag.Flag) { known[config.EnvName(fl.Name)] = true })
	names := regexp.MustCompile(`PROJECTOR_[A-Z0-9_]+`)
	for _, path := range []string{"../../deploy/compose.embeddings.yml", "../../docs/embeddings.md"} {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names.FindAllString(string(b), -1) {
			if !known[name] {
				t.Errorf("%s names %s, which is no flag of projector run", path, name)
			}
		}
	}
}
