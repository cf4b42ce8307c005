//! The credential flags every connecting command shares: `--user NAME`, and the secret
//! from `TICKWIRE_PASSWORD` or `--password-file FILE`, never from a flag of its own (a
//! flag would show in `ps` and in shell history).

use crate::ConnectOptions;
use std::path::PathBuf;

/// Environment variable holding the secret (a password or a token).
pub const PASSWORD_ENV: &str = "TICKWIRE_PASSWORD";

#[derive(Debug, Clone, Default, clap::Args)]
pub struct Credentials {
    /// User to log in as (the node's users file). Default: $USER. The secret comes from
    /// the environment variable TICKWIRE_PASSWORD or from --password-file.
    #[arg(long, value_name = "NAME")]
    pub user: Option<String>,
    /// File holding the secret (password or token) on its first line; it wins over
    /// TICKWIRE_PASSWORD.
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<PathBuf>,
}

impl Credentials {
    /// Puts the user and the secret into `opts`; an unreadable or empty password file
    /// is an error that names it.
    pub fn apply(&self, opts: &mut ConnectOptions) -> Result<(), String> {
        if let Some(u) = &self.user {
            opts.user = u.clone();
        }
        opts.token = self.secret()?;
        Ok(())
    }

    /// The secret: the password file's first line, else `TICKWIRE_PASSWORD`, else none.
    pub fn secret(&self) -> Result<String, String> {
        if let Some(path) = &self.password_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read password file {}: {e}", path.display()))?;
            let first = text.lines().next().unwrap_or("").trim_end_matches('\r');
            if first.is_empty() {
                return Err(format!("password file {} is empty", path.display()));
            }
            return Ok(first.to_string());
        }
        Ok(std::env::var(PASSWORD_ENV).unwrap_or_default())
    }
}
