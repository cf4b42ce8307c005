//! The parts the event loop runs beside its client connections, each driven through
//! one contract ([`Part`]): the login checker, the journal, the upstream link,
//! interactive RSSL providers and the backbone. Two more ride on them: the files
//! service (its messages travel over the upstream link and the backbone) and the node's
//! own figures item (made from the others' figures).

use crate::auth::Verifier;
use crate::driver_wait::DriverWait;
use crate::files::FilesThread;
use crate::journal::JournalThread;
use crate::node_item::NodeItem;
use crate::node_view::Extra;
use crate::part::{Cx, Part, Readiness};
use crate::rssl_provider::ProviderConn;
use crate::upstream::UpstreamLink;
use mio::{Registry, Token};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickwire_backbone::Backbone;
use tickwire_core::{AuthRequest, JournalRequest, Users};
use tickwire_upstream::NodePath;

/// The upstream link's token.
pub(super) const UPSTREAM: Token = Token(usize::MAX - 4);
/// The backbone's media driver's pollers (with a parking idle strategy).
pub(super) const BACKBONE_DRIVER: Token = Token(usize::MAX - 5);
/// Interactive RSSL providers: the first's token; the others count down from it.
pub(super) const RSSL_PROVIDERS: usize = usize::MAX - 1000;
/// How often the node's figures item is published.
const NODE_ITEM_EVERY: Duration = Duration::from_secs(1);

/// Logins' and token requests' secrets, checked on a thread of their own (a slow hash
/// never holds up the loop).
pub(super) struct Logins {
    pub verifier: Verifier,
    /// The users file in force (replaced on reload).
    pub users: Option<Arc<Users>>,
    requests: Vec<AuthRequest>,
}

impl Part for Logins {
    fn poll_timeout(&self) -> Option<Instant> {
        None // its thread wakes the loop
    }

    /// Secrets checked off the loop come back; new ones go to be checked.
    fn handle_input(&mut self, cx: &mut Cx<'_>) {
        self.verifier.deliver(cx.core, cx.now);
        cx.core.take_auth_requests(&mut self.requests);
        for req in self.requests.drain(..) {
            self.verifier
                .submit(cx.core, req, self.users.clone(), cx.now);
        }
    }
}

/// The journal's thread and the records waiting for it.
pub(super) struct Journal {
    pub thread: JournalThread,
    requests: Vec<JournalRequest>,
}

impl Part for Journal {
    fn poll_timeout(&self) -> Option<Instant> {
        None // its thread wakes the loop
    }

    /// Posts the journal has kept go on; new records go to be kept.
    fn handle_input(&mut self, cx: &mut Cx<'_>) {
        self.thread.deliver(cx.core, cx.now);
        cx.core.take_journal_requests(&mut self.requests);
        self.thread.submit(cx.core, &mut self.requests, cx.now);
    }
}

/// How the loop paces itself when it runs the backbone's media driver.
pub(super) enum DriverPace {
    /// The driver runs on its own thread (or there is no backbone): the loop's own
    /// wait strategy holds.
    Elsewhere,
    /// Park in epoll (on the driver's pollers too) for at most this long.
    Park(Duration),
    /// Poll again at once: the driver needs its duty cycles.
    Spin,
}

/// The backbone, and what the loop counts of a turn for its idle strategy.
pub(super) struct BackbonePart {
    pub backbone: Backbone,
    driver_wait: DriverWait,
    /// The loop parks on the driver's pollers this turn.
    parks: bool,
    /// This turn: work done (driver cycles and messages), messages from outside, and
    /// whether the driver did anything.
    work: usize,
    input: usize,
    driver_busy: bool,
}

impl BackbonePart {
    pub(super) fn new(backbone: Backbone) -> Self {
        BackbonePart {
            driver_wait: DriverWait::new(&backbone),
            backbone,
            parks: false,
            work: 0,
            input: 0,
            driver_busy: false,
        }
    }

    /// Before the loop waits: with the driver in the loop and a parking idle strategy,
    /// the loop parks on the driver's pollers when the last turn's wait says so;
    /// otherwise it needs a turn all the time.
    fn pace(&mut self, registry: &Registry) -> DriverPace {
        self.parks = self
            .driver_wait
            .parks(&self.backbone, registry, BACKBONE_DRIVER);
        if !self.backbone.polled_by_event_loop() {
            return DriverPace::Elsewhere;
        }
        match self.driver_wait.block_for() {
            Some(at_most) if self.parks => DriverPace::Park(at_most),
            _ => DriverPace::Spin,
        }
    }

    /// After a turn: the adaptive wait learns what came from outside (`outside`:
    /// sockets' events, plus the backbone's messages); otherwise the driver's idle
    /// strategy waits.
    fn end_turn(&mut self, now: Instant, outside: usize) {
        if self.parks {
            self.driver_wait
                .after_turn(now, outside + self.input, self.driver_busy);
        } else {
            self.backbone.idle(outside + self.work);
        }
        (self.work, self.input, self.driver_busy) = (0, 0, false);
    }
}

impl Part for BackbonePart {
    fn poll_timeout(&self) -> Option<Instant> {
        self.backbone.poll_timeout()
    }

    /// What the receiver has (run here, or in its own thread, which woke the loop).
    fn handle_input(&mut self, cx: &mut Cx<'_>) {
        let got = self.backbone.receive(cx.core, cx.now);
        self.work += got.driver + got.messages;
        self.input += got.messages;
        self.driver_busy |= got.driver > 0;
    }

    fn handle_timeout(&mut self, cx: &mut Cx<'_>) {
        if self.backbone.poll_timeout().is_some_and(|at| cx.now >= at) {
            self.backbone.handle_timeout(cx.core, cx.now);
        }
    }

    /// What the core wrote to the backbone's connections this turn goes out.
    fn pump(&mut self, cx: &mut Cx<'_>) {
        self.backbone.pump(cx.core, cx.now);
        self.driver_busy |= self.backbone.send_now() > 0;
    }
}

/// The node's own figures item, published once a second from the other parts'.
pub(super) struct Figures {
    pub item: NodeItem,
    next: Instant,
    node_id: u64,
    node_name: String,
}

pub(super) struct Parts {
    pub logins: Logins,
    pub journal: Option<Journal>,
    pub upstream: Option<UpstreamLink>,
    pub providers: Vec<ProviderConn>,
    pub backbone: Option<BackbonePart>,
    pub files: Option<FilesThread>,
    pub figures: Figures,
    /// `[websocket] metrics_token_file`'s token.
    pub metrics_token: Option<String>,
}

impl Parts {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        verifier: Verifier,
        users: Option<Arc<Users>>,
        journal: Option<JournalThread>,
        upstream: Option<UpstreamLink>,
        providers: Vec<ProviderConn>,
        backbone: Option<Backbone>,
        files: Option<FilesThread>,
        mut item: NodeItem,
        node_id: u64,
        node_name: &str,
        now: Instant,
    ) -> Self {
        item.journal = journal.as_ref().map(|j| j.figures.clone());
        Parts {
            logins: Logins {
                verifier,
                users,
                requests: Vec::new(),
            },
            journal: journal.map(|thread| Journal {
                thread,
                requests: Vec::new(),
            }),
            upstream,
            providers,
            backbone: backbone.map(BackbonePart::new),
            files,
            figures: Figures {
                item,
                next: now + NODE_ITEM_EVERY,
                node_id,
                node_name: node_name.to_string(),
            },
            metrics_token: None,
        }
    }

    /// Every part of the one contract, in the order of a turn.
    fn each(&mut self) -> impl Iterator<Item = &mut dyn Part> + '_ {
        let logins: &mut dyn Part = &mut self.logins;
        std::iter::once(logins)
            .chain(self.journal.iter_mut().map(|j| j as &mut dyn Part))
            .chain(self.upstream.iter_mut().map(|u| u as &mut dyn Part))
            .chain(self.providers.iter_mut().map(|p| p as &mut dyn Part))
            .chain(self.backbone.iter_mut().map(|b| b as &mut dyn Part))
    }

    /// The earliest deadline of any part.
    pub(super) fn poll_timeout(&self, now: Instant) -> Option<Instant> {
        let parts = [
            self.logins.poll_timeout(),
            self.journal.as_ref().and_then(|j| j.poll_timeout()),
            self.upstream.as_ref().and_then(|u| u.poll_timeout()),
            self.backbone.as_ref().and_then(|b| b.poll_timeout()),
            self.files.as_ref().and_then(|f| f.poll_timeout(now)),
            Some(self.figures.next),
        ];
        let providers = self.providers.iter().filter_map(|p| p.poll_timeout());
        parts.into_iter().flatten().chain(providers).min()
    }

    /// How the loop paces itself for the backbone's driver.
    pub(super) fn driver_pace(&mut self, registry: &Registry) -> DriverPace {
        match self.backbone.as_mut() {
            Some(b) => b.pace(registry),
            None => DriverPace::Elsewhere,
        }
    }

    /// An event with a part's token; false if the token is no part's.
    pub(super) fn handle_io(
        &mut self,
        cx: &mut Cx<'_>,
        token: Token,
        readiness: Readiness,
    ) -> bool {
        let part: &mut dyn Part = match token {
            BACKBONE_DRIVER => return true, // the driver's duty cycle looks itself
            UPSTREAM => match self.upstream.as_mut() {
                Some(u) => u,
                None => return true,
            },
            Token(t) if t <= RSSL_PROVIDERS && RSSL_PROVIDERS - t < self.providers.len() => {
                &mut self.providers[RSSL_PROVIDERS - t]
            }
            _ => return false,
        };
        part.handle_io(cx, readiness);
        true
    }

    /// Every part's input, then its deadlines.
    pub(super) fn handle_input(&mut self, cx: &mut Cx<'_>) {
        for part in self.each() {
            part.handle_input(cx);
            part.handle_timeout(cx);
        }
    }

    /// The node's figures item, when due (not while the node shuts down).
    pub(super) fn handle_timeout(&mut self, cx: &mut Cx<'_>, stopping: bool) {
        let f = &mut self.figures;
        if cx.now < f.next || stopping {
            return;
        }
        f.item.backbone = self.backbone.as_ref().map(|b| b.backbone.figures(cx.now));
        f.item.upstream = self.upstream.as_ref().map(|u| u.state_text());
        let above = match &self.upstream {
            Some(u) => u.above().clone(),
            None => NodePath::default(),
        };
        f.item.path = above.below(f.node_id, &f.node_name).to_string();
        f.item.tick(cx.core, cx.now);
        f.next = cx.now + NODE_ITEM_EVERY;
    }

    /// The files service's messages (from peers and the upstream, its answers), then
    /// what the core wrote for each part.
    pub(super) fn pump(&mut self, cx: &mut Cx<'_>) {
        if let Some(f) = self.files.as_mut() {
            let backbone = self.backbone.as_mut().map(|b| &mut b.backbone);
            f.turn(cx.core, self.upstream.as_mut(), backbone);
        }
        if let Some(b) = self.backbone.as_mut() {
            b.pump(cx);
        }
        if let Some(u) = self.upstream.as_mut() {
            u.pump(cx);
            if let Some(f) = self.files.as_mut() {
                f.intake_upstream(u);
            }
        }
        for p in self.providers.iter_mut() {
            p.pump(cx);
        }
    }

    /// After the turn: the backbone's idle strategy, told how much came from outside.
    pub(super) fn end_turn(&mut self, now: Instant, outside: usize) {
        if let Some(b) = self.backbone.as_mut() {
            b.end_turn(now, outside);
        }
    }

    /// What /metrics and the node's HTTP answers show of the parts.
    pub(super) fn view(&self, ws_encoded: u64, ws_reused: u64) -> Extra<'_> {
        Extra {
            journal: self.journal.as_ref().map(|j| &j.thread),
            files: self.files.as_ref(),
            backbone: self.figures.item.backbone.as_ref(),
            backbone_linked: self.backbone.as_ref().map(|b| b.backbone.link().is_some()),
            upstream: self.upstream.as_ref(),
            websocket_updates_encoded: ws_encoded,
            websocket_updates_reused: ws_reused,
            tls: None,
            metrics_token: self.metrics_token.as_deref(),
            rssl_providers: &self.providers,
        }
    }
}
