//! The flags every command that connects to a node shares: where (`--node`, with
//! failover) and as whom (`--user`, the secret, TLS: `tickwire_client::Credentials`).

use anyhow::Result;
use tickwire_client::ConnectOptions;

#[derive(clap::Args, Clone)]
pub(crate) struct NodeArgs {
    /// Node address: host:port (or tcp://host:port; a host alone: port 14002), or
    /// several comma-separated for failover (the first that answers, then the next).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:14002")]
    pub(crate) node: String,
    #[command(flatten)]
    pub(crate) credentials: tickwire_client::Credentials,
}

impl NodeArgs {
    /// Options to connect as `application`, with the user, secret and TLS applied.
    pub(crate) fn connect_options(&self, application: &str) -> Result<ConnectOptions> {
        let mut opts = ConnectOptions::new(self.node.clone());
        opts.application = application.into();
        self.credentials
            .apply(&mut opts)
            .map_err(anyhow::Error::msg)?;
        Ok(opts)
    }
}
