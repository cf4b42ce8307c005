//! Whether the node is ready: what it is configured to depend on (its backbone link,
//! its upstream node, its interactive RSSL providers, its journal) is there. `/readyz` answers it; `/metrics` gives it
//! as `tickwire_ready` and `tickwire_dependency_up`.

use crate::node_view::Extra;

/// One dependency of the node and its state.
pub(crate) struct Check {
    /// "backbone", "upstream", "journal", or "rssl_provider HOST:PORT" (one each).
    pub dependency: String,
    pub up: bool,
    /// Said to people: "linked", "not logged in: connecting (host:port)".
    pub state: String,
}

/// The node's dependencies, those it has (a node with none is ready once it answers).
pub(crate) fn checks(extra: &Extra<'_>) -> Vec<Check> {
    let mut checks = Vec::new();
    if let Some(linked) = extra.backbone_linked {
        let state = if linked {
            "linked"
        } else {
            "not linked (its Aeron link is being rebuilt)"
        };
        checks.push(Check {
            dependency: "backbone".into(),
            up: linked,
            state: state.into(),
        });
    }
    if let Some(u) = extra.upstream {
        let up = u.is_connected();
        let state = if up {
            format!("logged in to {}", u.state_text())
        } else {
            format!("not logged in: {}", u.state_text())
        };
        checks.push(Check {
            dependency: "upstream".into(),
            up,
            state,
        });
    }
    for p in extra.rssl_providers {
        let (up, state) = p.readiness();
        checks.push(Check {
            dependency: format!("rssl_provider {}", p.address()),
            up,
            state: state.into(),
        });
    }
    if let Some(j) = extra.journal {
        let (up, state) = match j.writable() {
            Ok(()) => (true, "writable".to_string()),
            Err(why) => (false, format!("not writable: {why}")),
        };
        checks.push(Check {
            dependency: "journal".into(),
            up,
            state,
        });
    }
    checks
}
