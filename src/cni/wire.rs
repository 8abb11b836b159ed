//! The error object a plugin prints on stdout when it fails (spec "Error").

use serde::Serialize;

use crate::error::Error;

#[derive(Serialize)]
struct ErrorReply<'a> {
    #[serde(rename = "cniVersion")]
    cni_version: &'a str,
    code: u32,
    msg: String,
    details: String,
}

/// `{"cniVersion","code","msg","details"}`; `details` is kept even when empty so every reply
/// has the same shape.
pub fn error_json(cni_version: &str, err: &Error) -> String {
    let reply = ErrorReply {
        cni_version,
        code: err.code(),
        msg: err.to_string(),
        details: err.details(),
    };
    serde_json::to_string(&reply).expect("strings and integers always serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_and_escaping() {
        let e = Error::config("mode", "must be \"move\" or \"share\"");
        assert_eq!(
            error_json("1.0.0", &e),
            r#"{"cniVersion":"1.0.0","code":7,"msg":"invalid network configuration: field `mode`: must be \"move\" or \"share\"","details":""}"#
        );
        let d = Error::Delegated {
            plugin: "host-local".into(),
            code: 11,
            msg: "busy".into(),
            details: "lock held".into(),
        };
        assert_eq!(
            error_json("1.1.0", &d),
            r#"{"cniVersion":"1.1.0","code":11,"msg":"IPAM plugin `host-local` failed: busy","details":"lock held"}"#
        );
    }
}
