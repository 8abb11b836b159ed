//! The docs held to the code, in the unit tier: every relative link of the Markdown pages
//! resolves (to a file, and to a heading when it names one); docs/configuration.md's field
//! table is the conf fields the parsers read (`attach::conf_fields`) and its error table the
//! codes `error::CODES` lists; docs/dra.md's key table is `records::claim::CONFIG_KEYS` and its
//! config table the fields of the driver's `DriverConfig`. Each check fails both ways: a row the
//! code does not have, and a name of the code without its row.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Links to files another branch adds (the Helm chart): missing, they pass; once the file is
/// there, it is checked like any other.
const WRITTEN_ELSEWHERE: &[&str] = &["install/helm/rdma-ns/README.md"];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(relative: &str) -> String {
    let path = repo().join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The Markdown pages whose links are checked, relative to the repository.
fn pages() -> Vec<String> {
    let mut pages = vec![
        "README.md".to_string(),
        "CHANGELOG.md".into(),
        "conf/README.md".into(),
        "tests/README.md".into(),
    ];
    for dir in ["docs", "install"] {
        let mut found = Vec::new();
        markdown_under(&repo().join(dir), &mut found);
        pages.extend(found.iter().map(|p| {
            let rel = p.strip_prefix(repo()).expect("under the repository");
            rel.to_string_lossy().into_owned()
        }));
    }
    assert!(pages.iter().any(|p| p == "docs/dra.md"), "{pages:?}");
    pages
}

fn markdown_under(dir: &Path, found: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            markdown_under(&path, found);
        } else if path.extension().is_some_and(|x| x == "md") {
            found.push(path);
        }
    }
}

/// The page's lines outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// `line` without its code spans (a link is never inside one).
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// The targets of the inline links of `text` (`[text](target)`), as written.
fn link_targets(text: &str) -> Vec<String> {
    let mut targets = Vec::new();
    for line in prose(text) {
        let line = without_code(line);
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            let target = rest[..end].split_whitespace().next().unwrap_or("");
            targets.push(target.to_string());
            rest = &rest[end..];
        }
    }
    targets
}

/// A heading's anchor as GitHub makes it: lower case, spaces to `-`, punctuation but `-` and
/// `_` dropped.
fn anchor_of(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings, a repeated one numbered as GitHub numbers it.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for line in prose(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = anchor_of(heading);
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// What is wrong with a relative link of `page`, if anything.
fn broken(page: &str, target: &str) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (file, anchor) = match target.split_once('#') {
        Some((file, anchor)) => (file, Some(anchor)),
        None => (target, None),
    };
    let base = Path::new(page).parent().unwrap_or(Path::new(""));
    let path = if file.is_empty() {
        repo().join(page)
    } else {
        repo().join(base).join(file)
    };
    if !path.exists() {
        let normal = normalize(&base.join(file));
        if WRITTEN_ELSEWHERE.contains(&normal.as_str()) {
            return None;
        }
        return Some(format!("{page}: link to {target}: no file {normal}"));
    }
    let anchor = anchor?;
    if path.is_dir() || path.extension().is_none_or(|x| x != "md") {
        return Some(format!(
            "{page}: link to {target}: an anchor into a file that is not Markdown"
        ));
    }
    let text = std::fs::read_to_string(&path).expect("a readable page");
    if anchors(&text).contains(anchor) {
        None
    } else {
        Some(format!(
            "{page}: link to {target}: no heading with anchor #{anchor}"
        ))
    }
}

/// `a/b/../c` as `a/c`, for messages and the list of files written elsewhere.
fn normalize(path: &Path) -> String {
    let mut parts: Vec<String> = Vec::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                parts.pop();
            }
            std::path::Component::CurDir => {}
            other => parts.push(other.as_os_str().to_string_lossy().into_owned()),
        }
    }
    parts.join("/")
}

#[test]
fn every_relative_link_resolves() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in pages() {
        for target in link_targets(&read(&page)) {
            checked += 1;
            problems.extend(broken(&page, &target));
        }
    }
    assert!(checked > 50, "only {checked} links found");
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn anchors_are_made_as_github_makes_them() {
    assert_eq!(
        anchor_of("Soft-RoCE devices for pods (`softRoce`)"),
        "soft-roce-devices-for-pods-softroce"
    );
    assert_eq!(
        anchors("# A\n```\n# not a heading\n```\n## A\n#no"),
        BTreeSet::from(["a".to_string(), "a-1".to_string()])
    );
    assert_eq!(
        link_targets("[x](a.md#b) `[y](c)` [z](d \"t\")"),
        ["a.md#b", "d"]
    );
}

/// The rows of the table under `header` in `text`, each a list of cells.
fn table(text: &str, header: &str, page: &str) -> Vec<Vec<String>> {
    let lines = prose(text);
    let at = lines
        .iter()
        .position(|l| *l == header)
        .unwrap_or_else(|| panic!("{page} has no table {header}"));
    lines[at + 2..]
        .iter()
        .take_while(|l| l.starts_with('|'))
        .map(|l| cells(l))
        .collect()
}

/// A table row's cells, `\|` kept inside its cell.
fn cells(row: &str) -> Vec<String> {
    let mut cells = vec![String::new()];
    let mut escaped = false;
    for c in row.trim().trim_matches('|').chars() {
        match c {
            '|' if !escaped => cells.push(String::new()),
            c => cells.last_mut().expect("one cell").push(c),
        }
        escaped = c == '\\';
    }
    cells.iter().map(|c| c.trim().to_string()).collect()
}

/// The names in code spans of each row's first cell.
fn first_column_names(rows: &[Vec<String>]) -> BTreeSet<String> {
    rows.iter()
        .flat_map(|row| row[0].split('`').skip(1).step_by(2).map(String::from))
        .collect()
}

/// Asserts `documented` and `code` name the same things, each direction on its own.
fn same_names(documented: &BTreeSet<String>, code: &BTreeSet<String>, what: &str) {
    let undocumented: Vec<&String> = code.difference(documented).collect();
    assert!(
        undocumented.is_empty(),
        "{what}: in the code, not in the docs: {undocumented:?}"
    );
    let unknown: Vec<&String> = documented.difference(code).collect();
    assert!(
        unknown.is_empty(),
        "{what}: in the docs, not in the code: {unknown:?}"
    );
}

#[test]
fn the_configuration_reference_is_every_conf_field() {
    let page = "docs/configuration.md";
    let rows = table(&read(page), "| field | default | meaning | errors |", page);
    let code = crate::attach::conf_fields::CONF_FIELDS
        .iter()
        .map(|f| f.name.to_string())
        .collect();
    same_names(&first_column_names(&rows), &code, page);
}

#[test]
fn the_error_table_is_every_code() {
    let page = "docs/configuration.md";
    let rows = table(&read(page), "| code | meaning |", page);
    let documented = rows.iter().map(|row| row[0].clone()).collect();
    let code = crate::error::CODES.iter().map(u32::to_string).collect();
    same_names(&documented, &code, "docs/configuration.md, Error codes");
}

/// docs/dra.md's row of a config key, from the code's words.
fn key_row(key: &crate::records::claim::ConfigKey) -> Vec<String> {
    use crate::records::claim::Setter;
    let who = match key.setter {
        Setter::Claim => "a ResourceClaim's own config, or a DeviceClass's",
        Setter::Class => "a DeviceClass's config only",
    };
    let carried = if key.attach {
        "yes: a conf field"
    } else {
        "no: the driver's own"
    };
    vec![
        format!("`{}`", key.name),
        who.into(),
        carried.into(),
        key.why.into(),
    ]
}

#[test]
fn the_dra_key_table_is_config_keys() {
    let page = "docs/dra.md";
    let rows = table(
        &read(page),
        "| key | who may set it | carried to the CNI | why |",
        page,
    );
    let keys = crate::records::claim::CONFIG_KEYS;
    let names = keys.iter().map(|k| format!("`{}`", k.name)).collect();
    let documented = rows.iter().map(|row| row[0].clone()).collect();
    same_names(&documented, &names, "docs/dra.md, the config keys");
    for key in keys {
        let row = rows.iter().find(|r| r[0] == format!("`{}`", key.name));
        let want = key_row(key);
        assert_eq!(
            row,
            Some(&want),
            "docs/dra.md's row of `{}` should read:\n| {} |",
            key.name,
            want.join(" | ")
        );
    }
}

#[cfg(feature = "dra")]
#[test]
fn the_dra_config_table_is_the_drivers_config() {
    use crate::testutil::serde_fields::serde_fields;
    let page = "docs/dra.md";
    let rows = table(&read(page), "| field | default | meaning |", page);
    let code = serde_fields::<crate::dra::config::DriverConfig>()
        .iter()
        .map(|f| f.to_string())
        .collect();
    same_names(
        &first_column_names(&rows),
        &code,
        "docs/dra.md, the driver's config",
    );
}
