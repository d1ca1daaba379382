//! qdrant-engine: the part of Qdrant's gRPC API that projector and its tests
//! use, served from Qdrant's own engine, the `qdrant-edge` crate (segments,
//! WAL, payload indexes, filters, search, optimizers), on disk.
//!
//! It stands in for the Qdrant server on machines that cannot get one; see
//! README.md for what it serves and how it differs from the server.
//!
//! Usage: qdrant-engine [--config-path FILE] | --version
//! Settings come from FILE and QDRANT__SECTION__KEY variables, as the
//! server's do (see config.rs).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use qdrant_client::qdrant::collections_server::CollectionsServer;
use qdrant_client::qdrant::points_server::PointsServer;
use qdrant_client::qdrant::qdrant_server::QdrantServer;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::codec::CompressionEncoding;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Identity, Server, ServerTlsConfig};

use qdrant_engine::config::{self, Config};
use qdrant_engine::grpc::{API_VERSION, ApiKey, CollectionsService, ENGINE, PointsService, QdrantService};
use qdrant_engine::storage::Storage;
use qdrant_engine::{http, stopped};

const USAGE: &str = "usage: qdrant-engine [--config-path FILE] | --version";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = match parse_args(&args) {
        Ok(Some(path)) => path,
        Ok(None) => {
            println!("qdrant-engine {} (Qdrant API {API_VERSION}, {ENGINE})", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("qdrant-engine: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let cfg = match config::load(path.as_deref(), std::env::vars()) {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("qdrant-engine: {e}");
            return ExitCode::from(2);
        }
    };
    // The engine warns "Feature flags not initialized!" at each segment it
    // opens: its flags are the server's defaults and a crate user cannot
    // set them (the setter is private), so the warning says nothing.
    let filter = format!("{},qdrant_edge::common::flags=error", cfg.log_level.to_lowercase());
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(filter)).init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("qdrant-engine: start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cfg)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// The config path to run with (None: print the version), or why the
/// arguments are wrong.
fn parse_args(args: &[String]) -> Result<Option<Option<PathBuf>>, String> {
    match args {
        [] => Ok(Some(None)),
        [flag] if flag == "--version" => Ok(None),
        [flag, path] if flag == "--config-path" => Ok(Some(Some(PathBuf::from(path)))),
        [flag] if flag == "--config-path" => Err("--config-path needs a file".into()),
        _ => Err(format!("unexpected arguments: {}", args.join(" "))),
    }
}

async fn run(cfg: Config) -> Result<(), String> {
    log::info!("qdrant-engine {}: Qdrant API {API_VERSION} on {ENGINE}", env!("CARGO_PKG_VERSION"));
    // As the server does: load every collection, replaying its WAL, before
    // a port opens, so that a client that can connect finds its data.
    let root = cfg.storage.storage_path.clone();
    let storage = tokio::task::spawn_blocking(move || Storage::open(&root))
        .await
        .map_err(|e| format!("load storage: {e}"))?
        .map_err(|e| format!("load storage {}: {e}", cfg.storage.storage_path.display()))?;
    let unloadable = storage.unloadable();
    if !unloadable.is_empty() {
        let names: Vec<&str> = unloadable.keys().map(String::as_str).collect();
        log::error!("serving without the collections that cannot be loaded: {}", names.join(", "));
    }
    let storage = Arc::new(storage);

    let grpc_addr = addr(&cfg.service.host, cfg.service.grpc_port)?;
    let http_addr = addr(&cfg.service.host, cfg.service.http_port)?;
    let grpc_listener = TcpListener::bind(grpc_addr).await.map_err(|e| format!("gRPC port {grpc_addr}: {e}"))?;
    let http_listener = TcpListener::bind(http_addr).await.map_err(|e| format!("REST port {http_addr}: {e}"))?;

    let (mut grpc_server, http_tls) = match (&cfg.tls, cfg.service.enable_tls) {
        (Some(tls), true) => {
            let cert = std::fs::read(&tls.cert).map_err(|e| format!("read {}: {e}", tls.cert.display()))?;
            let key = std::fs::read(&tls.key).map_err(|e| format!("read {}: {e}", tls.key.display()))?;
            let server = Server::builder()
                .tls_config(ServerTlsConfig::new().identity(Identity::from_pem(&cert, &key)))
                .map_err(|e| format!("gRPC TLS: {e}"))?;
            (server, Some(http::tls_acceptor(&cert, &key)?))
        }
        _ => (Server::builder(), None),
    };

    let max = cfg.service.max_request_size_mb * 1024 * 1024;
    let key = ApiKey(cfg.service.api_key.as_deref().map(Arc::from));
    let collections = CollectionsServer::new(CollectionsService { storage: storage.clone() })
        .max_decoding_message_size(max)
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip);
    let points = PointsServer::new(PointsService { storage: storage.clone() })
        .max_decoding_message_size(max)
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip);
    // The health check needs no key, as on the server.
    let health = QdrantServer::new(QdrantService).accept_compressed(CompressionEncoding::Gzip);

    let (stop_tx, stop_rx) = watch::channel(false);
    let grpc_task = {
        let mut stop = stop_rx.clone();
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(grpc_listener);
        let router = grpc_server
            .add_service(health)
            .add_service(InterceptedService::new(collections, key.clone()))
            .add_service(InterceptedService::new(points, key));
        tokio::spawn(async move {
            router.serve_with_incoming_shutdown(incoming, async move { stopped(&mut stop).await }).await
        })
    };
    let tls_on = http_tls.is_some();
    let http_task = tokio::spawn(http::serve(http_listener, http_tls, stop_rx.clone()));
    let flush_task = tokio::spawn(flush_every(
        storage.clone(),
        Duration::from_secs(cfg.storage.flush_interval_sec.max(1)),
        stop_rx.clone(),
    ));
    start_optimizer(storage.clone(), stop_rx)?;

    log::info!(
        "ready: gRPC on {grpc_addr}, REST on {http_addr}{}{}",
        if tls_on { ", TLS on both" } else { "" },
        if cfg.service.api_key.is_some() { ", API key required" } else { "" },
    );
    let signal = stop_signal().await;
    log::info!("{signal}: stopping");
    let _ = stop_tx.send(true);
    let served = grpc_task.await.map_err(|e| format!("gRPC server: {e}"))?;
    let _ = http_task.await;
    let _ = flush_task.await;
    // Apply the updates already taken, then persist the segments so the
    // next start replays no WAL.
    let _ = tokio::task::spawn_blocking(move || {
        storage.close_all(Duration::from_secs(5));
        storage.flush_all()
    })
    .await;
    served.map_err(|e| format!("gRPC server: {e}"))?;
    log::info!("stopped");
    Ok(())
}

fn addr(host: &str, port: u16) -> Result<SocketAddr, String> {
    let ip = if host == "localhost" { "127.0.0.1" } else { host };
    format!("{ip}:{port}")
        .parse()
        .or_else(|_| format!("[{ip}]:{port}").parse())
        .map_err(|e| format!("service.host {host}: {e}"))
}

/// Flushes every collection each `every` until `stop` turns true.
async fn flush_every(storage: Arc<Storage>, every: Duration, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tokio::select! {
            () = stopped(&mut stop) => return,
            _ = tick.tick() => {
                let s = storage.clone();
                let _ = tokio::task::spawn_blocking(move || s.flush_all()).await;
            }
        }
    }
}

/// Starts the optimizer: one thread that runs the engine's optimizers on
/// the collections that had updates, as the server's optimizers run after
/// updates, until `stop` turns true. A stop does not wait for an
/// optimization under way: the engine finishes or discards it at the next
/// load, as the server's does after a crash.
fn start_optimizer(storage: Arc<Storage>, stop: watch::Receiver<bool>) -> Result<(), String> {
    std::thread::Builder::new()
        .name("qe-optimize".into())
        .spawn(move || {
            while !*stop.borrow() {
                storage.optimize_all();
                std::thread::sleep(Duration::from_millis(200));
            }
        })
        .map(|_| ())
        .map_err(|e| format!("start the optimizer: {e}"))
}

/// Waits for SIGTERM or SIGINT and names it.
async fn stop_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        log::error!("cannot listen for signals; stop with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arguments() {
        assert_eq!(parse_args(&args(&[])), Ok(Some(None)));
        assert_eq!(parse_args(&args(&["--version"])), Ok(None));
        assert_eq!(parse_args(&args(&["--config-path", "c.yaml"])), Ok(Some(Some(PathBuf::from("c.yaml")))));
        assert!(parse_args(&args(&["--config-path"])).is_err());
        assert!(parse_args(&args(&["serve", "now"])).is_err());
    }

    /// The version of `name` in Cargo.lock.
    fn locked(name: &str) -> &'static str {
        let lock = include_str!("../Cargo.lock");
        let head = format!("name = \"{name}\"\nversion = \"");
        let at = lock.find(&head).unwrap_or_else(|| panic!("{name} is not in Cargo.lock")) + head.len();
        &lock[at..at + lock[at..].find('"').unwrap()]
    }

    #[test]
    fn the_engine_named_is_the_engine_locked() {
        assert_eq!(ENGINE, format!("qdrant-edge {}", locked("qdrant-edge")));
        assert_eq!(API_VERSION, locked("qdrant-client"));
    }
}
