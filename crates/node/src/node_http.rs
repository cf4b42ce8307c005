//! What the node answers itself on its HTTP (WebSocket) port, beside the WebSocket API
//! and the dashboard: `/metrics`, `/healthz` (the event loop answers), `/readyz` (what
//! the node is configured to depend on is there: its backbone link, its upstream node,
//! its journal) and `/items` (a service's item names, for the dashboard's picker).

use crate::metrics::{Extra, Format};
use tickwire_core::Node;

/// A request for the node's own figures or health.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NodeRequest {
    /// With the bearer token the request presented, if any.
    Metrics(Format, Option<String>),
    Health,
    Ready,
    /// `/items?service=S&prefix=P&limit=N`.
    Items {
        service: String,
        prefix: String,
        limit: usize,
    },
}

/// Names `/items` gives at most, and by default.
pub(crate) const MAX_ITEM_NAMES: usize = 1000;
const DEFAULT_ITEM_NAMES: usize = 100;

impl NodeRequest {
    /// The request a GET of `target` (path and query) makes, if it is one of these.
    pub(crate) fn parse(
        target: &str,
        accept: Option<&str>,
        authorization: Option<&str>,
    ) -> Option<NodeRequest> {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        match path {
            "/metrics" => Some(NodeRequest::Metrics(
                Format::negotiate(accept),
                authorization.and_then(bearer_token),
            )),
            "/healthz" => Some(NodeRequest::Health),
            "/readyz" => Some(NodeRequest::Ready),
            "/items" => {
                let arg = |key: &str| {
                    query
                        .split('&')
                        .filter_map(|kv| kv.split_once('='))
                        .find(|(k, _)| *k == key)
                        .map(|(_, v)| percent_decode(v))
                };
                Some(NodeRequest::Items {
                    service: arg("service").unwrap_or_default(),
                    prefix: arg("prefix").unwrap_or_default(),
                    limit: arg("limit")
                        .and_then(|l| l.parse().ok())
                        .unwrap_or(DEFAULT_ITEM_NAMES)
                        .clamp(1, MAX_ITEM_NAMES),
                })
            }
            _ => None,
        }
    }
}

/// The token of an `Authorization: Bearer TOKEN` header (the scheme's case does not
/// matter, RFC 7235 2.1).
fn bearer_token(header: &str) -> Option<String> {
    let (scheme, token) = header.trim().split_once([' ', '\t'])?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_string())
}

/// A query value with `%XX` escapes and `+` decoded (invalid escapes kept as they are).
fn percent_decode(v: &str) -> String {
    let bytes = v.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `/metrics` renders a second at most, with a second's worth in hand.
const METRICS_RENDERS_PER_S: f64 = 20.0;

/// The last `/metrics` answer in each format, and the renders' share of the loop: a
/// render walks every connection and service, so past [`METRICS_RENDERS_PER_S`] a
/// scrape gets the last answer again (at most 50 ms old at that rate), and no flood of
/// scrapes (nor a peer posing as many scrapers) makes the loop render more. Within it,
/// every scrape is rendered anew: what a scraper reads after an action reflects it.
#[derive(Default)]
pub(crate) struct MetricsRenders {
    share: Option<tickwire_core::LoopShare>,
    /// By [`Format`]: the last render.
    last: [Option<String>; 2],
    /// Renders made (for tests).
    pub(crate) made: u64,
}

impl MetricsRenders {
    fn get(
        &mut self,
        core: &Node,
        extra: &Extra<'_>,
        format: Format,
        now: std::time::Instant,
    ) -> String {
        let share = self
            .share
            .get_or_insert_with(|| tickwire_core::LoopShare::new(METRICS_RENDERS_PER_S, now));
        let slot = &mut self.last[format as usize];
        if let (Err(_), Some(body)) = (share.has(1.0, now), slot.as_ref()) {
            return body.clone();
        }
        share.spend(1.0);
        self.made += 1;
        let body = crate::metrics::render(core, extra, format);
        *slot = Some(body.clone());
        body
    }
}

/// The HTTP answer: status, content type, body.
pub(crate) fn answer(
    asked: NodeRequest,
    core: &mut Node,
    extra: &Extra<'_>,
    renders: &mut MetricsRenders,
    now: std::time::Instant,
) -> (&'static str, &'static str, String) {
    const TEXT: &str = "text/plain; charset=utf-8";
    const JSON: &str = "application/json";
    match asked {
        NodeRequest::Items {
            service,
            prefix,
            limit,
        } => {
            // Item names are listed to anyone who can reach this port: only where
            // anyone may subscribe anyway (a shared login token guards them too).
            if core.guards_logins() {
                return (
                    "403 Forbidden",
                    TEXT,
                    "item names are listed only by a node without a users file or login \
                     token ([security] users_file, login_token): here anyone reaching this \
                     port would see them\n"
                        .into(),
                );
            }
            match core.service_item_names(&service, &prefix, limit, now) {
                Some(Ok((items, more))) => (
                    "200 OK",
                    JSON,
                    serde_json::json!({"service": service, "items": items, "more": more})
                        .to_string(),
                ),
                Some(Err(wait)) => (
                    "503 Service Unavailable",
                    TEXT,
                    format!(
                        "the item queries have used their share of the node for now: try again in {} ms\n",
                        wait.as_millis() + 1
                    ),
                ),
                None => (
                    "404 Not Found",
                    TEXT,
                    format!(
                        "no service {service:?} here (/items?service=NAME&prefix=TEXT&limit=N)\n"
                    ),
                ),
            }
        }
        NodeRequest::Metrics(format, bearer) => {
            // The figures name the node's services and its users: where a users file
            // or a login token says who may log in, only a scraper holding the token
            // sees them.
            let refused = match (extra.metrics_token, bearer) {
                (Some(token), Some(given))
                    if tickwire_auth::same_secret(token.as_bytes(), given.as_bytes()) =>
                {
                    None
                }
                (Some(_), _) => Some(
                    "GET /metrics needs the token of [websocket] metrics_token_file \
                     (Authorization: Bearer TOKEN)\n",
                ),
                (None, _) if core.guards_logins() => Some(
                    "this node has a users file or a login token: /metrics is served only \
                     to a scraper holding the token of [websocket] metrics_token_file (the \
                     figures name its services and users)\n",
                ),
                (None, _) => None,
            };
            match refused {
                Some(why) => ("403 Forbidden", TEXT, why.into()),
                None => (
                    "200 OK",
                    format.content_type(),
                    renders.get(core, extra, format, now),
                ),
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Scrapes are rendered anew within the renders' share, and get the last render
    /// past it; the share comes back with time.
    #[test]
    fn scrapes_past_the_renders_share_get_the_last_render() {
        let t0 = std::time::Instant::now();
        let mut core = Node::new(crate::config::NodeConfig::default().core_config(), t0);
        let extra = Extra::default();
        let mut renders = MetricsRenders::default();
        let mut scrape = |core: &mut Node, format, at| {
            let asked = NodeRequest::Metrics(format, None);
            answer(asked, core, &extra, &mut renders, at).2
        };
        let accepted = |body: &str, n: u32| {
            body.contains(&format!("tickwire_connections_accepted_total {n}\n"))
        };
        // A second's worth of renders, each fresh.
        let per_s = METRICS_RENDERS_PER_S as u32;
        for n in 0..per_s {
            let body = scrape(&mut core, Format::Text, t0);
            assert!(accepted(&body, n), "render {n}: {body}");
            core.connect("peer", t0);
        }
        // Past it: the last render again.
        let again = scrape(&mut core, Format::Text, t0);
        assert!(accepted(&again, per_s - 1), "{again}");
        // The share back with time: fresh again.
        let later = t0 + std::time::Duration::from_secs(1);
        let fresh = scrape(&mut core, Format::Text, later);
        assert!(accepted(&fresh, per_s), "{fresh}");
        assert_eq!(renders.made, u64::from(per_s) + 1);
    }

    #[test]
    fn a_bearer_token_is_read_whatever_the_schemes_case() {
        for h in ["Bearer abc", "bearer abc", "BEARER\tabc ", " Bearer  abc"] {
            assert_eq!(bearer_token(h).as_deref(), Some("abc"), "{h:?}");
        }
        for h in ["Basic abc", "Bearerabc", "abc"] {
            assert_eq!(bearer_token(h), None, "{h:?}");
        }
    }

    #[test]
    fn items_requests_take_their_query_decoded_and_bounded() {
        assert_eq!(
            NodeRequest::parse("/items?service=FEED&prefix=EUR%3D+x&limit=5", None, None),
            Some(NodeRequest::Items {
                service: "FEED".into(),
                prefix: "EUR= x".into(),
                limit: 5
            })
        );
        let Some(NodeRequest::Items { limit, .. }) =
            NodeRequest::parse("/items?service=A&limit=999999", None, None)
        else {
            panic!()
        };
        assert_eq!(limit, MAX_ITEM_NAMES);
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4"), "%zz%4");
        assert_eq!(
            NodeRequest::parse("/healthz?x=1", None, None),
            Some(NodeRequest::Health)
        );
        assert_eq!(NodeRequest::parse("/nothing", None, None), None);
    }
}
