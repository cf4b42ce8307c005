//! The processes of a lab run and the measurement of one step.
//!
//! Every component is a separate `tickwire` process (node, perf-pub, perf-sub), as a
//! user would run them. Load tools run with `--control --json`: the lab changes the
//! publisher's rate and asks both tools for exact counters at step boundaries (`mark`),
//! so a step's offered and delivered counts do not depend on one-second report lines.

mod process;
mod rig;
mod step;

pub use process::{ends_with_lab, start_node, start_node_wrapped, Proc, Programs};
pub use rig::{
    controlled, controlled_perf_sub, rig_tag, start_rig, wait_for_images, wait_for_service,
    BackboneSpec, Rig, RigSpec,
};
pub use step::{find_max, hold, recover, round_rate};

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The commit this lab was built from (`build.rs`), or "unknown".
pub fn git_commit() -> String {
    env!("TICKWIRE_GIT_COMMIT").to_string()
}

/// Creates `dir` and `dir/logs`; returns the path of `logs`.
pub fn ensure_dir(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir.join("logs"))
        .with_context(|| format!("cannot create {}", dir.display()))?;
    Ok(dir.join("logs"))
}
