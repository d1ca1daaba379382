package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/projector/projector/internal/embed"
	"github.com/projector/projector/internal/generation"
	"github.com/projector/projector/internal/project"
	"github.com/projector/projector/internal/store/postgres"
)

// embedAPIKeyEnv holds the embedding endpoint's API key. It is read
// directly, not through a flag, so the key never shows in `ps` or in -h.
const embedAPIKeyEnv = "PROJECTOR_EMBED_API_KEY"

// embedderFlags choose the embedder that gives chunks without a vector
// one, and configure the HTTP embedder. See docs/embeddings.md.
type embedderFlags struct {
	kind        string
	url         string
	model       string
	dim         int
	apiKeyFile  string
	timeout     time.Duration
	batch       int
	concurrency int
	cache       bool

	// apiKey is set by resolve from PROJECTOR_EMBED_API_KEY or
	// --embed-api-key-file; it is never logged or put in an error.
	apiKey string
}

func (f *embedderFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.kind, "embedder", "hashing", "how chunks without a vector get one: hashing (built in, deterministic, lexical similarity) or http (an OpenAI-compatible embeddings endpoint; see docs/embeddings.md)")
	fs.StringVar(&f.url, "embed-url", "", "with --embedder=http: the endpoint; requests go to the URL itself when its path ends in /embeddings, to <url>/embeddings when it ends in /v1, else to <url>/v1/embeddings")
	fs.StringVar(&f.model, "embed-model", "", "with --embedder=http: the model name sent with each request; it also keys the embedding cache")
	fs.IntVar(&f.dim, "embed-dim", 0, "the vector dimension; another name for --vector-dim: give either, or both with the same value (with --embedder=http one of them is required)")
	fs.StringVar(&f.apiKeyFile, "embed-api-key-file", "", "file holding the endpoint's API key, sent as a Bearer token (or set "+embedAPIKeyEnv+"; there is no flag for the key itself)")
	fs.DurationVar(&f.timeout, "embed-timeout", 30*time.Second, "timeout of one request to the embedding endpoint, response included; a timed-out request is retried")
	fs.IntVar(&f.batch, "embed-batch", 32, "texts per request to the embedding endpoint (text-embeddings-inference accepts 32 by default)")
	fs.IntVar(&f.concurrency, "embed-concurrency", 2, "requests in flight to the embedding endpoint at once, over all partitions")
	fs.BoolVar(&f.cache, "embed-cache", true, "with --embedder=http: keep each vector in PostgreSQL (table embedding_cache) by model and text, so replays and repeated texts reuse it instead of calling the model")
}

// resolve finishes the configuration once the flags are parsed: it settles
// the one vector dimension of the service (into *vectorDim, which the
// index and the event decoder use too) and reads the API key. fs tells
// which flags were given, on the command line or in the environment.
func (f *embedderFlags) resolve(fs *flag.FlagSet, vectorDim *int, getenv func(string) string) error {
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	switch {
	case given["embed-dim"] && given["vector-dim"] && f.dim != *vectorDim:
		return fmt.Errorf("--embed-dim=%d and --vector-dim=%d disagree: both name the one vector dimension (the embedder's, the Qdrant collection's and that of vectors in events); give one of them", f.dim, *vectorDim)
	case given["embed-dim"]:
		*vectorDim = f.dim
	case f.kind == "http" && !given["vector-dim"]:
		return errors.New("--embedder=http needs the model's vector dimension: set --embed-dim (e.g. 384 for BAAI/bge-small-en-v1.5, 768 for nomic-embed-text, 1536 for text-embedding-3-small)")
	}
	f.dim = *vectorDim
	if f.dim <= 0 {
		return fmt.Errorf("vector dimension %d: want > 0", f.dim)
	}
	switch f.kind {
	case "hashing":
		return nil
	case "http":
	default:
		return fmt.Errorf("--embedder %q: want hashing or http", f.kind)
	}
	switch {
	case f.url == "":
		return errors.New("--embedder=http needs --embed-url")
	case f.model == "":
		return errors.New("--embedder=http needs --embed-model (it is sent to the endpoint and keys the embedding cache)")
	case f.timeout <= 0:
		return fmt.Errorf("--embed-timeout %s: want > 0", f.timeout)
	case f.batch <= 0:
		return fmt.Errorf("--embed-batch %d: want > 0", f.batch)
	case f.concurrency <= 0:
		return fmt.Errorf("--embed-concurrency %d: want > 0", f.concurrency)
	}
	key := getenv(embedAPIKeyEnv)
	if f.apiKeyFile != "" {
		if key != "" {
			return errors.New("the embedding API key is set twice: use " + embedAPIKeyEnv + " or --embed-api-key-file, not both")
		}
		b, err := os.ReadFile(f.apiKeyFile)
		if err != nil {
			return fmt.Errorf("--embed-api-key-file: %w", err)
		}
		key = strings.TrimSpace(string(b))
	}
	f.apiKey = key
	return nil
}

// generation is the embedder of the flags as the generation registry
// records it (after resolve): what generation 1 gets when a migrate
// registers it, and what a member's flags must be one of.
func (f *embedderFlags) generation() generation.Embedder {
	e := generation.Embedder{Kind: f.kind, Dim: f.dim, Distance: generation.DistanceCosine}
	if f.kind == generation.EmbedderHTTP {
		e.Model, e.URL = f.model, f.url
	}
	return e
}

// openGeneration returns the embedder of generation g as the registry
// records it, with the transport settings of the flags (timeout, batch,
// concurrency, cache, API key): every member embeds a generation alike,
// whatever its own --embedder flags say.
func (f *embedderFlags) openGeneration(ctx context.Context, log *zap.Logger, reg prometheus.Registerer, rel *postgres.Store, g generation.Generation) (project.Embedder, error) {
	gf := *f
	gf.kind, gf.model, gf.url, gf.dim = g.Embedder.Kind, g.Embedder.Model, g.Embedder.URL, g.Embedder.Dim
	return gf.open(ctx, log.With(zap.Int("generation", g.Number)), reg, rel)
}

// open returns the embedder of the projection. With http it makes one
// probe request, waiting while the endpoint cannot be reached (in a
// compose file it starts with the projector) and stopping the service when
// it answers wrongly, with what to fix; it wraps the endpoint in the
// embedding cache of rel unless --embed-cache=false. The hashing embedder
// is a pure function of the text and is never cached.
func (f *embedderFlags) open(ctx context.Context, log *zap.Logger, reg prometheus.Registerer, rel *postgres.Store) (project.Embedder, error) {
	if f.kind != "http" {
		log.Info("embedding with the hashing embedder", zap.Int("dim", f.dim))
		return embed.NewHashing(f.dim), nil
	}
	h, err := embed.NewHTTP(embed.HTTPConfig{
		URL: f.url, Model: f.model, Dim: f.dim, APIKey: f.apiKey, Timeout: f.timeout,
		Batch: f.batch, Concurrency: f.concurrency,
	}, reg)
	if err != nil {
		return nil, err
	}
	if err := waitUntil(ctx, log, "embedding endpoint", h.Probe, storeTransient, zap.String("endpoint", h.Endpoint())); err != nil {
		return nil, fmt.Errorf("embedding endpoint check: %w", err)
	}
	log.Info("embedding with an HTTP endpoint", zap.String("endpoint", h.Endpoint()), zap.String("model", f.model),
		zap.Int("dim", f.dim), zap.Int("batch", f.batch), zap.Int("concurrency", f.concurrency), zap.Bool("cache", f.cache))
	if !f.cache {
		return h, nil
	}
	return embed.NewCached(h, postgres.NewEmbedCache(rel), f.model, reg), nil
}
