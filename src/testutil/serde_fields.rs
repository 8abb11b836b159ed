//! The field names a derived `Deserialize` type reads, as serde's derive hands them to the
//! deserializer (renames applied): what the docs tests compare the documented fields with.

use serde::de::{Deserialize, Deserializer, Visitor};

/// The fields `T` asks for; empty for a type that is not a derived struct.
pub fn serde_fields<'de, T: Deserialize<'de>>() -> &'static [&'static str] {
    match T::deserialize(FieldNames) {
        Err(Found(fields)) => fields,
        Ok(_) => &[],
    }
}

/// A deserializer that answers every request with the struct's field list, as an error.
struct FieldNames;

#[derive(Debug)]
struct Found(&'static [&'static str]);

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "fields {:?}", self.0)
    }
}

impl std::error::Error for Found {}

impl serde::de::Error for Found {
    fn custom<M: std::fmt::Display>(_: M) -> Found {
        Found(&[])
    }
}

impl<'de> Deserializer<'de> for FieldNames {
    type Error = Found;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Found> {
        Err(Found(&[]))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Found> {
        Err(Found(fields))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// The fields of the network configuration each decoder reads, noted on this thread while a
/// test asks (`start` .. `take`): how the docs test learns every field the parsers accept.
pub mod read_log {
    use std::cell::RefCell;
    use std::collections::BTreeSet;

    thread_local! {
        static READ: RefCell<Option<BTreeSet<String>>> = const { RefCell::new(None) };
    }

    /// Starts noting on this thread.
    pub fn start() {
        READ.with(|r| *r.borrow_mut() = Some(BTreeSet::new()));
    }

    /// What was noted since `start`, which it ends.
    pub fn take() -> BTreeSet<String> {
        READ.with(|r| r.borrow_mut().take().unwrap_or_default())
    }

    /// Notes the fields `T` reads, each after `prefix` (`dra.` for a nested object).
    pub fn note<'de, T: serde::Deserialize<'de>>(prefix: &str) {
        READ.with(|r| {
            if let Some(read) = r.borrow_mut().as_mut() {
                let fields = super::serde_fields::<T>();
                read.extend(fields.iter().map(|f| format!("{prefix}{f}")));
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Example {
        soft_roce: Option<bool>,
        #[serde(rename = "cni.dev/attachments")]
        attachments: Option<Vec<String>>,
    }

    #[test]
    fn a_derived_struct_names_its_fields_as_renamed() {
        assert_eq!(
            serde_fields::<Example>(),
            &["softRoce", "cni.dev/attachments"]
        );
        assert!(serde_fields::<String>().is_empty());
    }
}
