//! Shared pieces of the property-based fuzz tests (`fuzz_tests` modules): case counts,
//! generators of near-valid input, and the "rejected with a documented code" check.
//!
//! Pure random bytes rarely get past a parser's first check, so the generators start from
//! valid shapes and then mutate them: JSON values get fields replaced, removed or retyped,
//! and byte strings get bytes flipped, cut out or inserted.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError};
use serde_json::{json, Map, Value};

use crate::error::Error;

/// Every code the plugin documents (docs/configuration.md, "Error codes").
pub use crate::error::CODES as DOCUMENTED_CODES;

/// The proptest configuration of one property. `default_cases` is sized so the whole fuzz
/// suite stays well under a minute in a debug build on a small CI machine; `PROPTEST_CASES`
/// (proptest's own variable) sets every property's count, and `RDMA_NS_FUZZ_SCALE` multiplies
/// the defaults, for deep runs.
pub fn config(default_cases: u32) -> Config {
    Config {
        cases: cases(default_cases),
        // A failing input is kept as a named unit test next to the fix instead, so no
        // regression files appear in the source tree.
        failure_persistence: None,
        ..Config::default()
    }
}

/// The case count [`config`] uses, also for hand-rolled loops.
pub fn cases(default_cases: u32) -> u32 {
    let var = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.trim().parse::<u32>().ok())
    };
    if let Some(n) = var("PROPTEST_CASES") {
        return n;
    }
    match var("RDMA_NS_FUZZ_SCALE") {
        Some(k) => default_cases.saturating_mul(k.max(1)),
        None => default_cases,
    }
}

/// A rejection must carry a documented code, one of those `allowed` for this
/// parser, and a message that says something.
pub fn check_rejection(err: &Error, allowed: &[u32]) -> Result<(), TestCaseError> {
    let code = err.code();
    prop_assert!(
        DOCUMENTED_CODES.contains(&code),
        "undocumented code {code}: {err}"
    );
    prop_assert!(
        allowed.contains(&code),
        "code {code} is not one this parser may give ({allowed:?}): {err}"
    );
    prop_assert!(
        !err.to_string().trim().is_empty(),
        "empty message for code {code}"
    );
    Ok(())
}

/// Strings that parsers treat specially, plus arbitrary ones.
pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "\\PC{0,16}",
        1 => "[ -~]{0,40}",
        2 => prop::sample::select(vec![
            "", " ", "..", ".", "/", "/tmp/x", "a/../b", "1.1.0", "1.0.0", "0.4.0", "0.3.1",
            "0.3.0", "0.2.0", "1.1", "move", "macvlan", "ipoib", "rdma", "auto", "exclusive",
            "off", "bridge", "datagram", "connected", "10.1.2.3/24", "fd00::5/64", "10.0.0.1",
            "0.0.0.0/0", "10.0.0.1/33", "02:00:00:00:00:01", "03:00:00:00:00:01",
            "0000:3b:00.2", "mlx5_core.sf.4", "mlx5_0", "0x8001", "0x8000", "0", "-1",
            "4294967296", "18446744073709551616", "true", "1e400", "net1", "\0", "\u{fffd}",
            "0666", "07777", "root",
        ])
        .prop_map(str::to_string),
        1 => (1usize..400).prop_map(|n| "a".repeat(n)),
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop::sample::select(vec![
            0u64, 1, 67, 68, 255, 256, 65535, 65536, 4294967295, 4294967296
        ])
        .prop_map(Value::from),
        any::<f64>().prop_filter_map("finite", |f| serde_json::Number::from_f64(f)
            .map(Value::Number)),
        text().prop_map(Value::String),
    ]
}

/// Arbitrary JSON, nested a few levels.
pub fn json() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((text(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// One edit of a JSON document, applied at a path chosen by index.
#[derive(Debug, Clone)]
pub enum JsonEdit {
    Replace(usize, Value),
    Remove(usize),
    /// Wraps the value in an array (a scalar where a list is expected and vice versa).
    Wrap(usize),
    Insert(usize, String, Value),
}

pub fn json_edits(max: usize) -> impl Strategy<Value = Vec<JsonEdit>> {
    let edit = prop_oneof![
        3 => (any::<usize>(), json()).prop_map(|(i, v)| JsonEdit::Replace(i, v)),
        2 => any::<usize>().prop_map(JsonEdit::Remove),
        1 => any::<usize>().prop_map(JsonEdit::Wrap),
        1 => (any::<usize>(), text(), json()).prop_map(|(i, k, v)| JsonEdit::Insert(i, k, v)),
    ];
    prop::collection::vec(edit, 0..=max)
}

/// JSON pointers of every value in `v`, the root first.
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let key = k.replace('~', "~0").replace('/', "~1");
                pointers(child, format!("{at}/{key}"), out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                pointers(child, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// Applies `edits` to `doc`; an edit whose target does not suit it changes nothing.
pub fn apply_edits(mut doc: Value, edits: &[JsonEdit]) -> Value {
    for edit in edits {
        let mut all = Vec::new();
        pointers(&doc, String::new(), &mut all);
        let pick = |i: usize| all[i % all.len()].clone();
        match edit {
            JsonEdit::Replace(i, v) => {
                if let Some(slot) = doc.pointer_mut(&pick(*i)) {
                    *slot = v.clone();
                }
            }
            JsonEdit::Wrap(i) => {
                if let Some(slot) = doc.pointer_mut(&pick(*i)) {
                    *slot = Value::Array(vec![slot.take()]);
                }
            }
            JsonEdit::Insert(i, k, v) => {
                if let Some(Value::Object(m)) = doc.pointer_mut(&pick(*i)) {
                    m.insert(k.clone(), v.clone());
                }
            }
            JsonEdit::Remove(i) => {
                let p = pick(*i);
                let Some((parent, last)) = p.rsplit_once('/') else {
                    continue;
                };
                let last = last.replace("~1", "/").replace("~0", "~");
                match doc.pointer_mut(parent) {
                    Some(Value::Object(m)) => {
                        m.remove(&last);
                    }
                    Some(Value::Array(a)) => {
                        if let Ok(idx) = last.parse::<usize>() {
                            if idx < a.len() {
                                a.remove(idx);
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    doc
}

/// One edit of a byte string, at a position chosen by index.
#[derive(Debug, Clone)]
pub enum ByteEdit {
    Set(usize, u8),
    Cut(usize, usize),
    Insert(usize, Vec<u8>),
    Truncate(usize),
}

pub fn byte_edits(max: usize) -> impl Strategy<Value = Vec<ByteEdit>> {
    let edit = prop_oneof![
        4 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| ByteEdit::Set(i, b)),
        2 => (any::<usize>(), 1usize..8).prop_map(|(i, n)| ByteEdit::Cut(i, n)),
        2 => (any::<usize>(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(i, b)| ByteEdit::Insert(i, b)),
        1 => any::<usize>().prop_map(ByteEdit::Truncate),
    ];
    prop::collection::vec(edit, 0..=max)
}

pub fn apply_byte_edits(mut bytes: Vec<u8>, edits: &[ByteEdit]) -> Vec<u8> {
    for edit in edits {
        let len = bytes.len();
        match edit {
            ByteEdit::Set(i, b) if len > 0 => bytes[i % len] = *b,
            ByteEdit::Cut(i, n) if len > 0 => {
                let start = i % len;
                bytes.drain(start..(start + n).min(len));
            }
            ByteEdit::Insert(i, b) => {
                let at = i % (len + 1);
                bytes.splice(at..at, b.iter().copied());
            }
            ByteEdit::Truncate(i) => bytes.truncate(i % (len + 1)),
            _ => {}
        }
    }
    bytes
}

/// A JSON document, edited as a value and then maybe as bytes: what a broken or hostile
/// producer could send.
pub fn mutated_json(base: impl Strategy<Value = Value>) -> impl Strategy<Value = Vec<u8>> {
    (base, json_edits(3), any::<bool>(), byte_edits(3)).prop_map(|(doc, edits, pretty, bytes)| {
        let doc = apply_edits(doc, &edits);
        let text = if pretty {
            serde_json::to_vec_pretty(&doc)
        } else {
            serde_json::to_vec(&doc)
        }
        .expect("a Value serializes");
        apply_byte_edits(text, &bytes)
    })
}

/// Arbitrary bytes, mostly short, sometimes JSON-ish punctuation.
pub fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..64),
        "[{}\\[\\]\":,0-9a-z \\\\]{0,64}".prop_map(String::into_bytes),
    ]
}

/// Conf fields, each with the values it may be given.
type FieldSamples = Vec<(&'static str, Vec<Value>)>;

/// Values a conf field may be given: a few valid ones, so a document often gets deep into
/// validation, and the type mistakes an author makes.
fn conf_fields() -> FieldSamples {
    [
        protocol_fields(),
        device_fields(),
        child_fields(),
        setting_fields(),
        runtime_fields(),
        qos_fields(),
    ]
    .concat()
}

/// The protocol's required fields. They stay first: [`conf_doc`] keeps them present far
/// more often than the rest.
/// `roceQos`: valid, out of range, mistyped, incomplete, with an unknown key.
fn qos_fields() -> FieldSamples {
    vec![(
        "roceQos",
        vec![
            json!({"dscp": 26, "ecn": true, "priority": 3}),
            json!({"dscp": 0, "ecn": false, "priority": 7, "fifoDscp": 63}),
            json!({"dscp": 64, "ecn": true, "priority": 3}),
            json!({"dscp": 26, "ecn": 1, "priority": 3}),
            json!({"dscp": 26, "priority": 3}),
            json!({"dscp": 26, "ecn": true, "priority": 3, "tos": 106}),
            json!(106),
            json!(null),
        ],
    )]
}

fn protocol_fields() -> FieldSamples {
    vec![
        (
            "cniVersion",
            vec![
                json!("1.1.0"),
                json!("1.0.0"),
                json!("0.4.0"),
                json!("0.3.1"),
                json!("0.3.0"),
                json!("0.2.0"),
                json!(1.1),
            ],
        ),
        (
            "name",
            vec![json!("rdma-net"), json!("n"), json!("-bad"), json!("")],
        ),
        ("type", vec![json!("rdma-ns"), json!("")]),
    ]
}

/// How the conf picks the mode and the device.
fn device_fields() -> FieldSamples {
    vec![
        (
            "mode",
            vec![
                json!("move"),
                json!("macvlan"),
                json!("ipoib"),
                json!("rdma"),
                json!("Move"),
            ],
        ),
        (
            "device",
            vec![
                json!("ens1f0"),
                json!("eth0"),
                json!("a-name-too-long-for-ifnamsiz"),
                json!(".."),
            ],
        ),
        (
            "hwaddr",
            vec![
                json!("02:00:00:00:00:01"),
                json!("02:00"),
                json!(vec!["80"; 20].join(":")),
            ],
        ),
        (
            "kernelpath",
            vec![
                json!("/sys/devices/pci0000:00/0000:00:02.0"),
                json!("/sys/../etc"),
                json!("/etc"),
            ],
        ),
        (
            "rdmaDevice",
            vec![json!("mlx5_0"), json!(".."), json!("a/b")],
        ),
        (
            "deviceID",
            vec![
                json!("0000:3b:00.2"),
                json!("mlx5_core.sf.4"),
                json!("0"),
                json!(""),
            ],
        ),
        ("pciBusID", vec![json!("0000:3b:00.2"), json!("zz")]),
        ("master", vec![json!("ens1f0"), json!("ib0"), json!("x/y")]),
    ]
}

/// The settings of a macvlan or IPoIB child.
fn child_fields() -> FieldSamples {
    vec![
        (
            "macvlanMode",
            vec![
                json!("bridge"),
                json!("private"),
                json!("vepa"),
                json!("passthru"),
                json!("nat"),
            ],
        ),
        (
            "mac",
            vec![
                json!("02:00:00:00:00:01"),
                json!("03:00:00:00:00:01"),
                json!("nope"),
            ],
        ),
        (
            "pkey",
            vec![
                json!("0x8001"),
                json!(32769),
                json!("0x8000"),
                json!(0),
                json!(65536),
                json!("zz"),
            ],
        ),
        (
            "ipoibMode",
            vec![
                json!("auto"),
                json!("datagram"),
                json!("connected"),
                json!("cm"),
            ],
        ),
        ("umcast", vec![json!(true), json!(false), json!("yes")]),
    ]
}

/// The plugin's own settings: RDMA, MTU, timeouts, data directory, device permissions.
fn setting_fields() -> FieldSamples {
    vec![
        (
            "rdma",
            vec![json!("auto"), json!("exclusive"), json!("off"), json!("on")],
        ),
        (
            "mtu",
            vec![
                json!(1500),
                json!(67),
                json!(65536),
                json!(-1),
                json!(9000.5),
            ],
        ),
        (
            "lockTimeoutMs",
            vec![json!(0), json!(10000), json!(4294967296u64)],
        ),
        ("gidTimeoutMs", vec![json!(0), json!(2000)]),
        ("ipamTimeoutMs", vec![json!(0), json!(1), json!(60000)]),
        (
            "dataDir",
            vec![
                json!("/var/lib/cni/rdma-ns-fuzz"),
                json!("relative"),
                json!("/a/../b"),
                json!(""),
            ],
        ),
        (
            "devicePermissions",
            vec![
                json!({"uverbs": "0666", "group": "root"}),
                json!({"uverbs": "4777"}),
                json!({"group": 0}),
                json!({"umad": 666}),
                json!({"rdma_cm": "0660", "issm": "0600", "group": "4294967295"}),
            ],
        ),
        (
            "rail",
            vec![
                json!(true),
                json!(false),
                json!({"table": 1001, "priority": 100, "arpIgnore": 2, "rpFilter": 0}),
                json!({"table": 254}),
                json!({"priority": 32766, "arpAnnounce": 3}),
                json!({"tabel": 1}),
                json!("yes"),
            ],
        ),
    ]
}

/// What the runtime and the chain hand the plugin: IPAM and DNS, runtimeConfig and
/// capabilities, GC's attachments, prevResult.
fn runtime_fields() -> FieldSamples {
    vec![
        (
            "ipam",
            vec![
                json!({}),
                json!({"type": "host-local", "subnet": "10.0.0.0/24"}),
                json!({"subnet": "10.0.0.0/24"}),
                json!({"type": ""}),
            ],
        ),
        (
            "dns",
            vec![
                json!({"nameservers": ["10.0.0.10"], "domain": "x", "search": ["a"], "options": ["ndots:5"]}),
                json!({"nameservers": "10.0.0.10"}),
            ],
        ),
        (
            "runtimeConfig",
            vec![
                json!({"deviceID": "0000:3b:00.2", "ips": ["10.0.0.5/24"], "mac": "02:00:00:00:00:02"}),
                json!({"DeviceID": "0000:3b:00.2", "deviceID": "0000:3b:00.3"}),
                json!({"CNIDeviceInfoFile": "/var/run/k8s.cni.cncf.io/devinfo/cni/x", "ips": [1]}),
            ],
        ),
        (
            "capabilities",
            vec![
                json!({"ips": true, "mac": true, "deviceID": true}),
                json!({"ips": "yes"}),
            ],
        ),
        (
            "cni.dev/valid-attachments",
            vec![
                json!([{"containerID": "c1", "ifname": "net1"}]),
                json!(null),
                json!([{"containerID": ""}]),
                json!({}),
            ],
        ),
        (
            "cni.dev/attachments",
            vec![json!([{"containerID": "c1", "ifname": "net1"}])],
        ),
        (
            "prevResult",
            vec![
                json!({"cniVersion": "1.1.0", "interfaces": [{"name": "net1", "mtu": 1500}], "ips": [{"address": "10.0.0.5/24", "interface": 0}]}),
                json!({"ips": [{"version": "4", "address": "10.0.0.5/24"}]}),
                json!({"ips": [{"version": "6", "address": "10.0.0.5/24"}]}),
                json!({"ips": [{"address": "10.0.0.5", "interface": 3}]}),
                json!({"cniVersion": "9.9.9"}),
            ],
        ),
    ]
}

/// A network configuration document: every known field absent, valid, mistyped or arbitrary.
/// `logFile` is never generated: the log sink opens it, and tests must not create files at
/// arbitrary paths.
pub fn conf_doc() -> impl Strategy<Value = Value> {
    let fields = conf_fields();
    let n = fields.len();
    prop::collection::vec((0u8..10, any::<prop::sample::Index>(), json()), n).prop_map(
        move |choices| {
            let mut doc = Map::new();
            for (i, ((key, samples), (c, idx, random))) in fields.iter().zip(choices).enumerate() {
                // The three required fields are present far more often, or most documents
                // would stop at the first check.
                let absent = if i < 3 { c < 1 } else { c < 5 };
                if absent {
                    continue;
                }
                let value = if c < 9 {
                    idx.get(samples).clone()
                } else {
                    random
                };
                doc.insert((*key).to_string(), value);
            }
            Value::Object(doc)
        },
    )
}

/// True when `stdin` is a JSON object naming a log file (which the protocol layer would open).
pub fn names_log_file(stdin: &[u8]) -> bool {
    serde_json::from_slice::<Value>(stdin)
        .ok()
        .and_then(|v| v.get("logFile").cloned())
        .is_some()
}
