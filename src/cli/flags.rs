//! The one argument reader of every subcommand: `--flag`, `--flag VALUE` and `--flag=VALUE`.
//!
//! Each subcommand matches the names it knows and asks for a flag's value when the flag takes
//! one; everything else (an unknown flag, a missing value, a value given to a switch, an
//! argument that is not UTF-8) becomes one usage message in the same words for all of them.

use std::ffi::{OsStr, OsString};
use std::time::Duration;

/// A usage error: what was wrong, for `rdma-ns SUBCOMMAND: <this>` followed by the usage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What `next` found: a flag by its name (`-h` and `--help` included), or the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next<'a> {
    Flag(&'a str),
    Help,
    End,
}

pub struct Flags<'a> {
    args: &'a [OsString],
    pos: usize,
    /// The flag being read, for messages.
    current: &'a str,
    /// The `VALUE` of a `--flag=VALUE` not yet taken by [`Flags::value`].
    inline: Option<&'a str>,
}

impl<'a> Flags<'a> {
    pub fn new(args: &'a [OsString]) -> Flags<'a> {
        Flags {
            args,
            pos: 0,
            current: "",
            inline: None,
        }
    }

    /// The next flag. A `--switch=VALUE` whose value the subcommand did not ask for is refused
    /// here, when the reader moves past it.
    pub fn next(&mut self) -> Result<Next<'a>, UsageError> {
        if self.inline.take().is_some() {
            return Err(UsageError(format!("{} takes no value", self.current)));
        }
        let Some(arg) = self.args.get(self.pos) else {
            return Ok(Next::End);
        };
        self.pos += 1;
        let text = utf8(arg)?;
        if text == "-h" || text == "--help" {
            return Ok(Next::Help);
        }
        if !text.starts_with("--") || text == "--" {
            return Err(UsageError(format!("unexpected argument {text:?}")));
        }
        let (name, inline) = match text.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (text, None),
        };
        self.current = name;
        self.inline = inline;
        Ok(Next::Flag(name))
    }

    /// The value of the flag just read: after `=`, or the next argument.
    pub fn value(&mut self) -> Result<&'a str, UsageError> {
        if let Some(v) = self.inline.take() {
            return Ok(v);
        }
        let missing = || UsageError(format!("{} needs a value", self.current));
        let arg = self.args.get(self.pos).ok_or_else(missing)?;
        self.pos += 1;
        utf8(arg)
    }

    /// The value as a whole number of seconds above 0.
    pub fn seconds(&mut self) -> Result<Duration, UsageError> {
        let v = self.value()?;
        v.parse::<u64>()
            .ok()
            .filter(|s| *s > 0)
            .map(Duration::from_secs)
            .ok_or_else(|| {
                UsageError(format!(
                    "{} {v:?}: a whole number of seconds above 0",
                    self.current
                ))
            })
    }

    /// Everything after the flag just read, as given (a command line to run, for example).
    pub fn rest(&mut self) -> &'a [OsString] {
        let rest = &self.args[self.pos..];
        self.pos = self.args.len();
        rest
    }

    /// Reads every flag to the end with `on_flag`, which takes the flags its subcommand knows
    /// (asking for their values) and refuses the others with [`Flags::unknown`]. True for
    /// `--help`, which ends the reading.
    pub fn read_all(
        mut self,
        mut on_flag: impl FnMut(&'a str, &mut Flags<'a>) -> Result<(), UsageError>,
    ) -> Result<bool, UsageError> {
        loop {
            match self.next()? {
                Next::End => return Ok(false),
                Next::Help => return Ok(true),
                Next::Flag(name) => on_flag(name, &mut self)?,
            }
        }
    }

    /// The refusal of a flag the subcommand does not know.
    pub fn unknown(&self) -> UsageError {
        UsageError(format!("unknown argument {:?}", self.current))
    }
}

fn utf8(arg: &OsStr) -> Result<&str, UsageError> {
    arg.to_str()
        .ok_or_else(|| UsageError(format!("argument {arg:?} is not UTF-8")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    /// Reads `args` with `--on` a switch and `--val`/`--secs` taking values.
    fn read(args: &[&str]) -> Result<Vec<String>, UsageError> {
        let args = os(args);
        let mut flags = Flags::new(&args);
        let mut seen = Vec::new();
        loop {
            match flags.next()? {
                Next::End => return Ok(seen),
                Next::Help => seen.push("help".into()),
                Next::Flag("--on") => seen.push("on".into()),
                Next::Flag("--val") => seen.push(format!("val={}", flags.value()?)),
                Next::Flag("--secs") => seen.push(format!("secs={}", flags.seconds()?.as_secs())),
                Next::Flag("--rest") => seen.push(format!("rest={:?}", flags.rest())),
                Next::Flag(_) => return Err(flags.unknown()),
            }
        }
    }

    #[test]
    fn switches_values_and_rest_are_read_in_order() {
        assert_eq!(
            read(&["--on", "--val", "a", "--val=b=c", "--secs", "60", "-h"]).unwrap(),
            ["on", "val=a", "val=b=c", "secs=60", "help"]
        );
        assert_eq!(
            read(&["--rest", "--", "x", "--on"]).unwrap(),
            [r#"rest=["--", "x", "--on"]"#]
        );
        assert_eq!(read(&[]).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn read_all_hands_each_flag_over_and_stops_at_help_or_an_error() {
        let read_all = |args: &[&str]| {
            let args = os(args);
            let mut seen = Vec::new();
            let help = Flags::new(&args).read_all(|flag, flags| {
                match flag {
                    "--on" => seen.push("on".to_string()),
                    "--val" => seen.push(format!("val={}", flags.value()?)),
                    _ => return Err(flags.unknown()),
                }
                Ok(())
            });
            (help, seen)
        };
        assert_eq!(
            read_all(&["--on", "--val=a"]),
            (Ok(false), vec!["on".into(), "val=a".into()])
        );
        assert_eq!(
            read_all(&["--on", "--help", "--frob"]),
            (Ok(true), vec!["on".into()])
        );
        let (err, seen) = read_all(&["--val", "a", "--frob", "--on"]);
        assert_eq!(err.unwrap_err().0, r#"unknown argument "--frob""#);
        assert_eq!(seen, ["val=a"]);
        assert_eq!(
            read_all(&["--on=yes"]).0.unwrap_err().0,
            "--on takes no value"
        );
    }

    #[test]
    fn each_misuse_is_named() {
        for (args, want) in [
            (&["--frob"][..], r#"unknown argument "--frob""#),
            (&["--val"], "--val needs a value"),
            (&["--on=yes"], "--on takes no value"),
            (
                &["--secs", "0"],
                r#"--secs "0": a whole number of seconds above 0"#,
            ),
            (
                &["--secs=x"],
                r#"--secs "x": a whole number of seconds above 0"#,
            ),
            (&["file"], r#"unexpected argument "file""#),
            (&["--"], r#"unexpected argument "--""#),
        ] {
            assert_eq!(read(args).unwrap_err().0, want, "{args:?}");
        }
        use std::os::unix::ffi::OsStringExt;
        let bad = vec![OsString::from_vec(vec![b'-', b'-', 0xff])];
        let err = Flags::new(&bad).next().unwrap_err();
        assert!(err.0.contains("is not UTF-8"), "{err}");
    }
}
