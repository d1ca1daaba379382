// Package e2e runs the real projector binary against the real Kafka broker,
// Qdrant, Neo4j and PostgreSQL, all started by scripts/services.sh, and checks what users would see: the stores' content,
// committed offsets, dead letters, metrics and exit codes.
//
// Long suites are sized by environment variables (see sizes.go) so CI can
// run them in minutes while a longer local run digs deeper.
package e2e
