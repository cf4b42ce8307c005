//! The flags every connecting command shares: `--user NAME`, the secret from
//! `TICKWIRE_PASSWORD` or `--password-file FILE` (never from a flag of its own: a flag
//! would show in `ps` and in shell history), and TLS: `--tls --ca FILE`.

use crate::ConnectOptions;
use std::path::PathBuf;

/// Environment variable holding the secret (a password or a token).
pub(crate) const PASSWORD_ENV: &str = "TICKWIRE_PASSWORD";

/// Who a command logs in as, and how it reaches a TLS node.
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
    /// Connect with TLS (a node with a [tls] section accepts nothing else). Needs --ca:
    /// the system's certificate store is not used.
    #[arg(long, requires = "ca")]
    pub tls: bool,
    /// With --tls: PEM file of the certificate(s) to trust, the CA that signed the
    /// node's certificate or the node's self-signed certificate itself. The node's
    /// address must match the certificate: its host name, or its IP address as an IP
    /// subject alternative name.
    #[arg(long, value_name = "FILE", requires = "tls")]
    pub ca: Option<PathBuf>,
}

impl Credentials {
    /// Puts the user, the secret and the TLS configuration into `opts`; an unreadable or
    /// empty password file, or an unusable CA file, is an error that names it.
    pub fn apply(&self, opts: &mut ConnectOptions) -> Result<(), String> {
        if let Some(u) = &self.user {
            opts.user = u.clone();
        }
        opts.token = self.secret()?;
        opts.tls = self.tls_config()?;
        Ok(())
    }

    /// The TLS client configuration (`--tls --ca FILE`), if TLS is asked for.
    pub fn tls_config(&self) -> Result<Option<std::sync::Arc<rustls::ClientConfig>>, String> {
        match (self.tls, &self.ca) {
            (false, None) => Ok(None),
            (true, Some(ca)) => crate::tls::client_config_from_ca_file(ca).map(Some),
            (true, None) => Err(
                "--tls needs --ca FILE: the certificate(s) to trust (the node's \
                 CA or its self-signed certificate); the system's store is not used"
                    .into(),
            ),
            (false, Some(_)) => Err("--ca is for TLS connections: add --tls".into()),
        }
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
