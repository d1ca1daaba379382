//! The server's settings, read the way the Qdrant server reads its own: a YAML
//! file (`--config-path`) whose keys have Qdrant's names, then `QDRANT__SECTION__KEY`
//! environment variables on top. Only the keys this server acts on are read;
//! the rest of a Qdrant configuration is accepted and ignored, so one file can
//! serve both servers.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_yaml::{Mapping, Value};

/// What the server listens on, where it keeps its data and who may call it.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default)]
pub struct Config {
    pub service: Service,
    pub storage: Storage,
    pub tls: Option<Tls>,
    pub log_level: String,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default)]
pub struct Service {
    #[serde(deserialize_with = "scalar_string")]
    pub host: String,
    pub http_port: u16,
    pub grpc_port: u16,
    /// When set, every gRPC call but the health check must carry it in an
    /// `api-key` header or as an `authorization: Bearer` token.
    #[serde(deserialize_with = "optional_scalar_string")]
    pub api_key: Option<String>,
    /// Serve REST and gRPC over TLS with `tls.cert` and `tls.key`.
    pub enable_tls: bool,
    /// The largest request accepted, in MiB, on REST and gRPC alike.
    pub max_request_size_mb: usize,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default)]
pub struct Storage {
    pub storage_path: PathBuf,
    /// Seconds between flushes of the segments, after which the WAL is
    /// truncated; what was acknowledged is in the WAL either way.
    pub flush_interval_sec: u64,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Tls {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Default for Config {
    fn default() -> Self {
        Self { service: Service::default(), storage: Storage::default(), tls: None, log_level: "INFO".into() }
    }
}

impl Default for Service {
    fn default() -> Self {
        // Qdrant's own defaults, but on loopback: a test server has no
        // business on other interfaces unless told so.
        Self {
            host: "127.0.0.1".into(),
            http_port: 6333,
            grpc_port: 6334,
            api_key: None,
            enable_tls: false,
            max_request_size_mb: 32,
        }
    }
}

impl Default for Storage {
    fn default() -> Self {
        Self { storage_path: PathBuf::from("./storage"), flush_interval_sec: 5 }
    }
}

/// A text setting given as any YAML scalar: an API key of digits only is
/// still text, though a variable's value is read as YAML.
fn scalar_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    match Value::deserialize(d)? {
        Value::String(s) => Ok(s),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        _ => Err(serde::de::Error::custom("expected text")),
    }
}

fn optional_scalar_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    scalar_string(d).map(Some)
}

/// Reads the file at `path` when given, then applies the `QDRANT__*` variables
/// of `env`, and checks the result.
pub fn load(path: Option<&Path>, env: impl IntoIterator<Item = (String, String)>) -> Result<Config, String> {
    let mut doc = match path {
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| format!("read {}: {e}", p.display()))?;
            serde_yaml::from_str::<Value>(&text).map_err(|e| format!("parse {}: {e}", p.display()))?
        }
        None => Value::Mapping(Mapping::new()),
    };
    if doc.is_null() {
        doc = Value::Mapping(Mapping::new());
    }
    let from = |doc: &Value| serde_yaml::from_value::<Config>(doc.clone());
    let mut cfg =
        from(&doc).map_err(|e| format!("{}: {e}", path.map_or("defaults".into(), |p| p.display().to_string())))?;
    // All the variables first, then one check, as the server reads them: a
    // section set by two variables (tls.cert and tls.key) is whole only
    // once both are in.
    let file_doc = doc.clone();
    let mut vars = Vec::new();
    for (name, value) in env {
        let Some(rest) = name.strip_prefix("QDRANT__") else { continue };
        let keys: Vec<String> = rest.split("__").map(str::to_lowercase).collect();
        // A number or a boolean written as such is one, as Qdrant's own
        // configuration loader reads it; anything else stays text, so an
        // API key like "0123" or "1e3" is not turned into another number.
        let parsed = match serde_yaml::from_str::<Value>(&value) {
            Ok(Value::Number(n)) if n.to_string() == value => Value::Number(n),
            Ok(Value::Bool(b)) if b.to_string() == value => Value::Bool(b),
            _ => Value::String(value.clone()),
        };
        set(&mut doc, &keys, parsed.clone()).map_err(|e| format!("{name}: {e}"))?;
        vars.push((name, keys, parsed));
    }
    if !vars.is_empty() {
        cfg = from(&doc).map_err(|e| {
            // Name the variable whose value cannot be taken, when one alone
            // over the file fails; else the error is of them together.
            let culprit = vars.iter().find(|(_, keys, v)| {
                let mut one = file_doc.clone();
                set(&mut one, keys, v.clone()).is_ok()
                    && from(&one).is_err_and(|e| !e.to_string().contains("missing field"))
            });
            match culprit {
                Some((name, _, _)) => format!("{name}: {e}"),
                None => format!("the QDRANT__ variables: {e}"),
            }
        })?;
    }
    if cfg.service.enable_tls && cfg.tls.is_none() {
        return Err("service.enable_tls is set but tls.cert and tls.key are not".into());
    }
    if cfg.service.max_request_size_mb == 0 {
        return Err("service.max_request_size_mb must be at least 1".into());
    }
    Ok(cfg)
}

fn set(doc: &mut Value, keys: &[String], value: Value) -> Result<(), String> {
    let Some((first, rest)) = keys.split_first() else { return Ok(()) };
    let Value::Mapping(map) = doc else {
        return Err(format!("{first} is inside a value that is not a section"));
    };
    let key = Value::String(first.clone());
    if rest.is_empty() {
        map.insert(key, value);
        return Ok(());
    }
    let entry = map.entry(key).or_insert_with(|| Value::Mapping(Mapping::new()));
    if entry.is_null() {
        *entry = Value::Mapping(Mapping::new());
    }
    set(entry, rest, value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn environment_overrides_the_file() {
        let dir = std::env::temp_dir().join(format!("qe-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("config.yaml");
        std::fs::write(
            &file,
            "log_level: INFO\ntelemetry_disabled: true\nstorage:\n  storage_path: /data\nservice:\n  host: 127.0.0.1\n  http_port: 7000\n  grpc_port: 7001\n",
        )
        .unwrap();
        let cfg = load(
            Some(&file),
            env(&[("QDRANT__SERVICE__GRPC_PORT", "7100"), ("QDRANT__SERVICE__API_KEY", "1e3"), ("HOME", "/root")]),
        )
        .unwrap();
        assert_eq!(cfg.service.http_port, 7000);
        assert_eq!(cfg.service.grpc_port, 7100);
        assert_eq!(cfg.service.api_key.as_deref(), Some("1e3"), "a key that reads as a number stays text");
        assert_eq!(cfg.storage.storage_path, PathBuf::from("/data"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_key_of_digits_in_the_file_is_text() {
        let dir = std::env::temp_dir().join(format!("qe-config-digits-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("config.yaml");
        std::fs::write(&file, "service:\n  api_key: 12345\n").unwrap();
        let cfg = load(Some(&file), Vec::new()).unwrap();
        assert_eq!(cfg.service.api_key.as_deref(), Some("12345"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn tls_can_be_set_by_variables_alone() {
        let cfg = load(
            None,
            env(&[
                ("QDRANT__SERVICE__ENABLE_TLS", "true"),
                ("QDRANT__TLS__CERT", "/c.pem"),
                ("QDRANT__TLS__KEY", "/k.pem"),
            ]),
        )
        .unwrap();
        assert_eq!(cfg.tls, Some(Tls { cert: "/c.pem".into(), key: "/k.pem".into() }));
    }

    #[test]
    fn tls_needs_a_certificate() {
        let err = load(None, env(&[("QDRANT__SERVICE__ENABLE_TLS", "true")])).unwrap_err();
        assert!(err.contains("tls.cert"), "got {err}");
    }

    #[test]
    fn a_port_must_be_a_number() {
        let err = load(None, env(&[("QDRANT__SERVICE__GRPC_PORT", "many")])).unwrap_err();
        assert!(err.starts_with("QDRANT__SERVICE__GRPC_PORT: "), "got {err}");
    }
}
