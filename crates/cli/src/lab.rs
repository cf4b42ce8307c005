//! `tickwire bench ...` and the load tools' old names (`tickwire perf-pub ...`): the
//! performance lab is its own program, `tickwire-bench`, so the node's program ships
//! without it. These commands replace this process with it, arguments unchanged.

use anyhow::{bail, Result};
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

/// Everything after the command word, handed to `tickwire-bench` as it is (`--help`
/// included: the lab's own help answers).
#[derive(clap::Args)]
#[command(disable_help_flag = true)]
pub(crate) struct LabArgs {
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    args: Vec<OsString>,
}

/// Runs `tickwire-bench [subcommand] ARGS...` in place of this process.
pub(crate) fn exec(subcommand: Option<&str>, args: LabArgs) -> Result<()> {
    let program = lab_program()?;
    let err = std::process::Command::new(&program)
        .args(subcommand)
        .args(&args.args)
        .exec();
    bail!("cannot run {}: {err}", program.display())
}

/// `tickwire-bench` beside this program (where cargo builds both), else on the PATH.
fn lab_program() -> Result<PathBuf> {
    let beside = std::env::current_exe()?.with_file_name("tickwire-bench");
    if beside.is_file() {
        return Ok(beside);
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("tickwire-bench"))
            .find(|p| p.is_file())
    });
    match on_path {
        Some(p) => Ok(p),
        None => bail!(
            "the performance lab is a program of its own, tickwire-bench, and it is not \
             beside {} nor on the PATH: build it with `cargo build --release -p tickwire-bench` \
             (`cargo build --release` builds both)",
            beside.with_file_name("tickwire").display()
        ),
    }
}
