//! `tickwire backbone keygen`: a new key file for `[backbone] key_file`.

use anyhow::{anyhow, Result};

#[derive(clap::Subcommand)]
pub(crate) enum BackboneCommand {
    /// Print a new backbone key file (one random 256-bit key and its id) to standard
    /// output: `tickwire backbone keygen > backbone.keys && chmod 600 backbone.keys`.
    /// Every node of the backbone takes the same file as `[backbone] key_file`; the
    /// file's comments say how to rotate keys without a restart.
    Keygen {
        /// The MAC the key seals with: keyed BLAKE3, or HMAC-SHA256 (a line without a
        /// MAC word, which nodes built before BLAKE3 read too: for a backbone not yet
        /// all on this build).
        #[arg(long, value_name = "MAC", default_value = "blake3", value_parser = ["blake3", "hmac-sha256"])]
        mac: String,
    },
}

pub(crate) fn run(cmd: BackboneCommand) -> Result<()> {
    match cmd {
        BackboneCommand::Keygen { mac } => {
            let mac = mac
                .parse()
                .map_err(|()| anyhow!("--mac {mac:?}: blake3 or hmac-sha256"))?;
            let text = tickwire_backbone::auth::new_key_file(mac)
                .map_err(|_| anyhow!("the system's random number generator failed"))?;
            crate::stdout::text(&text)?;
            Ok(())
        }
    }
}
