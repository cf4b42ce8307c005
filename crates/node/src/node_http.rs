//! What the node answers itself on its HTTP (WebSocket) port, beside the WebSocket API
//! and the dashboard: `/metrics`, `/healthz` (the event loop answers) and `/readyz`
//! (what the node is configured to depend on is there: its backbone link, its upstream
//! node, its journal).

use crate::metrics::{Extra, Format};
use tickwire_core::Node;

/// A request for the node's own figures or health.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeRequest {
    Metrics(Format),
    Health,
    Ready,
}

impl NodeRequest {
    /// The request a GET of `path` makes, if it is one of these.
    pub fn parse(path: &str, accept: Option<&str>) -> Option<NodeRequest> {
        match path {
            "/metrics" => Some(NodeRequest::Metrics(Format::negotiate(accept))),
            "/healthz" => Some(NodeRequest::Health),
            "/readyz" => Some(NodeRequest::Ready),
            _ => None,
        }
    }
}

/// The HTTP answer: status, content type, body.
pub fn answer(
    asked: NodeRequest,
    core: &Node,
    extra: &Extra<'_>,
) -> (&'static str, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    match asked {
        NodeRequest::Metrics(format) => (
            "200 OK",
            format.content_type(),
            crate::metrics::render(core, extra, format),
        ),
        // Answered by the event loop itself: it is turning.
        NodeRequest::Health => ("200 OK", TEXT, "ok\n".into()),
        NodeRequest::Ready => {
            let checks = crate::readiness::checks(extra);
            let mut body = String::from(if checks.iter().all(|c| c.up) {
                "ready\n"
            } else {
                "not ready\n"
            });
            for c in &checks {
                body.push_str(&format!("{}: {}\n", c.dependency, c.state));
            }
            let status = if checks.iter().all(|c| c.up) {
                "200 OK"
            } else {
                "503 Service Unavailable"
            };
            (status, TEXT, body)
        }
    }
}
