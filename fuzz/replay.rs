//! A fuzz target's committed corpus (`fuzz/corpus/<target>/`), read for the tests that
//! replay it on stable Rust: each crate's `tests/fuzz_corpus.rs` includes this file
//! (`#[path = "../../../fuzz/replay.rs"] mod replay;`), so every `cargo test` re-checks
//! the inputs the fuzzer found interesting through the target's own logic.
//!
//! Hand-written seeds are named for what they must do: `seed-valid-*` must be accepted
//! as a whole, `seed-invalid-*` must be rejected (with an error, not a panic).

// Each including test uses what its target needs.
#![allow(dead_code)]

use std::fmt::Debug;
use std::path::{Path, PathBuf};

/// What an input's name says it must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Seed {
    /// `seed-valid-*`: accepted as a whole.
    Valid,
    /// `seed-invalid-*`: rejected with an error.
    Invalid,
    /// Anything else (what the fuzzer found): no panic is all it must do.
    Found,
}

/// One input of a corpus.
pub(crate) struct Input {
    /// The file's name.
    pub(crate) name: String,
    pub(crate) data: Vec<u8>,
}

impl Input {
    pub(crate) fn seed(&self) -> Seed {
        if self.name.starts_with("seed-valid") {
            Seed::Valid
        } else if self.name.starts_with("seed-invalid") {
            Seed::Invalid
        } else {
            Seed::Found
        }
    }

    /// Panics when a hand-written seed's verdict is not the one its name asks for:
    /// `accepted` says what the decoder did, `what` what it gave.
    pub(crate) fn check(&self, accepted: bool, what: &impl Debug) {
        let name = &self.name;
        match self.seed() {
            Seed::Valid => assert!(accepted, "{name}: valid seed rejected: {what:?}"),
            Seed::Invalid => assert!(!accepted, "{name}: invalid seed accepted: {what:?}"),
            Seed::Found => {}
        }
    }
}

/// The folder every target's corpus is in (it is part of the repository).
pub(crate) fn root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    assert!(
        root.is_dir(),
        "fuzz corpus directory {} is missing: the corpus is part of the repository",
        root.display()
    );
    root
}

/// Every input of `target`'s corpus, sorted by name. Panics when its folder is
/// missing or holds fewer than `at_least` files.
pub(crate) fn inputs(target: &str, at_least: usize) -> Vec<Input> {
    let dir = root().join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| {
            panic!(
                "corpus {} for fuzz target {target} is missing: {e}",
                dir.display()
            )
        })
        .map(|e| e.expect("directory entry").path())
        .collect();
    files.sort();
    assert!(
        files.len() >= at_least.max(1),
        "corpus {} has {} inputs, fewer than {}",
        dir.display(),
        files.len(),
        at_least.max(1)
    );
    files
        .into_iter()
        .map(|path| {
            assert!(path.is_file(), "{} is not a file", path.display());
            Input {
                name: path.file_name().unwrap().to_string_lossy().into_owned(),
                data: std::fs::read(&path)
                    .unwrap_or_else(|e| panic!("reading {}: {e}", path.display())),
            }
        })
        .collect()
}
