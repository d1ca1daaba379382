import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CountDownLatch;

import org.neo4j.configuration.GraphDatabaseSettings;
import org.neo4j.configuration.connectors.BoltConnector;
import org.neo4j.configuration.connectors.BoltConnectorInternalSettings;
import org.neo4j.configuration.connectors.HttpConnector;
import org.neo4j.configuration.connectors.HttpsConnector;
import org.neo4j.configuration.helpers.SocketAddress;
import org.neo4j.configuration.ssl.ClientAuth;
import org.neo4j.configuration.ssl.SslPolicyConfig;
import org.neo4j.configuration.ssl.SslPolicyScope;
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
 * The first instance has authentication off: the test suite and `make run` use it.
 * With the four optional arguments, the same JVM also runs a second, small instance
 * as production would: authentication on (user neo4j, password read from
 * PASSWORD_FILE on every start) and Bolt over TLS only (TLS_DIR/server.key and
 * server.crt). The security tests use it; sharing the JVM costs far less memory and
 * start time than a second JVM would.
 *
 * Usage: java -cp 'lib/*:classes' Main HOME_DIR BOLT_PORT [SECURE_HOME_DIR SECURE_BOLT_PORT TLS_DIR PASSWORD_FILE]
 */
public final class Main {
    public static void main(String[] args) throws InterruptedException {
        if (args.length != 2 && args.length != 6) {
            System.err.println("usage: Main HOME_DIR BOLT_PORT [SECURE_HOME_DIR SECURE_BOLT_PORT TLS_DIR PASSWORD_FILE]");
            System.exit(2);
        }
        Path home = Path.of(args[0]).toAbsolutePath();
        int boltPort = Integer.parseInt(args[1]);

        List<DatabaseManagementService> running = new ArrayList<>();
        CountDownLatch stopped = new CountDownLatch(1);
        // SIGTERM (and SIGINT) run the hooks: shut down cleanly, then let main return.
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            System.out.println("neo4j: shutting down");
            synchronized (running) {
                for (DatabaseManagementService dbms : running) {
                    dbms.shutdown();
                }
            }
            System.out.println("neo4j: stopped");
            stopped.countDown();
        }, "neo4j-shutdown"));

        // The secured instance starts beside the first one: starting both at
        // once takes less time than one after the other.
        CompletableFuture<Void> secured = args.length == 6
                ? CompletableFuture.runAsync(() -> startSecured(args, running))
                : CompletableFuture.completedFuture(null);
        DatabaseManagementService dbms = builder(home, boltPort)
                // Local use only: no users, no passwords (PROJECTOR_NEO4J_PASSWORD is empty).
                .setConfig(GraphDatabaseSettings.auth_enabled, false)
                // Sized for a 2-core CI machine next to Kafka and PostgreSQL.
                .setConfig(GraphDatabaseSettings.pagecache_memory, 256L * 1024 * 1024)
                .build();
        synchronized (running) {
            running.add(dbms);
        }
        System.out.println("neo4j: ready: " + version(dbms) + ", bolt on 127.0.0.1:" + boltPort);
        try {
            secured.join();
        } catch (CompletionException e) {
            // Stop the whole process (the hook shuts the first instance down), so
            // scripts/services.sh reports the failure with this log at once.
            e.getCause().printStackTrace();
            System.exit(1);
        }
        stopped.await();
    }

    /**
     * startSecured starts the second instance: authentication on, with the password
     * of PASSWORD_FILE, and Bolt over TLS only.
     */
    private static void startSecured(String[] args, List<DatabaseManagementService> running) {
        Path secureHome = Path.of(args[2]).toAbsolutePath();
        int securePort = Integer.parseInt(args[3]);
        Path tls = Path.of(args[4]).toAbsolutePath();
        String password;
        try {
            password = Files.readString(Path.of(args[5])).strip();
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
        SslPolicyConfig bolt = SslPolicyConfig.forScope(SslPolicyScope.BOLT);
        DatabaseManagementService secure = builder(secureHome, securePort)
                .setConfig(GraphDatabaseSettings.auth_enabled, true)
                .setConfig(BoltConnector.encryption_level, BoltConnector.EncryptionLevel.REQUIRED)
                .setConfig(bolt.enabled, true)
                .setConfig(bolt.base_directory, tls)
                .setConfig(bolt.private_key, tls.resolve("server.key"))
                .setConfig(bolt.public_certificate, tls.resolve("server.crt"))
                .setConfig(bolt.trusted_dir, tls.resolve("trusted"))
                .setConfig(bolt.revoked_dir, tls.resolve("revoked"))
                .setConfig(bolt.client_auth, ClientAuth.NONE)
                .setConfig(GraphDatabaseSettings.pagecache_memory, 32L * 1024 * 1024)
                .build();
        synchronized (running) {
            running.add(secure);
        }
        // The password comes from the file on every start, so changing the file
        // and restarting rotates it. CREATE OR REPLACE, unlike ALTER USER, also
        // accepts the password the user already has.
        secure.database(GraphDatabaseSettings.SYSTEM_DATABASE_NAME).executeTransactionally(
                "CREATE OR REPLACE USER neo4j SET PASSWORD $password CHANGE NOT REQUIRED",
                Map.of("password", password));
        System.out.println("neo4j: ready: " + version(secure) + ", bolt over TLS with authentication on 127.0.0.1:" + securePort);
    }

    /** builder returns the settings both instances share. */
    private static DatabaseManagementServiceBuilder builder(Path home, int boltPort) {
        return new DatabaseManagementServiceBuilder(home)
                .setUserLogProvider(new Log4jLogProvider(System.out, Level.INFO))
                .setConfig(BoltConnector.enabled, true)
                .setConfig(BoltConnector.listen_address, new SocketAddress("127.0.0.1", boltPort))
                .setConfig(HttpConnector.enabled, false)
                .setConfig(HttpsConnector.enabled, false)
                .setConfig(GraphDatabaseSettings.keep_logical_logs, "false")
                .setConfig(GraphDatabaseSettings.udc_enabled, false)
                // A stop (SIGTERM) should be quick: outage tests stop and start Neo4j
                // mid-stream. Bolt otherwise waits 5 s for connections even when idle
                // (internal settings, the only ones that control this wait).
                .setConfig(GraphDatabaseSettings.shutdown_transaction_end_timeout, Duration.ofSeconds(2))
                .setConfig(BoltConnectorInternalSettings.connection_shutdown_wait_time, Duration.ofSeconds(1))
                .setConfig(BoltConnectorInternalSettings.thread_pool_shutdown_wait_time, Duration.ofSeconds(1));
    }

    /** version returns e.g. "Neo4j Kernel 5.26.30 community". */
    private static String version(DatabaseManagementService dbms) {
        GraphDatabaseService db = dbms.database(GraphDatabaseSettings.DEFAULT_DATABASE_NAME);
        try (Transaction tx = db.beginTx();
                Result r = tx.execute("CALL dbms.components() YIELD name, versions, edition "
                        + "RETURN name + ' ' + versions[0] + ' ' + edition AS v")) {
            return String.valueOf(r.next().get("v"));
        }
    }
}
