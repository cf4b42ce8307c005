//! Compiles in the commit the lab is built from, so a run's `git_commit` says which
//! code ran (not which checkout the run was started in). Built outside a git checkout
//! (a source archive, the Docker build), it is "unknown". Uncommitted changes are not
//! seen: the commit is HEAD's.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=TICKWIRE_GIT_COMMIT={commit}");
    // Built again when HEAD moves: a commit, a checkout (the files exist: a path that
    // does not would have cargo run this every build).
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        let mut watch = vec![format!("{dir}/HEAD"), format!("{dir}/packed-refs")];
        if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watch.push(format!("{dir}/{r}"));
        }
        for path in watch.iter().filter(|p| Path::new(p).exists()) {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
