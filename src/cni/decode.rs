//! Decoding JSON into derived types so that a bad value is reported with the path of its field
//! (`ips[0].address`) and in the words of our messages ("must be a string, got 1"), not serde's.

use serde::de::{DeserializeOwned, Deserializer};
use serde::Deserialize;

/// Why a JSON text did not decode into the wanted type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Not JSON at all (or cut short): nothing in it can be trusted, including the field names.
    Syntax(String),
    /// A value of the wrong type or range, or a required field missing, at `path`.
    Field { path: String, msg: String },
}

impl Failure {
    /// One line naming the field, for messages that have no field slot (code 6).
    pub fn joined(&self) -> String {
        match self {
            Failure::Syntax(msg) => msg.clone(),
            Failure::Field { path, msg } if path.is_empty() => msg.clone(),
            Failure::Field { path, msg } => format!("{path} {msg}"),
        }
    }
}

/// Decodes `bytes`; paths in failures start with `root` (empty for top-level fields).
pub fn from_slice<'de, T: Deserialize<'de>>(bytes: &'de [u8], root: &str) -> Result<T, Failure> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = decode(&mut de, root)?;
    // Trailing bytes after the value: serde_json::from_slice refuses them too.
    de.end().map_err(|e| Failure::Syntax(e.to_string()))?;
    Ok(value)
}

/// Decodes an already parsed value (a delegated plugin's output), with the same messages.
pub fn from_value<T: DeserializeOwned>(
    value: &serde_json::Value,
    root: &str,
) -> Result<T, Failure> {
    decode(value, root)
}

fn decode<'de, D, T>(de: D, root: &str) -> Result<T, Failure>
where
    D: Deserializer<'de, Error = serde_json::Error>,
    T: Deserialize<'de>,
{
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = join(root, &e.path().to_string());
        let inner = e.into_inner();
        if !inner.is_data() {
            return Failure::Syntax(inner.to_string());
        }
        let mut text = inner.to_string();
        if inner.line() != 0 {
            let at = format!(" at line {} column {}", inner.line(), inner.column());
            if let Some(stripped) = text.strip_suffix(&at) {
                text.truncate(stripped.len());
            }
        }
        // serde reports a missing field at the object that lacks it.
        if let Some(field) = text
            .strip_prefix("missing field `")
            .and_then(|rest| rest.strip_suffix('`'))
        {
            return Failure::Field {
                path: join(&path, field),
                msg: "is required".into(),
            };
        }
        Failure::Field {
            path,
            msg: in_our_words(&text),
        }
    })
}

/// `root` followed by serde_path_to_error's rendering of the rest (`.` alone for the root).
fn join(root: &str, rest: &str) -> String {
    match rest {
        "." | "" => root.to_string(),
        _ if root.is_empty() || rest.starts_with('[') => format!("{root}{rest}"),
        _ => format!("{root}.{rest}"),
    }
}

/// serde's "invalid type: string \"x\", expected u32" as "must be an integer from 0 to
/// 4294967295, got \"x\"". Messages our own types raise pass unchanged.
fn in_our_words(text: &str) -> String {
    let split = text
        .strip_prefix("invalid type: ")
        .or_else(|| text.strip_prefix("invalid value: "))
        .and_then(|rest| rest.split_once(", expected "));
    match split {
        Some((got, expected)) => format!(
            "must be {}, got {}",
            expected_words(expected),
            got_words(got)
        ),
        None => text.to_string(),
    }
}

fn expected_words(expected: &str) -> &str {
    match expected {
        "u8" => "an integer from 0 to 255",
        "u16" => "an integer from 0 to 65535",
        "u32" => "an integer from 0 to 4294967295",
        "u64" | "usize" => "a non-negative integer",
        "a sequence" => "an array",
        "a map" => "an object",
        "a boolean" => "true or false",
        other => other,
    }
}

/// serde's description of the value found, as the JSON that was there where it can say.
fn got_words(got: &str) -> String {
    for prefix in ["integer `", "floating point `", "boolean `"] {
        if let Some(v) = got.strip_prefix(prefix).and_then(|r| r.strip_suffix('`')) {
            return v.to_string();
        }
    }
    if let Some(s) = got.strip_prefix("string ") {
        return s.to_string();
    }
    match got {
        "sequence" => "an array".into(),
        "map" => "an object".into(),
        "unit value" | "null" => "null".into(),
        other => other.to_string(),
    }
}

/// Deserializes `null` as the type's default: the walkers this replaced read a null list as an
/// empty one, and producers (libcni among them) write `null` for empty lists.
pub fn null_as_default<'de, D, T>(de: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Option::<T>::deserialize(de).map(Option::unwrap_or_default)
}

/// Implements `Deserialize` for structs derived with `#[serde(remote = "Self")]` so that only a
/// JSON object is accepted. A plain derive also takes an array of the field values in order,
/// which would read `"dns": []` as "no DNS" instead of refusing it.
/// `ser:` before the list also implements `Serialize` for types that derive both ways.
macro_rules! objects_only {
    (ser: $($ty:ident),* $(,)?) => {$(
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                $ty::serialize(self, s)
            }
        }
    )* $crate::cni::decode::objects_only!($($ty),*);};
    ($($ty:ident),* $(,)?) => {$(
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
                struct ObjectOnly;
                impl<'de> serde::de::Visitor<'de> for ObjectOnly {
                    type Value = $ty;
                    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                        f.write_str("an object")
                    }
                    fn visit_map<A: serde::de::MapAccess<'de>>(
                        self,
                        map: A,
                    ) -> Result<$ty, A::Error> {
                        $ty::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    }
                }
                de.deserialize_map(ObjectOnly)
            }
        }
    )*};
}
pub(crate) use objects_only;

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(remote = "Self")]
    struct Inner {
        name: String,
        #[serde(default, deserialize_with = "null_as_default")]
        tags: Vec<String>,
        mtu: Option<u32>,
    }
    objects_only!(Inner);

    #[derive(Debug, Deserialize, PartialEq)]
    struct Outer {
        #[serde(default)]
        items: Vec<Inner>,
    }

    fn field(json: &str) -> (String, String) {
        match from_slice::<Outer>(json.as_bytes(), "") {
            Err(Failure::Field { path, msg }) => (path, msg),
            other => panic!("{json}: {other:?}"),
        }
    }

    #[test]
    fn failures_name_the_field_in_our_words() {
        assert_eq!(
            field(r#"{"items":[{"name":"a"},{"name":1}]}"#),
            ("items[1].name".into(), "must be a string, got 1".into())
        );
        assert_eq!(
            field(r#"{"items":[{"tags":null}]}"#),
            ("items[0].name".into(), "is required".into())
        );
        assert_eq!(
            field(r#"{"items":[{"name":"a","mtu":-1}]}"#),
            (
                "items[0].mtu".into(),
                "must be an integer from 0 to 4294967295, got -1".into()
            )
        );
        assert_eq!(
            field(r#"{"items":[["a"]]}"#),
            ("items[0]".into(), "must be an object, got an array".into())
        );
        assert_eq!(
            field(r#"{"items":{}}"#),
            ("items".into(), "must be an array, got an object".into())
        );
    }

    #[test]
    fn null_lists_are_empty_and_syntax_errors_are_apart() {
        let out: Outer = from_slice(br#"{"items":[{"name":"a","tags":null}]}"#, "").unwrap();
        assert!(out.items[0].tags.is_empty());
        assert!(matches!(
            from_slice::<Outer>(b"{\"items\":", ""),
            Err(Failure::Syntax(_))
        ));
        assert!(matches!(
            from_slice::<Outer>(b"{} x", ""),
            Err(Failure::Syntax(_))
        ));
        let e = from_value::<Outer>(&serde_json::json!({"items": 3}), "result").unwrap_err();
        assert_eq!(e.joined(), "result.items must be an array, got 3");
    }
}
