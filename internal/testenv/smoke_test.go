package testenv_test

// Smoke tests of the real services that scripts/services.sh starts: each proves
// that the service is the real engine (not a fake) and that the few behaviours the
// projector depends on work: committed consumer offsets in Kafka, unique
// constraints with MERGE in Neo4j, INSERT ... ON CONFLICT in PostgreSQL.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/neo4j/neo4j-go-driver/v5/neo4j"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/projector/projector/internal/testenv"
)

// unique returns a name no other run of these tests uses.
func unique(prefix string) string {
	return fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
}

func TestKafkaSmoke(t *testing.T) {
	brokers := testenv.Brokers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	admCl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatalf("new admin client: %v", err)
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)

	// The real broker: ApiVersions matches Kafka 4.x and carries the KRaft
	// metadata.version feature, which only a KRaft broker finalizes.
	versions, err := adm.ApiVersions(ctx)
	if err != nil {
		t.Fatalf("api versions: %v", err)
	}
	for _, v := range versions.Sorted() {
		if v.Err != nil {
			t.Fatalf("api versions of broker %d: %v", v.NodeID, v.Err)
		}
		if got := v.VersionGuess(); !strings.HasPrefix(got, "v4.") {
			t.Errorf("broker %d version guess = %q, want v4.x", v.NodeID, got)
		}
		var features []string
		for _, f := range v.Raw().FinalizedFeatures {
			features = append(features, f.Name)
		}
		if !strings.Contains(strings.Join(features, ","), "metadata.version") {
			t.Errorf("broker %d finalized features = %v, want metadata.version among them", v.NodeID, features)
		}
	}

	topic, group := unique("smoke"), unique("smoke-group")
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, topic); err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}
	defer func() {
		if _, err := adm.DeleteGroup(context.Background(), group); err != nil {
			t.Logf("delete group %s: %v", group, err)
		}
		if _, err := adm.DeleteTopic(context.Background(), topic); err != nil {
			t.Logf("delete topic %s: %v", topic, err)
		}
	}()

	const total, firstBatch = 10, 4
	records := make([]*kgo.Record, total)
	for i := range records {
		records[i] = &kgo.Record{Topic: topic, Key: []byte("doc"), Value: []byte(strconv.Itoa(i))}
	}
	if err := admCl.ProduceSync(ctx, records...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	// The first member reads the first batch, commits it and leaves the group.
	first := poll(ctx, t, brokers, topic, group, firstBatch)
	for i, r := range first {
		if r.Offset != int64(i) {
			t.Fatalf("first consumer record %d offset = %d, want %d", i, r.Offset, i)
		}
	}

	offsets, err := adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("fetch offsets of %s: %v", group, err)
	}
	o, ok := offsets.Lookup(topic, 0)
	if !ok || o.Err != nil {
		t.Fatalf("committed offset of %s/0: found %v, err %v", topic, ok, o.Err)
	}
	if o.At != firstBatch {
		t.Fatalf("committed offset = %d, want %d", o.At, firstBatch)
	}

	// A new member of the same group resumes right after the committed offset.
	rest := poll(ctx, t, brokers, topic, group, total-firstBatch)
	for i, r := range rest {
		want := int64(firstBatch + i)
		if r.Offset != want || string(r.Value) != strconv.Itoa(int(want)) {
			t.Fatalf("second consumer record %d = offset %d value %q, want offset %d value %q",
				i, r.Offset, r.Value, want, strconv.Itoa(int(want)))
		}
	}
}

// poll joins group, reads n records of topic, commits them and closes the client.
func poll(ctx context.Context, t *testing.T, brokers []string, topic, group string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(brokers...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(),
	)
	if err != nil {
		t.Fatalf("new consumer: %v", err)
	}
	defer cl.Close()

	var got []*kgo.Record
	for len(got) < n {
		fetches := cl.PollRecords(ctx, n-len(got))
		if err := ctx.Err(); err != nil {
			t.Fatalf("poll %s: got %d records before %v, want %d", topic, len(got), err, n)
		}
		if errs := fetches.Errors(); len(errs) > 0 {
			t.Fatalf("poll %s: %v", topic, errs[0].Err)
		}
		got = append(got, fetches.Records()...)
	}
	if err := cl.CommitRecords(ctx, got...); err != nil {
		t.Fatalf("commit: %v", err)
	}
	return got
}

func TestNeo4jSmoke(t *testing.T) {
	uri := testenv.Neo4jURI(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	auth := neo4j.NoAuth()
	if pw := os.Getenv("PROJECTOR_NEO4J_PASSWORD"); pw != "" {
		auth = neo4j.BasicAuth(os.Getenv("PROJECTOR_NEO4J_USER"), pw, "")
	}
	driver, err := neo4j.NewDriverWithContext(uri, auth)
	if err != nil {
		t.Fatalf("new driver: %v", err)
	}
	defer driver.Close(ctx)
	run := func(cypher string, params map[string]any) (*neo4j.EagerResult, error) {
		return neo4j.ExecuteQuery(ctx, driver, cypher, params, neo4j.EagerResultTransformer)
	}

	// The real engine: Neo4j 5, community edition.
	res, err := run("CALL dbms.components() YIELD name, versions, edition RETURN name, versions[0] AS version, edition", nil)
	if err != nil {
		t.Fatalf("dbms.components: %v", err)
	}
	if len(res.Records) == 0 {
		t.Fatal("dbms.components returned no record")
	}
	c := res.Records[0].AsMap()
	if c["name"] != "Neo4j Kernel" || !strings.HasPrefix(fmt.Sprint(c["version"]), "5.") || c["edition"] != "community" {
		t.Fatalf("dbms.components = %v, want Neo4j Kernel 5.x community", c)
	}

	label, constraint := unique("Smoke"), unique("smoke_key")
	if _, err := run(fmt.Sprintf("CREATE CONSTRAINT %s IF NOT EXISTS FOR (n:%s) REQUIRE n.key IS UNIQUE", constraint, label), nil); err != nil {
		t.Fatalf("create constraint: %v", err)
	}
	defer func() {
		cleanup := context.Background()
		for _, q := range []string{
			fmt.Sprintf("MATCH (n:%s) DETACH DELETE n", label),
			fmt.Sprintf("DROP CONSTRAINT %s IF EXISTS", constraint),
		} {
			if _, err := neo4j.ExecuteQuery(cleanup, driver, q, nil, neo4j.EagerResultTransformer); err != nil {
				t.Logf("cleanup %q: %v", q, err)
			}
		}
	}()

	for i := range 2 {
		if _, err := run(fmt.Sprintf("MERGE (n:%s {key: $key}) SET n.seen = $i", label), map[string]any{"key": "k", "i": i}); err != nil {
			t.Fatalf("merge %d: %v", i, err)
		}
	}
	res, err = run(fmt.Sprintf("MATCH (n:%s {key: $key}) RETURN count(n) AS n", label), map[string]any{"key": "k"})
	if err != nil {
		t.Fatalf("count: %v", err)
	}
	if n, _ := res.Records[0].Get("n"); n != int64(1) {
		t.Fatalf("nodes after two MERGEs = %v, want 1", n)
	}

	_, err = run(fmt.Sprintf("CREATE (:%s {key: $key})", label), map[string]any{"key": "k"})
	var nerr *neo4j.Neo4jError
	if !errors.As(err, &nerr) || nerr.Code != "Neo.ClientError.Schema.ConstraintValidationFailed" {
		t.Fatalf("CREATE of a duplicate key: error %v, want Neo.ClientError.Schema.ConstraintValidationFailed", err)
	}
}

func TestPostgresSmoke(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		testenv.Missing(t, "PostgreSQL", "cannot connect: "+err.Error())
	}
	defer conn.Close(context.Background())

	// The real server; Debian 12 ships 15.
	var version string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		t.Fatalf("show server_version: %v", err)
	}
	major, err := strconv.Atoi(strings.SplitN(version, ".", 2)[0])
	if err != nil || major < 14 {
		t.Fatalf("server_version = %q, want 14 or newer", version)
	}

	schema := unique("smoke")
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create schema: %v", err)
	}
	defer func() {
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Logf("drop schema %s: %v", schema, err)
		}
	}()
	table := schema + ".kv"
	if _, err := conn.Exec(ctx, "CREATE TABLE "+table+" (k text PRIMARY KEY, v text NOT NULL)"); err != nil {
		t.Fatalf("create table: %v", err)
	}

	upsert := "INSERT INTO " + table + " (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v"
	steps := []struct {
		name, value string
	}{
		{name: "insert", value: "first"},
		{name: "update on conflict", value: "second"},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			tag, err := conn.Exec(ctx, upsert, "doc", step.value)
			if err != nil {
				t.Fatalf("upsert: %v", err)
			}
			if got := tag.RowsAffected(); got != 1 {
				t.Fatalf("rows affected = %d, want 1", got)
			}
			var n int
			var v string
			if err := conn.QueryRow(ctx, "SELECT count(*), max(v) FROM "+table).Scan(&n, &v); err != nil {
				t.Fatalf("select: %v", err)
			}
			if n != 1 || v != step.value {
				t.Fatalf("table holds %d rows, value %q; want 1 row, value %q", n, v, step.value)
			}
		})
	}
}
