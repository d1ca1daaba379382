package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/projector/projector/internal/bench"
)

// connectSink is the peer of `projector bench --peer-classpath`: the
// Debezium JDBC sink connector on a standalone Kafka Connect worker, run
// on the JVM from the jars scripts/peer-bench.sh fetches from Maven
// Central, writing into the same PostgreSQL as the projector.
type connectSink struct {
	java, classpath string
	brokers         string
	// postgresDSN is the projector's --postgres-dsn, in URL form.
	postgresDSN string
	batchSize   int
	// logDir keeps each run's worker log.
	logDir string
}

var _ bench.PeerSink = (*connectSink)(nil)

// Start writes the worker's and the connector's properties, starts the
// worker and returns a stop that ends it (SIGTERM, then SIGKILL).
func (c *connectSink) Start(ctx context.Context, topic, schema string, tasks int) (func() error, error) {
	pg, err := pgconn.ParseConfig(c.postgresDSN)
	if err != nil {
		return nil, fmt.Errorf("--postgres-dsn: %w", err)
	}
	dir, err := os.MkdirTemp("", "projector-peer-")
	if err != nil {
		return nil, err
	}
	port, err := freeTCPPort()
	if err != nil {
		return nil, err
	}
	worker := map[string]string{
		"bootstrap.servers":              c.brokers,
		"key.converter":                  "org.apache.kafka.connect.json.JsonConverter",
		"value.converter":                "org.apache.kafka.connect.json.JsonConverter",
		"key.converter.schemas.enable":   "true",
		"value.converter.schemas.enable": "true",
		"offset.storage.file.filename":   filepath.Join(dir, "offsets"),
		"listeners":                      "http://127.0.0.1:" + strconv.Itoa(port),
		"plugin.discovery":               "hybrid_warn",
		"consumer.max.poll.records":      strconv.Itoa(c.batchSize),
		"consumer.auto.offset.reset":     "earliest",
	}
	// stringtype=unspecified lets PostgreSQL cast the JSON converter's
	// strings into the table's uuid and jsonb columns.
	url := fmt.Sprintf("jdbc:postgresql://%s:%d/%s?stringtype=unspecified", pg.Host, pg.Port, pg.Database)
	connector := map[string]string{
		"name":                   "projector-peer-" + schema,
		"connector.class":        "io.debezium.connector.jdbc.JdbcSinkConnector",
		"tasks.max":              strconv.Itoa(tasks),
		"topics":                 topic,
		"connection.url":         url,
		"connection.username":    pg.User,
		"connection.password":    pg.Password,
		"insert.mode":            "upsert",
		"primary.key.mode":       "record_key",
		"primary.key.fields":     "chunk_id",
		"schema.evolution":       "none",
		"collection.name.format": schema + ".chunks",
		"batch.size":             strconv.Itoa(c.batchSize),
	}
	for name, props := range map[string]map[string]string{"worker.properties": worker, "connector.properties": connector} {
		var b strings.Builder
		for k, v := range props {
			fmt.Fprintf(&b, "%s=%s\n", k, v)
		}
		// The connector's file holds the password: this user's only.
		if err := os.WriteFile(filepath.Join(dir, name), []byte(b.String()), 0o600); err != nil {
			return nil, err
		}
	}
	logf, err := os.Create(filepath.Join(c.logDir, "peer-"+schema+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(c.java, "-Xmx1g", "-cp", c.classpath, "org.apache.kafka.connect.cli.ConnectStandalone",
		filepath.Join(dir, "worker.properties"), filepath.Join(dir, "connector.properties"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start %s: %w", c.java, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		defer os.RemoveAll(dir)
		defer logf.Close()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		return nil
	}
	// A worker that dies at once (a missing jar, a bad property) says so
	// in its log; report it rather than wait for rows that never come.
	select {
	case err := <-exited:
		stopped = true
		_ = logf.Close()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("the Connect worker exited at start (%v); see %s", err, logf.Name())
	case <-time.After(3 * time.Second):
	case <-ctx.Done():
		_ = stop()
		return nil, ctx.Err()
	}
	return stop, nil
}

func freeTCPPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	addr, ok := l.Addr().(*net.TCPAddr)
	if !ok {
		return 0, errors.New("not a TCP address")
	}
	return addr.Port, nil
}
