import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.CountDownLatch;

import org.neo4j.configuration.GraphDatabaseSettings;
import org.neo4j.configuration.connectors.BoltConnector;
import org.neo4j.configuration.connectors.BoltConnectorInternalSettings;
import org.neo4j.configuration.connectors.HttpConnector;
import org.neo4j.configuration.connectors.HttpsConnector;
import org.neo4j.configuration.helpers.SocketAddress;
import org.neo4j.dbms.api.DatabaseManagementService;
import org.neo4j.dbms.api.DatabaseManagementServiceBuilder;
import org.neo4j.graphdb.GraphDatabaseService;
import org.neo4j.graphdb.Result;
import org.neo4j.graphdb.Transaction;
import org.neo4j.logging.Level;
import org.neo4j.logging.log4j.Log4jLogProvider;

/**
 * Runs the real Neo4j Community engine (embedded DatabaseManagementService) with its
 * Bolt connector on 127.0.0.1, for local development and CI. Started by
 * scripts/services.sh; it keeps its data in the home directory across restarts and
 * shuts the database down cleanly on SIGTERM.
 *
 * Usage: java -cp 'lib/*:classes' Main HOME_DIR BOLT_PORT
 */
public final class Main {
    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: Main HOME_DIR BOLT_PORT");
            System.exit(2);
        }
        Path home = Path.of(args[0]).toAbsolutePath();
        int boltPort = Integer.parseInt(args[1]);

        DatabaseManagementService dbms = new DatabaseManagementServiceBuilder(home)
                .setUserLogProvider(new Log4jLogProvider(System.out, Level.INFO))
                .setConfig(BoltConnector.enabled, true)
                .setConfig(BoltConnector.listen_address, new SocketAddress("127.0.0.1", boltPort))
                .setConfig(HttpConnector.enabled, false)
                .setConfig(HttpsConnector.enabled, false)
                // Local use only: no users, no passwords (PROJECTOR_NEO4J_PASSWORD is empty).
                .setConfig(GraphDatabaseSettings.auth_enabled, false)
                // Sized for a 2-core CI machine next to Kafka and PostgreSQL.
                .setConfig(GraphDatabaseSettings.pagecache_memory, 256L * 1024 * 1024)
                .setConfig(GraphDatabaseSettings.keep_logical_logs, "false")
                .setConfig(GraphDatabaseSettings.udc_enabled, false)
                // A stop (SIGTERM) should be quick: outage tests stop and start Neo4j
                // mid-stream. Bolt otherwise waits 5 s for connections even when idle
                // (internal settings, the only ones that control this wait).
                .setConfig(GraphDatabaseSettings.shutdown_transaction_end_timeout, Duration.ofSeconds(2))
                .setConfig(BoltConnectorInternalSettings.connection_shutdown_wait_time, Duration.ofSeconds(1))
                .setConfig(BoltConnectorInternalSettings.thread_pool_shutdown_wait_time, Duration.ofSeconds(1))
                .build();

        // SIGTERM (and SIGINT) run the hooks: shut down cleanly, then let main return.
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            System.out.println("neo4j: shutting down");
            dbms.shutdown();
            System.out.println("neo4j: stopped");
            stopped.countDown();
        }, "neo4j-shutdown"));

        GraphDatabaseService db = dbms.database(GraphDatabaseSettings.DEFAULT_DATABASE_NAME);
        try (Transaction tx = db.beginTx();
                Result r = tx.execute("CALL dbms.components() YIELD name, versions, edition "
                        + "RETURN name + ' ' + versions[0] + ' ' + edition AS v")) {
            System.out.println("neo4j: ready: " + r.next().get("v") + ", bolt on 127.0.0.1:" + boltPort);
        }
        stopped.await();
    }
}
