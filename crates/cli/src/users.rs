//! `tickwire users hash`: the line to put in a users file for a password or a token,
//! read from standard input (never from a flag: it would show in `ps` and history).

use anyhow::{bail, Context, Result};
use std::io::BufRead;

#[derive(clap::Subcommand)]
pub(crate) enum UsersCommand {
    /// Read a password (or with --token, a token) from standard input, first line, and
    /// print the `password_hash = "..."` (or `token_hash = "..."`) line for the users
    /// file: argon2id with a random salt for a password, SHA-256 for a token.
    Hash {
        /// Hash a token (long, random; checked with a fast hash) instead of a password.
        #[arg(long)]
        token: bool,
    },
}

pub(crate) fn run(cmd: UsersCommand) -> Result<()> {
    match cmd {
        UsersCommand::Hash { token } => {
            let mut line = String::new();
            std::io::stdin()
                .lock()
                .read_line(&mut line)
                .context("cannot read standard input")?;
            let secret = line.trim_end_matches(['\n', '\r']);
            if secret.is_empty() {
                bail!("no secret on standard input (expected it on the first line)");
            }
            if token {
                let hash = tickwire_auth::hash_token(secret);
                crate::stdout::line(format_args!("token_hash = \"{hash}\""))?;
            } else {
                let hash = tickwire_auth::hash_password(secret)?;
                crate::stdout::line(format_args!("password_hash = \"{hash}\""))?;
            }
            Ok(())
        }
    }
}
