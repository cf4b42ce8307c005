//! File names as they travel: a relative path inside a site's inbox.
//!
//! A name comes from another node and becomes a path on this one, so it is checked
//! before anything is written: relative, `/`-separated, no `.` or `..` component, no
//! empty component, no NUL, no control character, no backslash (a Windows separator
//! that would mean something else there), at most [`MAX_NAME`] bytes in all and
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
}
