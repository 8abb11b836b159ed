use super::*;
use serde_json::json;

fn page(name: &str) -> String {
    let path = format!("{}/docs/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(path).unwrap()
}

/// The rows of the page's table whose header line is `header`, separator left out.
fn readme_table(readme: &str, header: &str) -> Vec<String> {
    let mut lines = readme.lines().skip_while(|l| *l != header);
    assert_eq!(lines.next(), Some(header), "the page has no table {header}");
    lines
        .skip(1)
        .take_while(|l| l.starts_with('|'))
        .map(str::to_string)
        .collect()
}

fn peer_rows() -> Vec<String> {
    PEERS
        .iter()
        .map(|p| {
            format!(
                "| {} | {} | {} | {} |",
                p.plugin,
                p.type_description(),
                p.replaced_by(),
                p.source
            )
        })
        .collect()
}

fn field_rows() -> Vec<String> {
    let mut rows: Vec<String> = CONFLIST_FIELDS
        .iter()
        .map(|f| format!("| every peer | `{}` | {} |", f.name, f.describe()))
        .collect();
    for p in PEERS {
        rows.extend(
            p.fields
                .iter()
                .map(|f| format!("| {} | `{}` | {} |", p.plugin, f.name, f.describe())),
        );
        rows.extend(p.implied.iter().map(|i| {
            format!(
                "| {} | (no field) {} | {} |",
                p.plugin,
                i.behaviour,
                i.describe()
            )
        }));
    }
    rows
}

/// docs/migration.md's tables are the code's: one row per peer, one per field and per thing a
/// peer did unasked, in table order and with the same words.
#[test]
fn the_readme_tables_are_the_peer_table() {
    let readme = page("migration.md");
    for (header, want) in [
        ("| peer | type | replaced by | source |", peer_rows()),
        ("| peer | field | rdma-ns |", field_rows()),
    ] {
        let got = readme_table(&readme, header);
        let separator = "|---".repeat(header.matches('|').count() - 1) + "|";
        assert!(
            got == want,
            "docs/migration.md table {header} differs from src/peers/table.rs; it should read:\n{header}\n\
             {separator}\n{}",
            want.join("\n")
        );
    }
}

/// The rdma-ns fields of docs/configuration.md.
fn configuration_reference_fields(readme: &str) -> Vec<String> {
    readme_table(readme, "| field | default | meaning | errors |")
        .iter()
        .filter_map(|row| row.strip_prefix("| `")?.split('`').next().map(String::from))
        .collect()
}

#[test]
fn every_field_mapped_or_written_is_an_rdma_ns_field() {
    let reference = configuration_reference_fields(&page("configuration.md"));
    assert!(reference.iter().any(|f| f == "master"), "{reference:?}");
    for p in PEERS {
        for f in p.fields {
            if let Action::Maps(to) | Action::MapsWith(to, _) = f.action {
                assert!(
                    reference.iter().any(|r| r == to),
                    "{}.{} → {to}",
                    p.plugin,
                    f.name
                );
            }
        }
        for i in p.implied {
            if let Some((to, value)) = i.writes {
                assert!(reference.iter().any(|r| r == to), "{}: {to}", p.plugin);
                assert!(
                    serde_json::from_str::<Value>(value).is_ok(),
                    "{}: {value}",
                    p.plugin
                );
            }
        }
    }
}

/// A key names one field of a peer however it is spelled, as Go's decoder reads it, and no two
/// fields of a peer are one key.
#[test]
fn fields_are_found_ignoring_case_and_are_distinct() {
    let ipoib = PEERS.iter().find(|p| p.plugin_type == "ipoib").unwrap();
    assert_eq!(ipoib.field("Master").unwrap().name, "master");
    assert!(ipoib.field("vf").is_none());
    let rdma = PEERS.iter().find(|p| p.plugin_type == "rdma").unwrap();
    assert!(rdma.has_fields_under("args") && rdma.has_fields_under("Args.CNI"));
    assert!(!rdma.has_fields_under("arg") && !rdma.has_fields_under("args.cni.debug"));
    assert_eq!(rdma.field("Args.CNI.Debug").unwrap().name, "args.cni.debug");
    for p in PEERS {
        for (i, f) in p.fields.iter().enumerate() {
            assert!(
                !p.fields[..i]
                    .iter()
                    .any(|g| g.name.eq_ignore_ascii_case(f.name)),
                "{}: {} twice",
                p.plugin,
                f.name
            );
        }
        assert!(!p.source.is_empty() && !p.fields.is_empty(), "{}", p.plugin);
    }
}

#[test]
fn an_entry_is_the_peer_its_type_and_fields_say() {
    let peer = |entry: Value| peer_of(entry.as_object().unwrap()).map(|p| p.plugin);
    assert_eq!(
        peer(json!({"type": "ipoib", "master": "ib0"})),
        Some("ipoib-cni")
    );
    assert_eq!(
        peer(json!({"type": "infiniband", "Master": "ib0"})),
        Some("ipoib-cni, first releases")
    );
    assert_eq!(
        peer(json!({"type": "infiniband", "deviceID": "0000:03:00.2"})),
        Some("ib-sriov-cni, first releases")
    );
    assert_eq!(peer(json!({"type": "ib-sriov"})), Some("ib-sriov-cni"));
    assert_eq!(
        peer(json!({"type": "sriov", "deviceID": "0000:03:02.0"})),
        Some("sriov-cni")
    );
    assert_eq!(
        peer(json!({"type": "sriov", "dpdk": {}})),
        Some("sriov-cni v1, DPDK")
    );
    assert_eq!(peer(json!({"type": "bridge"})), None);
    assert_eq!(peer(json!({"master": "ib0"})), None);
    assert_eq!(
        peer_types(),
        [
            "rdma",
            "ipoib",
            "infiniband",
            "host-device",
            "sriov",
            "ib-sriov"
        ]
    );
}

#[test]
fn each_peer_says_what_takes_its_place() {
    let by_type = |t: &str| PEERS.iter().find(|p| p.plugin_type == t).unwrap();
    assert_eq!(by_type("ipoib").replaced_by(), "rdma-ns mode `ipoib`");
    assert_eq!(by_type("host-device").replaced_by(), "rdma-ns mode `move`");
    assert_eq!(
        by_type("sriov").replaced_by(),
        "kept; rdma-ns mode `rdma` after it"
    );
    assert_eq!(
        by_type("ib-sriov").replaced_by(),
        "kept; no rdma-ns entry after it"
    );
}
