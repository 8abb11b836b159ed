//! The CNI plugins rdma-ns replaces or chains after ("peers"), as their own sources define
//! them: the `type` each registers, every field its Go config struct reads (with the json tag
//! it reads it by) or its README documents, and what rdma-ns does with each. `rdma-ns migrate`
//! converts peer confs with this table ([`migrate`]); `rdma-ns doctor --conf` names which
//! rdma-ns mode replaces a peer it finds. docs/migration.md prints the same table, and
//! a test holds the two together.

pub mod migrate;
mod table;

use serde_json::{Map, Value};

pub use table::{CONFLIST_FIELDS, PEERS};

/// One peer plugin as one of its releases reads its conf.
#[derive(Debug)]
pub struct Peer {
    /// The plugin as people call it (its repository), with the releases meant when several
    /// read the same `type` differently.
    pub plugin: &'static str,
    /// The `type` it registers (its binary's name).
    pub plugin_type: &'static str,
    /// Which entries of that `type` are this peer.
    pub matching: Matching,
    pub role: Role,
    /// Where the schema was read: repository and files.
    pub source: &'static str,
    /// Every field of the plugin's entry.
    pub fields: &'static [Field],
    /// What the plugin did with no field asking for it, and what rdma-ns does about it.
    pub implied: &'static [Implied],
}

/// Which entries of a `type` a peer is: `infiniband` was registered by the first releases of
/// two plugins, whose confs differ in the field each required; sriov-cni v1's `dpdk` binds the
/// VF to a DPDK driver, which changes what may follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matching {
    /// Every entry of the type.
    Type,
    /// Entries of the type that have this field.
    With(&'static str),
    /// Entries of the type without this field.
    Without(&'static str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The entry becomes an rdma-ns entry of this mode.
    Replaced(&'static str),
    /// The entry stays (it configures the VF through the PF, which rdma-ns does not do), and
    /// rdma-ns mode `rdma` follows it unless one of its fields says no ib device reaches the pod.
    KeptWithRdmaAfter,
    /// The entry stays and no rdma-ns entry follows it.
    Kept,
}

#[derive(Debug)]
pub struct Field {
    /// As the plugin reads it; a dot steps into an object (`args.cni.debug`).
    pub name: &'static str,
    pub action: Action,
    /// Why, in a phrase: the docs/migration.md cell, and the stderr line for a field not carried.
    pub why: &'static str,
}

#[derive(Debug, Clone, Copy)]
pub enum Action {
    /// Into this field of the rdma-ns entry (docs/configuration.md lists it), value
    /// unchanged.
    Maps(&'static str),
    /// Into this field of the rdma-ns entry, the value converted (None: nothing written), with
    /// a warning for each decision the conversion took.
    MapsWith(&'static str, fn(&Value) -> Converted),
    /// Carried over as it is: a protocol field on the rdma-ns entry, or any field of an entry
    /// that stays.
    Carries,
    /// Not carried; named on stderr with the reason.
    Drops,
}

/// A converted value (None: nothing written) and the decisions taken on the way, each a
/// warning of `migrate`.
pub type Converted = (Option<Value>, Vec<String>);

#[derive(Debug)]
pub struct Implied {
    /// What the plugin did without a field asking.
    pub behaviour: &'static str,
    /// The rdma-ns field and the JSON value migrate writes to keep that, if any.
    pub writes: Option<(&'static str, &'static str)>,
    pub why: &'static str,
}

impl Peer {
    /// The field of this peer that `key` (a path as in [`Field::name`]) names. Go's
    /// encoding/json, which every peer decodes with, matches keys to fields ignoring case, so
    /// `"Master"` reaches ipoib-cni's `master`; an exact match wins.
    pub fn field(&self, key: &str) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.name == key).or_else(|| {
            self.fields
                .iter()
                .find(|f| f.name.eq_ignore_ascii_case(key))
        })
    }

    /// Whether some field of this peer lies inside the object at `path`.
    pub fn has_fields_under(&self, path: &str) -> bool {
        self.fields.iter().any(|f| {
            f.name.len() > path.len()
                && f.name.as_bytes()[path.len()] == b'.'
                && f.name[..path.len()].eq_ignore_ascii_case(path)
        })
    }

    /// What takes this peer's place, in words (README's peer table; `doctor --conf`).
    pub fn replaced_by(&self) -> String {
        match self.role {
            Role::Replaced(mode) => format!("rdma-ns mode `{mode}`"),
            Role::KeptWithRdmaAfter => "kept; rdma-ns mode `rdma` after it".into(),
            Role::Kept => "kept; no rdma-ns entry after it".into(),
        }
    }

    /// How docs/migration.md names the entries this peer reads.
    pub fn type_description(&self) -> String {
        match self.matching {
            Matching::Type => format!("`{}`", self.plugin_type),
            Matching::With(key) => format!("`{}` with `{key}`", self.plugin_type),
            Matching::Without(key) => format!("`{}` without `{key}`", self.plugin_type),
        }
    }
}

impl Field {
    /// The docs/migration.md cell: what rdma-ns does with the field, and why.
    pub fn describe(&self) -> String {
        let what = match self.action {
            Action::Maps(to) | Action::MapsWith(to, _) => format!("→ `{to}`"),
            Action::Carries => "carried".into(),
            Action::Drops => "not carried".into(),
        };
        format!("{what}: {}", self.why)
    }
}

impl Implied {
    pub fn describe(&self) -> String {
        match self.writes {
            Some((field, value)) => format!("writes `\"{field}\": {value}`: {}", self.why),
            None => format!("nothing written: {}", self.why),
        }
    }
}

/// The value at `key` of `map`, the key matched as Go's decoder matches it (exact, else
/// ignoring case).
pub fn get_field<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    map.get(key).or_else(|| {
        map.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    })
}

/// The peer a plugin entry is, if any: of the peers of its type, one told apart by a field
/// (sriov-cni v1's `dpdk`) before the one that takes every entry.
pub fn peer_of(entry: &Map<String, Value>) -> Option<&'static Peer> {
    let plugin_type = entry.get("type")?.as_str()?;
    let of_type = || PEERS.iter().filter(|p| p.plugin_type == plugin_type);
    of_type()
        .find(|p| match p.matching {
            Matching::Type => false,
            Matching::With(key) => get_field(entry, key).is_some(),
            Matching::Without(key) => get_field(entry, key).is_none(),
        })
        .or_else(|| of_type().find(|p| p.matching == Matching::Type))
}

/// Every `type` a peer registers, each once, in table order.
pub fn peer_types() -> Vec<&'static str> {
    let mut types: Vec<&str> = Vec::new();
    for p in PEERS {
        if !types.contains(&p.plugin_type) {
            types.push(p.plugin_type);
        }
    }
    types
}

#[cfg(test)]
mod tests;
