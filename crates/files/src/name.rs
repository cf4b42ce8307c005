//! File names as they travel: a relative path inside a site's inbox.
//!
//! A name comes from another node and becomes a path on this one, so it is checked
//! before anything is written: relative, `/`-separated, no `.` or `..` component, no
//! empty component, no NUL, no control character (C0 or C1), no character that turns
//! the direction of text (a name that reads as another on screen), no backslash (a
//! Windows separator that would mean something else there), at most [`MAX_NAME`] bytes in all and
//! [`MAX_COMPONENT`] per component. Symbolic links inside the inbox are the disk
//! side's concern (it never follows one); this check makes sure the name alone cannot
//! leave the inbox.

use std::fmt;

/// Longest name, in bytes (Linux's PATH_MAX is 4,096; a name is one part of a path).
pub const MAX_NAME: usize = 1024;
/// Longest component, in bytes (NAME_MAX on Linux's file systems).
pub const MAX_COMPONENT: usize = 255;

/// Why a file name was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NameError {
    /// An empty name.
    Empty,
    /// A name too long.
    TooLong {
        /// Its length.
        len: usize,
    },
    /// A part of the name too long.
    ComponentTooLong {
        /// Its length.
        len: usize,
    },
    /// An absolute name.
    Absolute,
    /// An empty part (`a//b`).
    EmptyComponent,
    /// A `.` or `..` part.
    DotComponent,
    /// A byte not allowed in names.
    Forbidden {
        /// The byte.
        byte: u8,
    },
    /// A character not allowed in names (a C1 control, a direction control).
    ForbiddenChar {
        /// The character.
        ch: char,
    },
}

/// Characters that change the direction of the text after them (the Unicode bidi
/// embeddings, overrides and isolates, and the marks): shown as-is, they make one
/// name read as another.
fn turns_text(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with its control and direction characters written by `escape` (the rest
/// as it is; borrowed when there are none).
fn escaped(text: &str, escape: fn(char) -> String) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() || turns_text(c);
    if !text.chars().any(unsafe_char) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.push_str(&escape(c));
        } else {
            out.push(c);
        }
    }
    out.into()
}

/// `text` from a peer (a name, a site, a reason) made safe to print on a terminal or
/// a log line: control and direction characters written as `\u{..}`.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    escaped(text, |c| format!("\\u{{{:x}}}", c as u32))
}

/// A JSON text whose strings hold peers' text, made as safe to print as
/// [`printable`] makes plain text: the control and direction characters JSON lets
/// through (C1 controls, bidi controls; serializers escape only C0) written as
/// `\uXXXX`, which decodes to the same string (every such character is in the Basic
/// Multilingual Plane: one escape).
pub fn printable_json(json: &str) -> std::borrow::Cow<'_, str> {
    escaped(json, |c| format!("\\u{:04x}", c as u32))
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NameError::Empty => write!(f, "the name is empty"),
            NameError::TooLong { len } => {
                write!(f, "the name has {len} bytes, more than {MAX_NAME}")
            }
            NameError::ComponentTooLong { len } => write!(
                f,
                "a part of the name has {len} bytes, more than {MAX_COMPONENT}"
            ),
            NameError::Absolute => write!(f, "the name is an absolute path"),
            NameError::EmptyComponent => {
                write!(f, "the name has an empty part (\"//\" or a trailing \"/\")")
            }
            NameError::DotComponent => {
                write!(
                    f,
                    "the name has a \".\" or \"..\" part (it would escape the inbox)"
                )
            }
            NameError::Forbidden { byte } => {
                write!(
                    f,
                    "the name holds the byte 0x{byte:02x} (a control character or a backslash)"
                )
            }
            NameError::ForbiddenChar { ch } => write!(
                f,
                "the name holds U+{:04X} (a control character or one that turns the text)",
                *ch as u32
            ),
        }
    }
}

impl std::error::Error for NameError {}

/// Checks that `name` is a safe relative path (see the module doc).
pub fn check_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > MAX_NAME {
        return Err(NameError::TooLong { len: name.len() });
    }
    if name.starts_with('/') {
        return Err(NameError::Absolute);
    }
    if let Some(&byte) = name
        .as_bytes()
        .iter()
        .find(|&&b| b < 0x20 || b == 0x7f || b == b'\\')
    {
        return Err(NameError::Forbidden { byte });
    }
    if let Some(ch) = name.chars().find(|&c| c.is_control() || turns_text(c)) {
        return Err(NameError::ForbiddenChar { ch });
    }
    for part in name.split('/') {
        if part.is_empty() {
            return Err(NameError::EmptyComponent);
        }
        if part == "." || part == ".." {
            return Err(NameError::DotComponent);
        }
        if part.len() > MAX_COMPONENT {
            return Err(NameError::ComponentTooLong { len: part.len() });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_and_nested_names_pass() {
        for ok in [
            "eod.csv",
            "ref/2026/11/25/eod.csv",
            "a b.txt",
            "é.dat",
            "...x",
            "x..",
        ] {
            assert_eq!(check_name(ok), Ok(()), "{ok}");
        }
    }

    #[test]
    fn names_that_could_leave_the_inbox_are_refused() {
        let cases: &[(&str, NameError)] = &[
            ("", NameError::Empty),
            ("/etc/passwd", NameError::Absolute),
            ("../x", NameError::DotComponent),
            ("a/../../x", NameError::DotComponent),
            ("a/./x", NameError::DotComponent),
            ("..", NameError::DotComponent),
            ("a//b", NameError::EmptyComponent),
            ("a/", NameError::EmptyComponent),
            ("a\\..\\b", NameError::Forbidden { byte: b'\\' }),
            ("a\0b", NameError::Forbidden { byte: 0 }),
            ("a\nb", NameError::Forbidden { byte: b'\n' }),
            ("a\u{85}b", NameError::ForbiddenChar { ch: '\u{85}' }),
            (
                "report\u{202e}vsc.exe",
                NameError::ForbiddenChar { ch: '\u{202e}' },
            ),
            ("x\u{2066}y", NameError::ForbiddenChar { ch: '\u{2066}' }),
        ];
        for (name, want) in cases {
            assert_eq!(check_name(name).as_ref(), Err(want), "{name:?}");
        }
        let long_part = "x".repeat(MAX_COMPONENT + 1);
        assert_eq!(
            check_name(&long_part),
            Err(NameError::ComponentTooLong {
                len: MAX_COMPONENT + 1
            })
        );
        let long = ["y"; 600].join("/");
        assert!(long.len() > MAX_NAME);
        assert_eq!(
            check_name(&long),
            Err(NameError::TooLong { len: long.len() })
        );
    }

    #[test]
    fn text_from_peers_prints_without_its_control_and_direction_characters() {
        assert_eq!(printable("disk full: café"), "disk full: café");
        assert_eq!(
            printable("\u{1b}]0;x\u{7}\ndone edge2\u{202e}"),
            "\\u{1b}]0;x\\u{7}\\u{a}done edge2\\u{202e}"
        );
    }

    #[test]
    fn json_from_peers_keeps_its_strings_and_prints_without_c1_and_direction_characters() {
        let text = "edge2\u{202e}fdp.exe \u{9b}31m caf\u{e9}\n";
        let raw = serde_json::json!({ "site": text }).to_string();
        let safe = printable_json(&raw);
        assert!(
            !safe.chars().any(|c| c.is_control() || turns_text(c)),
            "{safe:?}"
        );
        assert!(safe.contains("\\u202e") && safe.contains("\\u009b") && safe.contains("caf\u{e9}"));
        let back: serde_json::Value = serde_json::from_str(&safe).unwrap();
        assert_eq!(back["site"], text);
        assert_eq!(printable_json("{\"a\":1}"), "{\"a\":1}");
    }
}
