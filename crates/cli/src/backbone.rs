//! `tickwire backbone keygen`: a new key file for `[backbone] key_file`.

use anyhow::{anyhow, Result};

#[derive(clap::Subcommand)]
pub(crate) enum BackboneCommand {
    /// Print a new backbone key file (one random 256-bit key and its id) to standard
    /// output: `tickwire backbone keygen > backbone.keys && chmod 600 backbone.keys`.
    /// Every node of the backbone takes the same file as `[backbone] key_file`; the
    /// file's comments say how to rotate keys without a restart.
    Keygen,
}

pub(crate) fn run(cmd: BackboneCommand) -> Result<()> {
    match cmd {
        BackboneCommand::Keygen => {
            let text = tickwire_backbone::auth::new_key_file()
                .map_err(|_| anyhow!("the system's random number generator failed"))?;
            print!("{text}");
            Ok(())
        }
    }
}
