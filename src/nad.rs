//! Network configuration files as operators keep them: a conflist, a single conf, or a Multus
//! NetworkAttachmentDefinition (JSON, or YAML with the conf in `spec.config`). `rdma-ns migrate`
//! and `rdma-ns doctor --conf` read them through here.
//!
//! YAML is read only as far as a NAD needs: the `spec.config` string (block, single- or
//! double-quoted scalar). That keeps a YAML parser out of the binary, whose every byte is paid
//! on each CNI exec.

use serde_json::Value;

/// What a network configuration file was: a conf or conflist itself, or a
/// NetworkAttachmentDefinition holding one in `spec.config`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Conf,
    Nad,
}

/// The conf or conflist in `text`: the JSON itself, or a NetworkAttachmentDefinition's
/// `spec.config` (from JSON or YAML) parsed as JSON. The error says what the text is not.
pub fn network_config(text: &str) -> Result<Value, String> {
    read(text).map(|(conf, _)| conf)
}

/// [`network_config`], and which form the file had.
pub fn read(text: &str) -> Result<(Value, Form), String> {
    match serde_json::from_str::<Value>(text) {
        Ok(v) if v.get("kind").and_then(Value::as_str) == Some("NetworkAttachmentDefinition") => {
            let config = v["spec"]["config"]
                .as_str()
                .ok_or("a NetworkAttachmentDefinition without spec.config")?;
            Ok((parse_spec_config(config)?, Form::Nad))
        }
        Ok(v) => Ok((v, Form::Conf)),
        Err(json_err) => {
            let config = spec_config_from_yaml(text).ok_or_else(|| {
                format!(
                    "neither JSON ({json_err}) nor a NetworkAttachmentDefinition in YAML with \
                     spec.config"
                )
            })?;
            Ok((parse_spec_config(&config)?, Form::Nad))
        }
    }
}

fn parse_spec_config(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| format!("spec.config: not JSON: {e}"))
}

/// `spec.config` of a NetworkAttachmentDefinition in YAML, as a string: a block scalar
/// (`config: |`), or a single- or double-quoted scalar over one or more lines. Line breaks in a
/// quoted scalar fold to spaces, which JSON ignores between tokens.
pub fn spec_config_from_yaml(text: &str) -> Option<String> {
    if !text
        .lines()
        .any(|l| l.trim() == "kind: NetworkAttachmentDefinition")
    {
        return None;
    }
    let lines: Vec<&str> = text.lines().collect();
    let spec = lines.iter().position(|l| l.trim_end() == "spec:")?;
    let (at, line) = lines
        .iter()
        .enumerate()
        .skip(spec + 1)
        .find(|(_, l)| l.trim_start().starts_with("config:"))?;
    let indent = line.len() - line.trim_start().len();
    let rest = line.trim_start()["config:".len()..].trim();
    if rest.starts_with('|') || rest.starts_with('>') {
        let body: Vec<&str> = lines[at + 1..]
            .iter()
            .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() > indent)
            .copied()
            .collect();
        return Some(body.join("\n"));
    }
    let quote = rest.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let mut joined = rest.to_string();
    for l in &lines[at + 1..] {
        if closed(&joined, quote) {
            break;
        }
        joined.push(' ');
        joined.push_str(l.trim());
    }
    if !closed(&joined, quote) {
        return None;
    }
    let end = joined.rfind(quote)?;
    let inner = &joined[1..end];
    if quote == '\'' {
        Some(inner.replace("''", "'"))
    } else {
        serde_json::from_str::<String>(&joined[..=end]).ok()
    }
}

/// Whether the scalar opened by `quote` at the start of `s` is closed.
fn closed(s: &str, quote: char) -> bool {
    let mut chars = s.chars().skip(1).peekable();
    while let Some(c) = chars.next() {
        match (c, quote) {
            ('\\', '"') => {
                chars.next();
            }
            ('\'', '\'') if chars.peek() == Some(&'\'') => {
                chars.next();
            }
            (c, q) if c == q => return true,
            _ => {}
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn yaml_nad_configs_in_every_scalar_style_are_found() {
        let block = "kind: NetworkAttachmentDefinition\nspec:\n  config: |\n    {\"a\": 1,\n     \"b\": \"x\"}\nother: 1\n";
        assert_eq!(
            spec_config_from_yaml(block).unwrap().replace(' ', ""),
            "{\"a\":1,\n\"b\":\"x\"}"
        );
        let single =
            "kind: NetworkAttachmentDefinition\nspec:\n  config: '{\n    \"it''s\": 1\n  }'\n";
        assert_eq!(spec_config_from_yaml(single).unwrap(), "{ \"it's\": 1 }");
        let double = "kind: NetworkAttachmentDefinition\nspec:\n  config: \"{\\\"a\\\": 1}\"\n";
        assert_eq!(spec_config_from_yaml(double).unwrap(), "{\"a\": 1}");
        assert!(spec_config_from_yaml("kind: Pod\nspec:\n  config: '{}'\n").is_none());
        assert!(
            spec_config_from_yaml("kind: NetworkAttachmentDefinition\nspec:\n  config: '{\n")
                .is_none()
        );
    }

    #[test]
    fn a_conf_a_json_nad_and_a_yaml_nad_give_the_same_config() {
        let conf = r#"{"cniVersion":"1.0.0","name":"n","type":"x"}"#;
        let json_nad = json!({
            "kind": "NetworkAttachmentDefinition",
            "spec": {"config": conf},
        })
        .to_string();
        let yaml_nad = format!("kind: NetworkAttachmentDefinition\nspec:\n  config: '{conf}'\n");
        let want: Value = serde_json::from_str(conf).unwrap();
        for text in [conf, json_nad.as_str(), yaml_nad.as_str()] {
            assert_eq!(network_config(text).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn what_is_not_a_config_is_named() {
        let no_config = json!({"kind": "NetworkAttachmentDefinition", "spec": {}}).to_string();
        assert!(network_config(&no_config)
            .unwrap_err()
            .contains("without spec.config"));
        let bad_config = "kind: NetworkAttachmentDefinition\nspec:\n  config: '{nope'\n";
        assert!(network_config(bad_config)
            .unwrap_err()
            .contains("spec.config: not JSON"));
        assert!(network_config("kind: Pod\n")
            .unwrap_err()
            .contains("neither JSON"));
    }
}
