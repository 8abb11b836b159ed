//! `rdma-ns migrate`: a conf of the peer plugins (conflist, single conf or
//! NetworkAttachmentDefinition) becomes the rdma-ns conflist that replaces it, with one line per
//! field not carried over and per decision taken on the way.
//!
//! Each peer entry is converted by its table ([`super::PEERS`]): replaced peers become an
//! rdma-ns entry of their mode, kept ones (sriov, ib-sriov) stay as they are. rdma-cni's entry
//! depends on the peer before it: folded into host-device's move entry, mode `rdma` after
//! sriov-cni, `rdmaIsolation` on ib-sriov-cni (an IB VF's ib device must move before its IPoIB
//! netdev, which only ib-sriov-cni can order).

use serde_json::{json, Map, Value};

use super::{get_field, peer_of, peer_types, Action, Field, Peer, Role};

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("reading {0}: {1}")]
    Read(String, std::io::Error),
    #[error("{0}: {1}")]
    Invalid(String, String),
}

/// The migrated conflist and one warning per field not carried over or decision taken.
#[derive(Debug)]
pub struct Migrated {
    pub conflist: Value,
    pub warnings: Vec<String>,
}

/// Migrates the configuration in `text` (named `source` in errors).
pub fn migrate(source: &str, text: &str) -> Result<Migrated, MigrateError> {
    let invalid = |msg: String| MigrateError::Invalid(source.to_string(), msg);
    let config = crate::nad::network_config(text).map_err(invalid)?;
    convert(config).map_err(invalid)
}

/// Migrates a parsed conf or conflist.
pub fn convert(conf: Value) -> Result<Migrated, String> {
    let Value::Object(top) = conf else {
        return Err("the configuration is not a JSON object".into());
    };
    let (mut top, plugins) = split_conflist(top)?;
    let entries = plugins
        .into_iter()
        .map(|p| match p {
            Value::Object(entry) => Ok(entry),
            _ => Err("a plugin entry is not a JSON object".to_string()),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if !entries.iter().any(|e| peer_of(e).is_some()) {
        let found: Vec<&str> = entries
            .iter()
            .map(|e| e.get("type").and_then(Value::as_str).unwrap_or(""))
            .collect();
        return Err(format!(
            "nothing to migrate: no plugin of type {} (found {found:?})",
            peer_types().join(", ")
        ));
    }
    let mut warnings = Vec::new();
    complete_top_level(&mut top, &mut warnings);
    let plugins = convert_entries(&entries, &mut warnings);
    top.insert("plugins".into(), Value::Array(plugins));
    Ok(Migrated {
        conflist: Value::Object(top),
        warnings,
    })
}

/// The conflist's top level and its plugin entries; a single conf becomes a conflist of one.
fn split_conflist(mut top: Map<String, Value>) -> Result<(Map<String, Value>, Vec<Value>), String> {
    match top.remove("plugins") {
        Some(Value::Array(p)) => Ok((top, p)),
        Some(_) => Err("`plugins` is not a list".into()),
        None => {
            let (conflist, plugin): (Map<_, _>, Map<_, _>) = std::mem::take(&mut top)
                .into_iter()
                .partition(|(k, _)| k == "cniVersion" || k == "name");
            Ok((conflist, vec![Value::Object(plugin)]))
        }
    }
}

fn complete_top_level(top: &mut Map<String, Value>, warnings: &mut Vec<String>) {
    match top.get("cniVersion") {
        None => warnings.push("cniVersion: missing; 1.0.0 written (rdma-ns requires it)".into()),
        Some(Value::String(v)) if crate::cni::version::is_supported(v) => {}
        Some(other) => warnings.push(format!(
            "cniVersion: {other} is not a version rdma-ns speaks ({}); 1.0.0 written",
            crate::cni::version::SUPPORTED_VERSIONS.join(", ")
        )),
    }
    if !top
        .get("cniVersion")
        .and_then(Value::as_str)
        .is_some_and(crate::cni::version::is_supported)
    {
        top.insert("cniVersion".into(), json!("1.0.0"));
    }
    if !top.contains_key("name") {
        warnings.push("name: missing; \"rdma-net\" written, rename it".into());
        top.insert("name".into(), json!("rdma-net"));
    }
}

/// An entry of the output, and the peer it came from.
struct Emitted {
    entry: Map<String, Value>,
    peer: Option<&'static Peer>,
}

fn convert_entries(entries: &[Map<String, Value>], warnings: &mut Vec<String>) -> Vec<Value> {
    let mut out: Vec<Emitted> = Vec::new();
    for (at, entry) in entries.iter().enumerate() {
        let Some(peer) = peer_of(entry) else {
            out.push(Emitted {
                entry: entry.clone(),
                peer: None,
            });
            continue;
        };
        note_infiniband(peer, warnings);
        let rdma_after = next_peer_is_rdma_cni(&entries[at + 1..]);
        match peer.role {
            Role::Replaced(_) if is_rdma_cni(peer) => {
                rdma_cni_entry(entry, peer, &mut out, warnings)
            }
            Role::Replaced(mode) => out.push(Emitted {
                entry: replace(entry, peer, mode, warnings),
                peer: Some(peer),
            }),
            Role::KeptWithRdmaAfter => {
                out.push(kept(entry, peer));
                if !rdma_after {
                    rdma_after_sriov(&mut out, warnings);
                }
            }
            Role::Kept => {
                out.push(kept(entry, peer));
                if !rdma_after {
                    warnings.push(kept_alone(entry, peer));
                }
            }
        }
    }
    out.into_iter().map(|e| Value::Object(e.entry)).collect()
}

fn kept(entry: &Map<String, Value>, peer: &'static Peer) -> Emitted {
    Emitted {
        entry: entry.clone(),
        peer: Some(peer),
    }
}

fn is_rdma_cni(peer: &Peer) -> bool {
    peer.plugin_type == "rdma"
}

fn next_peer_is_rdma_cni(rest: &[Map<String, Value>]) -> bool {
    rest.iter().find_map(peer_of).is_some_and(is_rdma_cni)
}

fn entry_type(entry: &Map<String, Value>) -> &str {
    entry.get("type").and_then(Value::as_str).unwrap_or("")
}

fn is_true(entry: &Map<String, Value>, key: &str) -> bool {
    get_field(entry, key) == Some(&Value::Bool(true))
}

/// `infiniband` is two plugins' first type; say which one the entry was read as.
fn note_infiniband(peer: &Peer, warnings: &mut Vec<String>) {
    if peer.plugin_type == "infiniband" {
        warnings.push(format!(
            "infiniband: read as {} ({}: ipoib-cni required `master`, ib-sriov-cni replaced it \
             by the VF's PF)",
            peer.plugin,
            peer.type_description()
        ));
    }
}

fn rdma_ns_entry(mode: &str) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("type".into(), json!("rdma-ns"));
    m.insert("mode".into(), json!(mode));
    m
}

/// The rdma-ns entry of `mode` that replaces `entry`: its fields by `peer`'s table, then what
/// the peer did unasked.
fn replace(
    entry: &Map<String, Value>,
    peer: &Peer,
    mode: &str,
    warnings: &mut Vec<String>,
) -> Map<String, Value> {
    let mut out = rdma_ns_entry(mode);
    carry_fields(entry, "", peer, entry_type(entry), &mut out, warnings);
    if peer.plugin_type == "host-device" {
        keep_the_selector_host_device_used(&mut out, warnings);
    }
    for implied in peer.implied {
        if let Some((field, value)) = implied
            .writes
            .and_then(|(f, v)| Some((f, serde_json::from_str(v).ok()?)))
        {
            out.entry(field).or_insert(value);
        }
    }
    out
}

/// Every key of `obj` (at `prefix` inside the entry) through `peer`'s table into `out`.
fn carry_fields(
    obj: &Map<String, Value>,
    prefix: &str,
    peer: &Peer,
    ty: &str,
    out: &mut Map<String, Value>,
    warnings: &mut Vec<String>,
) {
    let path_of = |key: &str| {
        if prefix.is_empty() {
            key.to_string()
        } else {
            format!("{prefix}.{key}")
        }
    };
    // Of two spellings of one key, the one spelled as the plugin documents it is carried.
    let mut keys: Vec<(&String, &Value)> = obj.iter().collect();
    keys.sort_by_key(|(k, _)| !matches!(peer.field(&path_of(k)), Some(f) if f.name == path_of(k)));
    for (key, value) in keys {
        if prefix.is_empty() && key == "type" {
            continue;
        }
        let path = path_of(key);
        match (peer.field(&path), value) {
            (Some(field), _) => apply(field, &path, value, ty, out, warnings),
            (None, Value::Object(inner)) if peer.has_fields_under(&path) => {
                carry_fields(inner, &path, peer, ty, out, warnings)
            }
            (None, _) => warnings.push(format!(
                "{ty}.{path}: not carried: {} has no such field and ignored it",
                peer.plugin
            )),
        }
    }
}

fn apply(
    field: &Field,
    path: &str,
    value: &Value,
    ty: &str,
    out: &mut Map<String, Value>,
    warnings: &mut Vec<String>,
) {
    let (target, value) = match field.action {
        Action::Maps(to) => (to, Some(value.clone())),
        Action::MapsWith(to, convert) => {
            let (converted, notes) = convert(value);
            warnings.extend(notes.into_iter().map(|n| format!("{ty}.{path}: {n}")));
            (to, converted)
        }
        Action::Carries => (field.name, Some(value.clone())),
        Action::Drops => {
            warnings.push(format!("{ty}.{path}: not carried: {}", field.why));
            return;
        }
    };
    let Some(value) = value else { return };
    if out.contains_key(target) {
        warnings.push(format!(
            "{ty}.{path}: not carried: `{target}` is given by another spelling of the key (of \
             the two, Go's decoder kept the one last in the file)"
        ));
        return;
    }
    out.insert(target.into(), value);
}

/// host-device looks for its device by the first selector given, in this order, and ignores
/// the others; rdma-ns would refuse several.
const HOST_DEVICE_SELECTORS: [&str; 4] = ["device", "hwaddr", "kernelpath", "pciBusID"];

fn keep_the_selector_host_device_used(out: &mut Map<String, Value>, warnings: &mut Vec<String>) {
    let given: Vec<&str> = HOST_DEVICE_SELECTORS
        .into_iter()
        .filter(|s| out.contains_key(*s))
        .collect();
    if let [used, ignored @ ..] = given.as_slice() {
        for s in ignored {
            out.remove(*s);
            warnings.push(format!(
                "host-device.{s}: not carried: host-device used `{used}` and ignored it"
            ));
        }
    }
}

/// rdma-cni's entry, by the peer before it in the chain.
fn rdma_cni_entry(
    entry: &Map<String, Value>,
    peer: &'static Peer,
    out: &mut Vec<Emitted>,
    warnings: &mut Vec<String>,
) {
    let before = out.iter().rposition(|e| e.peer.is_some());
    let Some((at, before_peer)) = before.and_then(|at| Some((at, out[at].peer?))) else {
        return rdma_without_vf_plugin(entry, peer, out, warnings);
    };
    let previous = &mut out[at].entry;
    match (before_peer.plugin_type, before_peer.role) {
        ("host-device", _) => fold_into_move(entry, peer, previous, warnings),
        ("sriov", Role::KeptWithRdmaAfter) => out.push(Emitted {
            entry: replace(entry, peer, "rdma", warnings),
            peer: Some(peer),
        }),
        ("sriov", _) => drop_rdma_entry(
            entry,
            "the sriov VF is bound to a DPDK driver (`dpdk`): no ib device reaches the pod",
            warnings,
        ),
        ("ib-sriov", _) => isolate_in_ib_sriov(entry, previous, warnings),
        ("infiniband", Role::Kept) => drop_rdma_entry(
            entry,
            "ib-sriov-cni's first releases cannot move the ib device before the IPoIB netdev, \
             and moved after it the kernel re-creates the netdev: move to type `ib-sriov` with \
             \"rdmaIsolation\": true",
            warnings,
        ),
        (_, Role::Replaced("ipoib")) => drop_rdma_entry(
            entry,
            "an IPoIB child shares its parent's ib device and has none of its own to move",
            warnings,
        ),
        _ => rdma_without_vf_plugin(entry, peer, out, warnings),
    }
}

fn rdma_without_vf_plugin(
    entry: &Map<String, Value>,
    peer: &'static Peer,
    out: &mut Vec<Emitted>,
    warnings: &mut Vec<String>,
) {
    warnings.push(
        "rdma: no sriov, ib-sriov or host-device before it; rdma-ns mode \"rdma\" needs the \
         plugin that moves the VF netdev"
            .into(),
    );
    out.push(Emitted {
        entry: replace(entry, peer, "rdma", warnings),
        peer: Some(peer),
    });
}

/// One line for an rdma entry left out, naming its fields.
fn drop_rdma_entry(entry: &Map<String, Value>, why: &str, warnings: &mut Vec<String>) {
    let fields: Vec<&str> = entry
        .keys()
        .map(String::as_str)
        .filter(|k| *k != "type")
        .collect();
    let fields = if fields.is_empty() {
        String::new()
    } else {
        format!(" (with {})", fields.join(", "))
    };
    warnings.push(format!("rdma: dropped{fields}: {why}"));
}

/// host-device then rdma-cni is what move mode does alone: the rdma entry's fields go through
/// its table onto the move entry, of which only its log level is not already the move entry's
/// own. rdma-cni refused to run outside exclusive netns mode; `"rdma": "exclusive"` keeps that.
fn fold_into_move(
    entry: &Map<String, Value>,
    peer: &Peer,
    move_entry: &mut Map<String, Value>,
    warnings: &mut Vec<String>,
) {
    move_entry.insert("rdma".into(), json!("exclusive"));
    warnings.push(
        "rdma: folded into the move entry, with \"rdma\": \"exclusive\": move mode moves the ib \
         device itself, and rdma-cni refused to run outside exclusive netns mode"
            .into(),
    );
    let mut rdma_fields = Map::new();
    carry_fields(
        entry,
        "",
        peer,
        entry_type(entry),
        &mut rdma_fields,
        warnings,
    );
    for (key, value) in rdma_fields {
        if key == "logLevel" && !move_entry.contains_key("logLevel") {
            move_entry.insert(key, value);
        } else if key != "type" && key != "mode" {
            warnings.push(format!(
                "rdma.{key}: not carried: the move entry has its own"
            ));
        }
    }
}

/// ib-sriov then rdma-cni: ib-sriov-cni moves the ib device itself, first, when asked with
/// `rdmaIsolation`; the rdma entry goes.
fn isolate_in_ib_sriov(
    entry: &Map<String, Value>,
    ib_sriov: &mut Map<String, Value>,
    warnings: &mut Vec<String>,
) {
    if is_true(ib_sriov, "vfioPciMode") {
        return drop_rdma_entry(
            entry,
            "the ib-sriov VF is bound to vfio-pci (`vfioPciMode`): no netdev and no ib device \
             reach the pod",
            warnings,
        );
    }
    if is_true(ib_sriov, "rdmaIsolation") {
        return drop_rdma_entry(
            entry,
            "ib-sriov-cni moves the VF's ib device itself (`rdmaIsolation`); a second move would \
             fail",
            warnings,
        );
    }
    ib_sriov.retain(|k, _| !k.eq_ignore_ascii_case("rdmaIsolation"));
    ib_sriov.insert("rdmaIsolation".into(), json!(true));
    drop_rdma_entry(
        entry,
        "\"rdmaIsolation\": true written on the ib-sriov entry instead: ib-sriov-cni then moves \
         the VF's ib device into the pod before the IPoIB netdev (moved after it, as rdma-cni \
         did, the kernel re-creates the netdev)",
        warnings,
    );
}

/// sriov-cni with no rdma entry after it: mode `rdma` follows it.
fn rdma_after_sriov(out: &mut Vec<Emitted>, warnings: &mut Vec<String>) {
    warnings.push(
        "sriov: no rdma plugin after it; rdma-ns mode \"rdma\" added after it so the VF's ib \
         device follows it into the pod (needs exclusive RDMA netns mode)"
            .into(),
    );
    out.push(Emitted {
        entry: rdma_ns_entry("rdma"),
        peer: None,
    });
}

/// The line for an entry kept with no rdma entry after it.
fn kept_alone(entry: &Map<String, Value>, peer: &Peer) -> String {
    let ty = entry_type(entry);
    if peer.plugin_type == "infiniband" {
        return format!("{ty}: kept as it is; no rdma-ns entry after it");
    }
    if peer.plugin_type == "sriov" {
        return format!(
            "{ty}: kept; no rdma-ns entry after it: its VF is bound to a DPDK driver (`dpdk`), so \
             no ib device reaches the pod"
        );
    }
    if is_true(entry, "vfioPciMode") {
        return format!(
            "{ty}: kept as it is; its VF is bound to vfio-pci (`vfioPciMode`): no netdev, no ib \
             device"
        );
    }
    if is_true(entry, "rdmaIsolation") {
        return format!(
            "{ty}: kept as it is; `rdmaIsolation` moves the VF's ib device into the pod, no \
             rdma-ns entry after it"
        );
    }
    format!(
        "{ty}: kept; without `rdmaIsolation` the VF's ib device stays in the host: set \
         \"rdmaIsolation\": true for it to follow the netdev (exclusive netns mode). No rdma-ns \
         entry after it: an IB VF's ib device moved after its IPoIB netdev makes the kernel \
         re-create the netdev"
    )
}

#[cfg(test)]
mod tests;
