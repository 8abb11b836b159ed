//! `rdma-ns migrate [FILE|-]`: reads a network configuration that uses the plugins rdma-ns
//! replaces (rdma-cni `rdma`, ipoib-cni `infiniband`, `host-device`; `sriov`/`ib-sriov` stay,
//! with rdma-ns chained after them) and prints the rdma-ns equivalent conflist on stdout.
//!
//! Input: a conflist, a single conf, or a NetworkAttachmentDefinition as JSON or YAML
//! ([`rdma_ns::nad`]). Every field that cannot be carried over gets one warning line on stderr.

use serde_json::{json, Map, Value};

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("reading {0}: {1}")]
    Read(String, std::io::Error),
    #[error("{0}: {1}")]
    Invalid(String, String),
}

/// The migrated conflist and one warning per field not carried over.
#[derive(Debug)]
pub struct Migrated {
    pub conflist: Value,
    pub warnings: Vec<String>,
}

pub fn run(args: &[std::ffi::OsString]) -> std::process::ExitCode {
    let source = match args {
        [] => "-".to_string(),
        [one] => one.to_string_lossy().into_owned(),
        _ => {
            eprintln!("usage: rdma-ns migrate [FILE|-]");
            return std::process::ExitCode::from(2);
        }
    };
    let text = if source == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map(|_| s)
            .map_err(|e| MigrateError::Read("standard input".into(), e))
    } else {
        std::fs::read_to_string(&source).map_err(|e| MigrateError::Read(source.clone(), e))
    };
    match text.and_then(|t| migrate(&source, &t)) {
        Ok(m) => {
            for w in &m.warnings {
                eprintln!("rdma-ns migrate: warning: {w}");
            }
            // A conflist rendered by serde_json cannot fail to serialize.
            println!(
                "{}",
                serde_json::to_string_pretty(&m.conflist).unwrap_or_default()
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rdma-ns migrate: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Migrates the configuration in `text` (named `source` in errors).
pub fn migrate(source: &str, text: &str) -> Result<Migrated, MigrateError> {
    let invalid = |msg: String| MigrateError::Invalid(source.to_string(), msg);
    let config = rdma_ns::nad::network_config(text).map_err(invalid)?;
    convert(config).map_err(invalid)
}

/// Fields every CNI plugin entry may carry that mean the same to rdma-ns.
const COMMON: &[&str] = &[
    "type",
    "capabilities",
    "runtimeConfig",
    "ipam",
    "deviceID",
    "pciBusID",
];

fn convert(conf: Value) -> Result<Migrated, String> {
    let Value::Object(mut top) = conf else {
        return Err("the configuration is not a JSON object".into());
    };
    let mut warnings = Vec::new();
    // A single conf becomes a conflist of one plugin.
    let plugins = match top.remove("plugins") {
        Some(Value::Array(p)) => p,
        Some(_) => return Err("`plugins` is not a list".into()),
        None => {
            let mut plugin = Map::new();
            for (k, v) in std::mem::take(&mut top) {
                match k.as_str() {
                    "cniVersion" | "name" => {
                        top.insert(k, v);
                    }
                    _ => {
                        plugin.insert(k, v);
                    }
                }
            }
            vec![Value::Object(plugin)]
        }
    };
    if !top.contains_key("cniVersion") {
        warnings.push("cniVersion: missing; 1.0.0 written (rdma-ns requires it)".into());
        top.insert("cniVersion".into(), json!("1.0.0"));
    }
    if !top.contains_key("name") {
        warnings.push("name: missing; \"rdma-net\" written, rename it".into());
        top.insert("name".into(), json!("rdma-net"));
    }

    let types: Vec<String> = plugins
        .iter()
        .map(|p| p["type"].as_str().unwrap_or("").to_string())
        .collect();
    let known = ["rdma", "infiniband", "host-device", "sriov", "ib-sriov"];
    if !types.iter().any(|t| known.contains(&t.as_str())) {
        return Err(format!(
            "nothing to migrate: no plugin of type {} (found {types:?})",
            known.join(", ")
        ));
    }
    let vf_plugin = types.iter().any(|t| t == "sriov" || t == "ib-sriov");
    let mut out = Vec::new();
    for (plugin, ty) in plugins.into_iter().zip(&types) {
        let Value::Object(p) = plugin else {
            return Err("a plugin entry is not a JSON object".into());
        };
        match ty.as_str() {
            "host-device" => {
                let mut n = rdma_ns_entry("move");
                carry(
                    &p,
                    ty,
                    &["device", "hwaddr", "kernelpath", "mtu"],
                    &mut n,
                    &mut warnings,
                );
                out.push(Value::Object(n));
            }
            "infiniband" => {
                let mut n = rdma_ns_entry("ipoib");
                carry(&p, ty, &["master", "mtu"], &mut n, &mut warnings);
                // ipoib-cni requires `ipam`, and documents `{}` for no address.
                if n.get("ipam")
                    .is_some_and(|i| i.as_object().is_some_and(Map::is_empty))
                {
                    n.remove("ipam");
                }
                out.push(Value::Object(n));
            }
            "rdma" => {
                // host-device → move mode already moves the ib device along (`rdma: auto`).
                if types.iter().any(|t| t == "host-device") {
                    for k in p.keys().filter(|k| *k != "type") {
                        warnings.push(format!(
                            "rdma.{k}: not carried over (the rdma-ns move entry moves the ib \
                             device itself)"
                        ));
                    }
                    continue;
                }
                if !vf_plugin {
                    warnings.push(
                        "rdma: no sriov, ib-sriov or host-device before it; rdma-ns mode \
                         \"rdma\" needs the plugin that moves the VF netdev"
                            .into(),
                    );
                }
                let mut n = rdma_ns_entry("rdma");
                let mut rest = p.clone();
                rest.remove("args");
                carry(&rest, ty, &[], &mut n, &mut warnings);
                rdma_args(&p, &mut n, &mut warnings);
                out.push(Value::Object(n));
            }
            // sriov-cni keeps configuring the VF (VLAN, MAC, trust, rates): rdma-ns replaces
            // only the RDMA part after it.
            _ => out.push(Value::Object(p)),
        }
    }
    if vf_plugin && !types.iter().any(|t| t == "rdma") {
        warnings.push(
            "sriov: no rdma plugin after it; rdma-ns mode \"rdma\" appended so the VF's ib \
             device follows it into the pod (needs exclusive RDMA netns mode)"
                .into(),
        );
        out.push(Value::Object(rdma_ns_entry("rdma")));
    }
    top.insert("plugins".into(), Value::Array(out));
    Ok(Migrated {
        conflist: Value::Object(top),
        warnings,
    })
}

fn rdma_ns_entry(mode: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("type".into(), json!("rdma-ns"));
    m.insert("mode".into(), json!(mode));
    m
}

/// Copies the common fields and `fields` of `p` into `n`; warns for every other one.
fn carry(
    p: &Map<String, Value>,
    ty: &str,
    fields: &[&str],
    n: &mut Map<String, Value>,
    warnings: &mut Vec<String>,
) {
    for (k, v) in p {
        if k == "type" {
            continue;
        }
        if COMMON.contains(&k.as_str()) || fields.contains(&k.as_str()) {
            n.insert(k.clone(), v.clone());
        } else {
            warnings.push(format!("{ty}.{k}: no rdma-ns equivalent, dropped"));
        }
    }
}

/// rdma-cni's `args.cni.debug` is its log switch: rdma-ns logs at debug level instead.
fn rdma_args(p: &Map<String, Value>, n: &mut Map<String, Value>, warnings: &mut Vec<String>) {
    let Some(args) = p.get("args") else { return };
    let mut cni = args
        .get("cni")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    if let Some(debug) = cni.remove("debug") {
        if debug == json!(true) {
            n.insert("logLevel".into(), json!("debug"));
        }
    }
    for k in cni.keys() {
        warnings.push(format!("rdma.args.cni.{k}: no rdma-ns equivalent, dropped"));
    }
    if let Some(other) = args.as_object() {
        for k in other.keys().filter(|k| *k != "cni") {
            warnings.push(format!("rdma.args.{k}: no rdma-ns equivalent, dropped"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conf_with_nothing_to_migrate_is_refused() {
        let e = migrate("x", r#"{"cniVersion":"1.0.0","name":"n","type":"bridge"}"#).unwrap_err();
        assert!(e.to_string().contains("nothing to migrate"), "{e}");
        assert!(migrate("x", "[1]").is_err());
        assert!(migrate("x", "not json, not yaml").is_err());
    }
}
