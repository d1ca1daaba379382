// Package graph is the graph store: documents and chunks in Neo4j.
//
// The layout is the contract's: (:Document {key}), (:Chunk {id}) and
// (:Document)-[:HAS_CHUNK]->(:Chunk), with unique constraints on
// Document.key and Chunk.id. Every write is a MERGE, sent as parameters of a
// constant Cypher statement, one transaction per batch.
package graph

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j/config"

	"github.com/projector/projector/internal/project"
)

// Config says how to reach Neo4j.
type Config struct {
	// URI is the Bolt URI; neo4j+s:// and bolt+s:// encrypt and verify the
	// server's certificate, +ssc encrypts without verifying.
	URI string
	// User and Password authenticate; an empty Password means none.
	User     string
	Password string
	// TLS, when set, replaces the driver's TLS configuration, e.g. to
	// trust a private CA (RootCAs). It needs an encrypted URI scheme: with
	// bolt:// or neo4j:// it would silently do nothing, so Open refuses it.
	TLS *tls.Config
	// Database is the database to use; empty means the server's default.
	Database string
}

// Store is the Neo4j adapter. It is safe for concurrent use.
type Store struct {
	driver   neo4j.DriverWithContext
	database string
}

var _ project.Graph = (*Store)(nil)

// Open creates a driver; it connects lazily. Use Ping to find out whether
// the server answers.
func Open(cfg Config) (*Store, error) {
	auth := neo4j.NoAuth()
	if cfg.Password != "" {
		auth = neo4j.BasicAuth(cfg.User, cfg.Password, "")
	}
	if cfg.TLS != nil && !encrypted(cfg.URI) {
		return nil, fmt.Errorf("neo4j URI %s: a TLS configuration (CA file) needs an encrypted scheme, neo4j+s:// or bolt+s://", redactURI(cfg.URI))
	}
	driver, err := neo4j.NewDriverWithContext(cfg.URI, auth, func(c *config.Config) {
		c.TlsConfig = cfg.TLS
		// The projector retries whole batches itself, with backoff and one
		// log line per outage; the driver's own retry loop only hides time.
		c.MaxTransactionRetryTime = 5 * time.Second
		c.SocketConnectTimeout = 5 * time.Second
		c.ConnectionAcquisitionTimeout = 10 * time.Second
	})
	if err != nil {
		return nil, fmt.Errorf("neo4j driver for %s: %w", redactURI(cfg.URI), err)
	}
	return &Store{driver: driver, database: cfg.Database}, nil
}

// encrypted reports whether uri's scheme makes the driver use TLS.
func encrypted(uri string) bool {
	scheme, _, _ := strings.Cut(uri, "://")
	return strings.HasSuffix(scheme, "+s") || strings.HasSuffix(scheme, "+ssc")
}

// redactURI drops any user information from a URI before it is printed.
func redactURI(uri string) string {
	if at := strings.LastIndex(uri, "@"); at >= 0 {
		if scheme := strings.Index(uri, "://"); scheme >= 0 && scheme < at {
			return uri[:scheme+3] + "***@" + uri[at+1:]
		}
	}
	return uri
}

// Close closes the driver and its connections.
func (s *Store) Close(ctx context.Context) error { return s.driver.Close(ctx) }

// Name is the store's label.
func (s *Store) Name() string { return project.StoreGraph }

// Ping checks that the server answers.
func (s *Store) Ping(ctx context.Context) error {
	return classify(ctx, s.driver.VerifyConnectivity(ctx))
}

// Migrate creates the constraints and the index the projector relies on. It
// is idempotent.
func (s *Store) Migrate(ctx context.Context) error {
	for _, stmt := range []string{
		`CREATE CONSTRAINT document_key IF NOT EXISTS FOR (d:Document) REQUIRE d.key IS UNIQUE`,
		`CREATE CONSTRAINT chunk_id IF NOT EXISTS FOR (c:Chunk) REQUIRE c.id IS UNIQUE`,
		`CREATE INDEX chunk_document_key IF NOT EXISTS FOR (c:Chunk) ON (c.document_key)`,
	} {
		if _, err := neo4j.ExecuteQuery(ctx, s.driver, stmt, nil, neo4j.EagerResultTransformer, s.queryConfig()); err != nil {
			return classify(ctx, fmt.Errorf("create graph schema: %w", err))
		}
	}
	return nil
}

func (s *Store) queryConfig() neo4j.ExecuteQueryConfigurationOption {
	return neo4j.ExecuteQueryWithDatabase(s.database)
}

func (s *Store) session(ctx context.Context, mode neo4j.AccessMode) neo4j.SessionWithContext {
	return s.driver.NewSession(ctx, neo4j.SessionConfig{AccessMode: mode, DatabaseName: s.database})
}

// The statements below only move a document forward in version: a
// document node takes a write of its version or a higher one, chunks are
// merged only under a document node of their version, and removals reach
// only versions up to the one written. So a late write of a member that
// lost its partition leaves a newer version as it is.
const mergeDocuments = `
UNWIND $docs AS d
MERGE (doc:Document {key: d.key})
WITH doc, d WHERE doc.version IS NULL OR doc.version <= d.version
SET doc.version = d.version, doc.title = d.title, doc.source = d.source,
	doc.metadata = d.metadata, doc.content_hash = d.content_hash`

const mergeChunks = `
UNWIND $chunks AS c
MATCH (doc:Document {key: c.document_key}) WHERE doc.version = c.version
MERGE (ch:Chunk {id: c.id})
SET ch.document_key = c.document_key, ch.version = c.version, ch.ordinal = c.ordinal,
	ch.text = c.text, ch.metadata = c.metadata
MERGE (doc)-[:HAS_CHUNK]->(ch)`

// deleteOtherChunks removes, per document, the chunks the write makes
// obsolete: older versions, and ordinals of the written version it did not
// write; for a withdrawal (live false) every version up to its own. The
// keep lists are per document so each check is against a short list.
const deleteOtherChunks = `
UNWIND $docs AS d
MATCH (ch:Chunk {document_key: d.key})
WHERE ch.version < d.version OR (ch.version = d.version AND (NOT d.live OR NOT ch.id IN d.ids))
DETACH DELETE ch`

// deleteDocuments removes withdrawn documents whose node is not of a newer
// version than the withdrawal.
const deleteDocuments = `
UNWIND $docs AS d
MATCH (doc:Document {key: d.key}) WHERE doc.version <= d.version
DETACH DELETE doc`

// Apply merges w in one write transaction.
func (s *Store) Apply(ctx context.Context, w *project.Write) error {
	docs := make([]map[string]any, 0, len(w.Live))
	keep := make([]map[string]any, 0, len(w.Live)+len(w.Withdrawn))
	var chunks []map[string]any
	for _, d := range w.Live {
		md, err := jsonOrNil(d.Metadata)
		if err != nil {
			return &project.StoreError{Store: project.StoreGraph, Kind: project.Rejected, Err: fmt.Errorf("document %q metadata: %w", d.Key, err)}
		}
		docs = append(docs, map[string]any{
			"key": d.Key, "version": d.Version, "title": d.Title, "source": d.Source,
			"metadata": md, "content_hash": d.ContentHash,
		})
		ids := make([]string, len(d.Chunks))
		for i, c := range d.Chunks {
			cmd, err := jsonOrNil(c.Metadata)
			if err != nil {
				return &project.StoreError{Store: project.StoreGraph, Kind: project.Rejected, Err: fmt.Errorf("chunk %s metadata: %w", c.ID, err)}
			}
			ids[i] = c.ID.String()
			chunks = append(chunks, map[string]any{
				"id": ids[i], "document_key": d.Key, "version": c.Version, "ordinal": int64(c.Ordinal),
				"text": c.Text, "metadata": cmd,
			})
		}
		keep = append(keep, map[string]any{"key": d.Key, "version": d.Version, "live": true, "ids": ids})
	}
	withdrawn := make([]map[string]any, len(w.Withdrawn))
	for i, d := range w.Withdrawn {
		withdrawn[i] = map[string]any{"key": d.Key, "version": d.Version}
		keep = append(keep, map[string]any{"key": d.Key, "version": d.Version, "live": false, "ids": []string{}})
	}
	sess := s.session(ctx, neo4j.AccessModeWrite)
	defer sess.Close(ctx)
	_, err := sess.ExecuteWrite(ctx, func(tx neo4j.ManagedTransaction) (any, error) {
		steps := []struct {
			query  string
			params map[string]any
			skip   bool
		}{
			{mergeDocuments, map[string]any{"docs": docs}, len(docs) == 0},
			{mergeChunks, map[string]any{"chunks": chunks}, len(chunks) == 0},
			{deleteOtherChunks, map[string]any{"docs": keep}, len(keep) == 0},
			{deleteDocuments, map[string]any{"docs": withdrawn}, len(withdrawn) == 0},
		}
		for _, st := range steps {
			if st.skip {
				continue
			}
			res, err := tx.Run(ctx, st.query, st.params)
			if err != nil {
				return nil, err
			}
			if _, err := res.Consume(ctx); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
	if err != nil {
		return classify(ctx, fmt.Errorf("write batch: %w", err))
	}
	return nil
}

// ChunkCounts returns the number of chunk nodes per document.
func (s *Store) ChunkCounts(ctx context.Context, keys []string) (map[string]int, error) {
	res, err := neo4j.ExecuteQuery(ctx, s.driver, `
UNWIND $keys AS k
MATCH (c:Chunk {document_key: k})
RETURN k, count(c) AS n`, map[string]any{"keys": keys}, neo4j.EagerResultTransformer, s.queryConfig(), neo4j.ExecuteQueryWithReadersRouting())
	if err != nil {
		return nil, classify(ctx, fmt.Errorf("count chunks: %w", err))
	}
	out := make(map[string]int, len(keys))
	for _, r := range res.Records {
		k, _ := r.Get("k")
		n, _ := r.Get("n")
		key, _ := k.(string)
		count, _ := n.(int64)
		out[key] = int(count)
	}
	return out, nil
}

// ChunkIDs returns, per document, the ids of the chunks it holds through a
// HAS_CHUNK relationship; a chunk node without it is not counted as held.
func (s *Store) ChunkIDs(ctx context.Context, keys []string) (map[string][]uuid.UUID, error) {
	res, err := neo4j.ExecuteQuery(ctx, s.driver, `
UNWIND $keys AS k
MATCH (c:Chunk {document_key: k})
WHERE EXISTS { MATCH (:Document {key: k})-[:HAS_CHUNK]->(c) }
RETURN k, c.id AS id`, map[string]any{"keys": keys}, neo4j.EagerResultTransformer, s.queryConfig(), neo4j.ExecuteQueryWithReadersRouting())
	if err != nil {
		return nil, classify(ctx, fmt.Errorf("list chunk ids: %w", err))
	}
	out := make(map[string][]uuid.UUID, len(keys))
	for _, r := range res.Records {
		k, _ := r.Get("k")
		v, _ := r.Get("id")
		key, _ := k.(string)
		s, _ := v.(string)
		id, err := uuid.Parse(s)
		if err != nil {
			// A chunk whose id is not a UUID was not written by the
			// projector; report it under the nil id so it counts as foreign.
			id = uuid.Nil
		}
		out[key] = append(out[key], id)
	}
	return out, nil
}

// jsonOrNil encodes metadata as a JSON string property; Neo4j properties
// cannot hold maps. nil metadata is no property at all.
func jsonOrNil(m map[string]any) (any, error) {
	if m == nil {
		return nil, nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// classify wraps a Neo4j error as a project.StoreError whose kind says
// whether retrying can help and whether a record is to blame (see
// docs/operations.md, "Store errors"). ctx is the failed call's: once it
// has ended, the error also says so in Go's terms.
func classify(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	err = project.WithContextErr(ctx, err)
	kind, limit := project.Transient, ""
	var n4j *neo4j.Neo4jError
	var auth *neo4j.InvalidAuthenticationError
	var gaveUp *neo4j.TransactionExecutionLimit
	switch {
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
	case errors.As(err, &auth), certificateRejected(err):
		kind = project.Fatal
	case errors.As(err, &n4j):
		kind, limit = kindOfCode(n4j.Code)
	case errors.As(err, &gaveUp) && len(gaveUp.Errors) > 0:
		// The driver retried a transient error until its retry time ran
		// out; the last one says what it was, but the driver's error does
		// not unwrap to it.
		if errors.As(gaveUp.Errors[len(gaveUp.Errors)-1], &n4j) {
			kind, limit = kindOfCode(n4j.Code)
		}
	case neo4j.IsRetryable(err):
	}
	return &project.StoreError{Store: project.StoreGraph, Kind: kind, LimitName: limit, Err: err}
}

// neo4jLimits are the Neo4j status codes of a limit of the server, not of
// a record, with the setting that sets the limit: a batch over it fails
// the same way however often it is retried, and every record of it would
// pass alone.
var neo4jLimits = map[string]string{
	"Neo.TransientError.General.MemoryPoolOutOfMemoryError":              "dbms.memory.transaction.total.max",
	"Neo.TransientError.General.TransactionMemoryLimit":                  "db.memory.transaction.max",
	"Neo.ClientError.Transaction.TransactionTimedOut":                    "db.transaction.timeout",
	"Neo.ClientError.Transaction.TransactionTimedOutClientConfiguration": "db.transaction.timeout",
}

// kindOfCode maps a Neo4j status code (Neo.<Classification>.<Category>.<Title>)
// to what the projector should do about it, and names the limit of a
// Limit. The projector's statements are constant and their parameters are
// checked, so a statement error is a record's only where it can come from
// a value (a type or argument the value breaks, a constraint); a missing
// parameter or a syntax error is the projector's own, and fatal.
func kindOfCode(code string) (project.ErrorKind, string) {
	if limit, ok := neo4jLimits[code]; ok {
		return project.Limit, limit
	}
	switch {
	case strings.HasPrefix(code, "Neo.TransientError."):
		return project.Transient, ""
	case strings.HasPrefix(code, "Neo.ClientError.Security."),
		strings.HasPrefix(code, "Neo.ClientError.Database."),
		strings.HasPrefix(code, "Neo.ClientError.Statement.SyntaxError"),
		strings.HasPrefix(code, "Neo.ClientError.Statement.ParameterMissing"),
		strings.HasPrefix(code, "Neo.ClientError.Procedure."),
		code == "Neo.ClientError.General.ForbiddenOnReadOnlyDatabase":
		return project.Fatal, ""
	case strings.HasPrefix(code, "Neo.ClientError.Schema.ConstraintValidationFailed"),
		strings.HasPrefix(code, "Neo.ClientError.Statement."):
		return project.Rejected, ""
	}
	return project.Transient, ""
}
