//! This driver's opaque configs in a claim's allocation (a DeviceClass's, `FromClass`, and the
//! claim's own, `FromClaim`), and who may set which key: a key whose effect reaches beyond the
//! claim's own pod may come from a DeviceClass only (records::claim::CONFIG_KEYS). A claim is
//! written by any user of its namespace, a DeviceClass by cluster admins.

use k8s_openapi::api::resource::v1::{DeviceRequestAllocationResult, ResourceClaim};
use serde_json::{Map, Value};

use crate::dra::config::DRIVER_NAME;
use crate::error::{Error, Result};
use crate::records::claim::{config_key, ClaimRef, Setter, CONFIG_KEYS};

/// One opaque config of this driver: the requests it applies to (empty: all), its parameters.
pub type Config = (Vec<String>, Map<String, Value>);

/// The DeviceClass that gives a class-only key, where rdma-ns ships one.
fn class_for(key: &str) -> Option<&'static str> {
    match key {
        "umad" => Some("rdma-ns-roce-mad"),
        _ => None,
    }
}

/// This driver's opaque configs, class configs first. An unknown key, or a class-only key in
/// the claim's own config, refuses the claim.
pub fn configs(claim: &ResourceClaim, c: &ClaimRef) -> Result<Vec<Config>> {
    let mut out = Vec::new();
    let allocation = claim.status.as_ref().and_then(|s| s.allocation.as_ref());
    let mut all: Vec<_> = allocation
        .iter()
        .flat_map(|a| a.devices.iter())
        .flat_map(|d| d.config.iter().flatten())
        .collect();
    all.sort_by_key(|cfg| cfg.source != "FromClass");
    for cfg in all {
        let Some(opaque) = cfg.opaque.as_ref().filter(|o| o.driver == DRIVER_NAME) else {
            continue;
        };
        let params = match &opaque.parameters.0 {
            Value::Object(m) => m.clone(),
            Value::Null => Map::new(),
            other => {
                return Err(Error::config(
                    "parameters",
                    format!(
                        "claim {c}: the {DRIVER_NAME} config {} is {other}, not an object",
                        cfg.source
                    ),
                ))
            }
        };
        let requests = cfg.requests.clone().unwrap_or_default();
        for key in params.keys() {
            check_key(claim, c, &cfg.source, &requests, key)?;
        }
        out.push((requests, params));
    }
    Ok(out)
}

/// A key of a config from `source`: known, and, in the claim's own config, one a claim may set.
fn check_key(
    claim: &ResourceClaim,
    c: &ClaimRef,
    source: &str,
    requests: &[String],
    key: &str,
) -> Result<()> {
    let Some(known) = config_key(key) else {
        let names: Vec<&str> = CONFIG_KEYS.iter().map(|k| k.name).collect();
        return Err(Error::config(
            key,
            format!(
                "claim {c}: the {DRIVER_NAME} config ({source}) has an unknown key `{key}`; \
                 known: {}",
                names.join(", ")
            ),
        ));
    };
    if known.setter == Setter::Class && source != "FromClass" {
        let classes = request_classes(claim, requests);
        let instead = match class_for(key) {
            Some(class) => format!("use DeviceClass {class} in place of {classes}"),
            None => format!(
                "ask a cluster admin for a DeviceClass whose config sets it, and use it in place \
                 of {classes}"
            ),
        };
        return Err(Error::config(
            key,
            format!(
                "claim {c}: its own {DRIVER_NAME} config sets `{key}`, which only a DeviceClass's \
                 config may set: it {}. Nothing on the node was changed; remove `{key}` from the \
                 claim's config and {instead}",
                known.why
            ),
        ));
    }
    Ok(())
}

/// The DeviceClasses of the claim's requests a config applies to (all when it names none).
fn request_classes(claim: &ResourceClaim, requests: &[String]) -> String {
    let mut out: Vec<String> = Vec::new();
    let all = claim
        .spec
        .as_ref()
        .and_then(|s| s.devices.as_ref())
        .and_then(|d| d.requests.clone())
        .unwrap_or_default();
    for r in &all {
        if !requests.is_empty() && !requests.contains(&r.name) {
            continue;
        }
        let classes = r.exactly.iter().map(|e| e.device_class_name.clone()).chain(
            r.first_available
                .iter()
                .flatten()
                .map(|s| s.device_class_name.clone()),
        );
        for class in classes {
            if !out.contains(&class) {
                out.push(class);
            }
        }
    }
    match out.is_empty() {
        true => "the claim's DeviceClass".into(),
        false => format!("DeviceClass {}", out.join(", ")),
    }
}

/// The merged parameters for `request`: later configs (the claim's) over earlier (the class's).
pub fn params_for(configs: &[Config], request: &str) -> Map<String, Value> {
    let mut out = Map::new();
    for (requests, params) in configs {
        let applies = requests.is_empty()
            || requests
                .iter()
                .any(|r| r == request || request.starts_with(&format!("{r}/")));
        if applies {
            out.extend(params.clone());
        }
    }
    out
}

/// What a claim's allocation is, for this driver: its results and configs, as one string (the
/// configs' parameters as JSON with sorted keys). Two prepares of the same allocation get the
/// same string.
pub fn allocation_of(results: &[DeviceRequestAllocationResult], configs: &[Config]) -> String {
    let results: Vec<Value> = results
        .iter()
        .map(|r| serde_json::json!([r.request, r.pool, r.device, r.share_id]))
        .collect();
    let configs: Vec<Value> = configs
        .iter()
        .map(|(requests, params)| serde_json::json!([requests, params]))
        .collect();
    let text = serde_json::json!({"results": results, "configs": configs}).to_string();
    format!(
        "fnv1a64:{:016x}",
        crate::records::atomic::stable_hash(text.bytes())
    )
}
