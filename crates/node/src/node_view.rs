//! What the node knows beyond its core, lent to the answers of its HTTP port
//! (`/metrics`, `/readyz`) for one turn of the event loop.

/// The node's parts around its core, as far as its HTTP answers read them.
#[derive(Default)]
pub(crate) struct Extra<'a> {
    pub journal: Option<&'a crate::journal::JournalThread>,
    /// With `[files]`: the files thread.
    pub files: Option<&'a crate::files::FilesThread>,
    /// The backbone's figures as of the last node-item tick (once a second).
    pub backbone: Option<&'a tickwire_backbone::BackboneFigures>,
    /// Whether the backbone's Aeron link is up, with a backbone.
    pub backbone_linked: Option<bool>,
    /// With an upstream node: whether the node is logged in to it, and which.
    pub upstream: Option<&'a crate::upstream::UpstreamLink>,
    /// WebSocket updates whose JSON this node encoded, and those sent with another
    /// client's encoding of the same update (`websocket.share_encoding`).
    pub websocket_updates_encoded: u64,
    pub websocket_updates_reused: u64,
    /// With `[tls]`: its figures.
    pub tls: Option<crate::tls::TlsFigures>,
    /// The token `GET /metrics` must present (`[websocket] metrics_token_file`).
    pub metrics_token: Option<&'a str>,
    /// The interactive RSSL providers the node is fed by (`[[rssl.providers]]`).
    pub rssl_providers: &'a [crate::rssl_provider::ProviderConn],
}
