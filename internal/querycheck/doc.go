// Package querycheck holds a test, and only a test, that reads the
// service's own source: every SQL statement sent through pgx and every
// Cypher statement sent through the Neo4j driver must be a constant, with
// the values of a document passed as parameters, so that no document key,
// title or text can ever become part of a statement. The few statements
// that cannot be constants are listed, each with the reason it is safe.
package querycheck
