//! qdrant-engine as a library: the server of `main.rs`, and what its
//! benchmark (`benches/writes.rs`) drives in-process, the gRPC services on
//! [`storage::Storage`] without the network between.

pub mod collection;
pub mod config;
pub mod convert;
pub mod error;
pub mod grpc;
pub mod http;
pub mod storage;
pub mod validate;

use tokio::sync::watch;

/// Returns once the stop flag is set (or its sender is gone).
pub async fn stopped(stop: &mut watch::Receiver<bool>) {
    // The guard wait_for returns is dropped here, not held by the caller's
    // future across its next await.
    let _ = stop.wait_for(|s| *s).await;
}
