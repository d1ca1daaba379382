//! The REST port, for what probes and scripts ask of a Qdrant server:
//! `/healthz`, `/livez`, `/readyz` and `/` (name and version). The rest of
//! Qdrant's REST API is not served: every other path answers 404 saying so.
//!
//! The port opens only once every collection is loaded, as the server's
//! does, so `/readyz` answering at all means ready.

use std::convert::Infallible;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::grpc::{API_VERSION, ENGINE};

/// Serves the REST port until `stop` turns true; connections still open
/// then are closed.
pub async fn serve(listener: TcpListener, tls: Option<TlsAcceptor>, mut stop: watch::Receiver<bool>) {
    let mut conns = JoinSet::new();
    loop {
        let (tcp, peer) = tokio::select! {
            () = crate::stopped(&mut stop) => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    log::warn!("REST accept: {e}");
                    continue;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let tls = tls.clone();
        conns.spawn(async move {
            let served = match tls {
                Some(acceptor) => match acceptor.accept(tcp).await {
                    Ok(stream) => {
                        http1::Builder::new().serve_connection(TokioIo::new(stream), service_fn(answer)).await
                    }
                    Err(e) => {
                        log::debug!("REST TLS handshake with {peer}: {e}");
                        return;
                    }
                },
                None => http1::Builder::new().serve_connection(TokioIo::new(tcp), service_fn(answer)).await,
            };
            if let Err(e) = served {
                log::debug!("REST connection from {peer}: {e}");
            }
        });
    }
    conns.shutdown().await;
}

async fn answer(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let (status, body, json) = route(req.method(), req.uri().path());
    let mut res = Response::new(Full::new(Bytes::from(body)));
    *res.status_mut() = status;
    let content_type = if json { "application/json" } else { "text/plain; charset=utf-8" };
    res.headers_mut().insert(hyper::header::CONTENT_TYPE, content_type.parse().expect("a valid header value"));
    Ok(res)
}

/// The answer to a path: status, body, and whether the body is JSON.
fn route(method: &Method, path: &str) -> (StatusCode, String, bool) {
    match (method, path) {
        (&Method::GET, "/healthz" | "/livez") => (StatusCode::OK, "healthz check passed".into(), false),
        (&Method::GET, "/readyz") => (StatusCode::OK, "all shards are ready".into(), false),
        (&Method::GET, "/") => {
            let body = serde_json::json!({
                "title": "qdrant-engine - the Qdrant API on Qdrant's engine",
                "version": API_VERSION,
                "engine": ENGINE,
            });
            (StatusCode::OK, body.to_string(), true)
        }
        _ => {
            let body = serde_json::json!({
                "status": {"error": format!("Not found: {method} {path}: qdrant-engine serves Qdrant's gRPC API; REST serves only /, /healthz, /livez and /readyz")},
                "time": 0.0,
            });
            (StatusCode::NOT_FOUND, body.to_string(), true)
        }
    }
}

/// A TLS acceptor for the REST port from PEM files.
pub fn tls_acceptor(cert_pem: &[u8], key_pem: &[u8]) -> Result<TlsAcceptor, String> {
    let certs: Vec<CertificateDer<'static>> = rustls_pemfile::certs(&mut &cert_pem[..])
        .collect::<Result<_, _>>()
        .map_err(|e| format!("TLS certificate: {e}"))?;
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut &key_pem[..])
        .map_err(|e| format!("TLS key: {e}"))?
        .ok_or("TLS key: no private key in the file")?;
    let config =
        ServerConfig::builder().with_no_client_auth().with_single_cert(certs, key).map_err(|e| format!("TLS: {e}"))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_answer_and_other_paths_say_what_is_served() {
        assert_eq!(route(&Method::GET, "/readyz").0, StatusCode::OK);
        assert_eq!(route(&Method::GET, "/healthz").0, StatusCode::OK);
        let (status, body, json) = route(&Method::GET, "/");
        assert_eq!((status, json), (StatusCode::OK, true));
        assert!(body.contains(ENGINE), "got {body}");
        let (status, body, _) = route(&Method::PUT, "/collections/c/points");
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(body.contains("gRPC API"), "got {body}");
    }
}
