//! Node configuration: a TOML file, every key documented in docs/OPERATIONS.md.

pub use crate::config_error::ConfigError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use tickwire_core::{CoreConfig, Limits, SlowConsumerConfig};
use tickwire_proto::SlowConsumerPolicy;

/// What the node does with a subscriber that falls behind (docs/OPERATIONS.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SlowPolicy {
    /// Merge pending updates of an item into one while the subscriber is behind.
    Conflate,
    /// Disconnect it (closed-recover) when its queue passes the hard bound.
    Disconnect,
}

impl SlowPolicy {
    /// The core's policy.
    pub fn to_proto(self) -> SlowConsumerPolicy {
        match self {
            SlowPolicy::Conflate => SlowConsumerPolicy::Conflate,
            SlowPolicy::Disconnect => SlowConsumerPolicy::Disconnect,
        }
    }
}

impl std::str::FromStr for SlowPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "conflate" => Ok(SlowPolicy::Conflate),
            "disconnect" => Ok(SlowPolicy::Disconnect),
            other => Err(format!(
                "invalid slow-consumer policy {other:?}: allowed values are conflate, disconnect"
            )),
        }
    }
}

/// `[node] cache`: the last-value cache on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheMode {
    /// Last values kept: a new subscriber gets its image from the node.
    On,
    /// Pass-through: images come from the publisher.
    Off,
}

impl std::str::FromStr for CacheMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "on" => Ok(CacheMode::On),
            "off" => Ok(CacheMode::Off),
            other => Err(format!(
                "invalid cache mode {other:?}: allowed values are on, off"
            )),
        }
    }
}

/// How the event loop waits for work: a measured choice (docs/BENCHMARKS.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WaitStrategy {
    /// Sleep in epoll until a socket is ready: no CPU when idle, a wake-up per event.
    Block,
    /// Poll without sleeping, yielding the CPU between empty polls.
    Yield,
    /// Poll without sleeping: lowest latency, one CPU always busy.
    Spin,
    /// Spin for `spin_us` after the last event, then block.
    SpinThenBlock,
}

impl std::str::FromStr for WaitStrategy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "block" => Ok(WaitStrategy::Block),
            "yield" => Ok(WaitStrategy::Yield),
            "spin" => Ok(WaitStrategy::Spin),
            "spin-then-block" => Ok(WaitStrategy::SpinThenBlock),
            other => Err(format!(
                "invalid wait strategy {other:?}: allowed values are block, yield, spin, spin-then-block"
            )),
        }
    }
}

/// The whole node configuration, as in the TOML file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// `[node]`.
    pub node: NodeSection,
    /// `[limits]`.
    pub limits: LimitsSection,
    /// `[slow_consumer]`.
    pub slow_consumer: SlowConsumerSection,
    /// `[websocket]`.
    pub websocket: WebSocketSection,
    /// `[rssl]`.
    pub rssl: RsslSection,
    /// `[security]`.
    pub security: SecuritySection,
    /// `[tls]`.
    pub tls: TlsSection,
    /// `[backbone]`.
    pub backbone: crate::backbone::BackboneSection,
    /// `[upstream]`.
    pub upstream: crate::upstream::UpstreamSection,
    /// `[posts]`.
    pub posts: PostsSection,
    /// `[journal]`.
    pub journal: crate::journal::JournalSection,
    /// `[files]`.
    pub files: crate::files::FilesSection,
}

/// `[posts]`: which services' publishers are sent subscribers' posts (contributions),
/// and how long the node waits for their answer (docs/OPERATIONS.md, "Posts").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PostsSection {
    /// Services that take posts; `["*"]`: every service; empty (the default): none, and
    /// every post is refused (`DeniedBySrc`).
    pub services: Vec<String>,
    /// A post its publisher has not answered within this time is refused (`NoResponse`).
    pub timeout_ms: u64,
    /// Posts one connection may have waiting for an answer; more are refused
    /// (`NoResources`).
    pub max_pending: usize,
}

impl Default for PostsSection {
    fn default() -> Self {
        let core = Limits::default();
        PostsSection {
            services: Vec::new(),
            timeout_ms: core.post_timeout.as_millis() as u64,
            max_pending: core.max_pending_posts,
        }
    }
}

/// `[tls]`: when both are set, the node's TCP port and its WebSocket/HTTP port speak
/// TLS only (docs/OPERATIONS.md, "Security").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TlsSection {
    /// PEM file of the certificate chain (the node's certificate first).
    pub cert: String,
    /// PEM file of the certificate's private key.
    pub key: String,
    /// New TLS connections a second at most, every port together, a quarter of them
    /// from one address: each costs the event loop a key exchange and a signature. Past
    /// it a new connection is closed unanswered, as any refusal over TLS is.
    pub max_handshakes_per_s: u32,
}

impl Default for TlsSection {
    fn default() -> Self {
        TlsSection {
            cert: String::new(),
            key: String::new(),
            max_handshakes_per_s: 250,
        }
    }
}

impl TlsSection {
    /// A certificate or key is configured.
    pub fn enabled(&self) -> bool {
        !self.cert.is_empty() || !self.key.is_empty()
    }
}

/// The WebSocket JSON API (`tr_json2`), docs/OPERATIONS.md.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebSocketSection {
    /// Address for WebSocket clients (`ws://ADDR/WebSocket`); empty: no WebSocket API.
    pub listen: String,
    /// Service for requests that name none; empty: the first service in the directory.
    pub default_service: String,
    /// Largest message a client may send, in bytes (announced as MaxMsgSize).
    pub max_msg_size: usize,
    /// Encode each update's JSON once for every client watching it with the same view
    /// (off only to measure what that saves).
    pub share_encoding: bool,
    /// Browser origins (`https://host:port`), besides the node's own, whose pages may
    /// open WebSocket sessions; `*`: any. Upgrades without `Origin` (programs) are
    /// always allowed.
    pub allowed_origins: Vec<String>,
    /// A file whose first line is the bearer token `GET /metrics` must present
    /// (`Authorization: Bearer TOKEN`); empty: none. A node with a users file or a
    /// login token serves `/metrics` only with one (the figures name its services and
    /// users).
    pub metrics_token_file: String,
}

impl Default for WebSocketSection {
    fn default() -> Self {
        WebSocketSection {
            listen: String::new(),
            default_service: String::new(),
            max_msg_size: 61_440,
            share_encoding: true,
            allowed_origins: Vec::new(),
            metrics_token_file: String::new(),
        }
    }
}

/// The shortest bearer token `/metrics` takes: it is compared as it is, not hashed.
const MIN_METRICS_TOKEN: usize = 16;

impl WebSocketSection {
    /// The token from `metrics_token_file`'s first line, if one is set.
    pub fn metrics_token(&self) -> Result<Option<String>, ConfigError> {
        if self.metrics_token_file.is_empty() {
            return Ok(None);
        }
        let invalid = |reason: String| ConfigError::Invalid {
            key: "websocket.metrics_token_file",
            value: self.metrics_token_file.clone(),
            reason,
        };
        let text = std::fs::read_to_string(&self.metrics_token_file)
            .map_err(|e| invalid(format!("cannot read it: {e}")))?;
        let token = text.lines().next().unwrap_or("").trim();
        if token.len() < MIN_METRICS_TOKEN || token.chars().any(|c| c.is_whitespace()) {
            return Err(invalid(format!(
                "its first line must be the token: at least {MIN_METRICS_TOKEN} characters, no spaces"
            )));
        }
        Ok(Some(token.to_string()))
    }

    /// The address to listen on, if the API is on.
    pub fn address(&self) -> Result<Option<SocketAddr>, ConfigError> {
        if self.listen.is_empty() {
            return Ok(None);
        }
        resolve_listen(&self.listen)
            .map(Some)
            .map_err(|reason| ConfigError::Invalid {
                key: "websocket.listen",
                value: self.listen.clone(),
                reason: format!("{reason}, or empty for none"),
            })
    }
}

/// RSSL, the protocol of LSEG's Real-Time SDK applications (docs/RSSL.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RsslSection {
    /// Empty: on the node's own port (`node.listen`), each connection told apart by
    /// its first bytes; `off`: no RSSL; `IP:PORT`: a port of its own.
    pub listen: String,
    /// The largest RIPC message either side sends, in bytes (announced in the
    /// ConnectAck; longer messages are fragmented).
    pub max_msg_size: u16,
    /// An RDMFieldDictionary file: each field's RWF type, as the applications'
    /// dictionary has it, and the field dictionary consumers download. Empty: the
    /// node's own fields, typed as the standard ones.
    pub field_dictionary: String,
    /// An enumtype.def file: the enumeration tables consumers download. Empty: none.
    pub enum_dictionary: String,
    /// Interactive providers the node connects to as a consumer, serving their
    /// services (`[[rssl.providers]]`, `tickwire node --rssl-provider HOST:PORT`).
    pub providers: Vec<RsslProviderSection>,
}

/// One interactive RSSL provider (ProvPerf, the ETA Provider...).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RsslProviderSection {
    /// `HOST:PORT` where the provider listens.
    pub address: String,
    /// The user name the node logs in to it with.
    pub user: String,
}

impl Default for RsslProviderSection {
    fn default() -> Self {
        RsslProviderSection {
            address: String::new(),
            user: "tickwire".into(),
        }
    }
}

impl Default for RsslSection {
    fn default() -> Self {
        RsslSection {
            listen: String::new(),
            max_msg_size: 6144,
            field_dictionary: String::new(),
            enum_dictionary: String::new(),
            providers: Vec::new(),
        }
    }
}

impl RsslSection {
    /// The dictionaries RWF is encoded and decoded by, and consumers download.
    pub fn load_dictionary(&self) -> Result<tickwire_rssl::dictionary::RwfDictionary, ConfigError> {
        use tickwire_rssl::dictionary::{EnumFile, FieldFile, RwfDictionary};
        let read = |key: &'static str, path: &str| {
            std::fs::read_to_string(path).map_err(|e| ConfigError::Invalid {
                key,
                value: path.to_string(),
                reason: format!("cannot read it: {e}"),
            })
        };
        let invalid = |key: &'static str, path: &str| {
            let path = path.to_string();
            move |reason: String| ConfigError::Invalid {
                key,
                value: path,
                reason,
            }
        };
        let native = RwfDictionary::from_native(&tickwire_proto::Dictionary::market_price());
        let (fields, mut source) = if self.field_dictionary.is_empty() {
            (native.fields, native.source)
        } else {
            let text = read("rssl.field_dictionary", &self.field_dictionary)?;
            let f = FieldFile::parse(&text, &self.field_dictionary)
                .map_err(invalid("rssl.field_dictionary", &self.field_dictionary))?;
            (f, self.field_dictionary.clone())
        };
        let enums = if self.enum_dictionary.is_empty() {
            native.enums
        } else {
            let text = read("rssl.enum_dictionary", &self.enum_dictionary)?;
            source = format!("{source} and {}", self.enum_dictionary);
            EnumFile::parse(&text, &self.enum_dictionary)
                .map_err(invalid("rssl.enum_dictionary", &self.enum_dictionary))?
        };
        Ok(RwfDictionary::new(fields, enums, &source))
    }
}

/// Where a node accepts RSSL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RsslAt {
    /// No RSSL listener.
    Off,
    /// On the node's own port.
    Shared,
    /// On a port of its own.
    Own(SocketAddr),
}

impl RsslSection {
    /// Where RSSL is accepted, given the node's own listening address.
    pub fn at(&self, node_listen: SocketAddr) -> Result<RsslAt, ConfigError> {
        match self.listen.as_str() {
            "" => Ok(RsslAt::Shared),
            "off" => Ok(RsslAt::Off),
            text => {
                let a = resolve_listen(text).map_err(|reason| ConfigError::Invalid {
                    key: "rssl.listen",
                    value: text.to_string(),
                    reason: format!("{reason}, `off`, or empty for the node's own port"),
                })?;
                Ok(if a == node_listen {
                    RsslAt::Shared
                } else {
                    RsslAt::Own(a)
                })
            }
        }
    }
}

/// A listening address: `IP:PORT`, or `HOST:PORT` with the host name resolved (its
/// first address, IPv4 or IPv6 as the resolver orders them).
pub fn resolve_listen(text: &str) -> Result<SocketAddr, String> {
    if let Ok(a) = text.parse() {
        return Ok(a);
    }
    use std::net::ToSocketAddrs;
    match text.to_socket_addrs() {
        Ok(mut addrs) => addrs
            .next()
            .ok_or_else(|| format!("{text:?}: the host name has no address")),
        Err(e) => Err(format!(
            "{text:?} is not IP:PORT or HOST:PORT (e.g. 127.0.0.1:14002, [::1]:14002, localhost:14002): {e}"
        )),
    }
}

fn de_listen<'de, D: serde::Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(d)?;
    resolve_listen(&text).map_err(serde::de::Error::custom)
}

/// `[slow_consumer]`: what the node does with subscribers that fall behind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlowConsumerSection {
    /// Policy for subscribers that neither ask for one at login nor have one below.
    pub policy: SlowPolicy,
    /// Under `conflate`: queued output (bytes) past which a subscriber is behind and
    /// its updates are conflated.
    pub conflate_above_bytes: usize,
    /// Under `conflate`: queued messages past which a subscriber is behind.
    pub conflate_above_messages: u64,
    /// Per-user policies (login user name = policy); a connection's own request at
    /// login wins over these.
    pub users: BTreeMap<String, SlowPolicy>,
}

impl Default for SlowConsumerSection {
    fn default() -> Self {
        let d = SlowConsumerConfig::default();
        SlowConsumerSection {
            policy: SlowPolicy::Conflate,
            conflate_above_bytes: d.conflate_above_bytes,
            conflate_above_messages: d.conflate_above_messages,
            users: BTreeMap::new(),
        }
    }
}

/// `[node]`: the node's name, address, threads and waiting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeSection {
    /// Name announced to peers in the welcome.
    pub name: String,
    /// Address for publishers and subscribers (port 0: any free port); a host name is
    /// resolved (its first address).
    #[serde(deserialize_with = "de_listen")]
    pub listen: SocketAddr,
    /// Last-value cache: "on" or "off".
    pub cache: CacheMode,
    /// Seconds between statistics log lines; 0 turns them off.
    pub stats_interval_s: u64,
    /// CPUs to pin the event-loop thread to; empty: no pinning.
    pub cpus: Vec<usize>,
    /// How the event loop waits for work.
    pub wait: WaitStrategy,
    /// With `spin-then-block`: microseconds to keep spinning after the last event.
    pub spin_us: u64,
}

/// `[limits]`: what one peer may cost the node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsSection {
    /// Logged-in connections; new connections are refused past it.
    pub max_connections: usize,
    /// Connections that have not logged in yet, counted apart; past it the oldest that
    /// has not sent a whole login is closed for a newcomer (or, with none, the
    /// newcomer is refused).
    pub max_pending_logins: usize,
    /// The same, from one address.
    pub max_pending_logins_per_address: usize,
    /// A connection must log in within this time.
    pub login_timeout_ms: u64,
    /// Services the node holds at most.
    pub max_services: usize,
    /// A service without a publisher and without open streams for this long is
    /// removed; 0: never.
    pub service_retention_s: u64,
    /// Connections the kernel queues before the node accepts them (capped by the
    /// kernel's net.core.somaxconn).
    pub listen_backlog: u32,
    /// The largest frame accepted.
    pub max_frame_bytes: usize,
    /// Streams one connection may open.
    pub max_streams_per_connection: usize,
    /// Hard bound on bytes queued for one subscriber (any policy disconnects past it).
    pub max_output_bytes: usize,
    /// Hard bound on messages queued for one subscriber.
    pub max_output_messages: u64,
    /// Heartbeat interval; a peer silent for three is dropped.
    pub heartbeat_ms: u64,
    /// How long a connection the node closes may take to receive its last bytes (the
    /// status saying why) before its socket is closed anyway.
    pub close_linger_ms: u64,
    /// Kernel send buffer per connection (SO_SNDBUF); 0 leaves the kernel's default
    /// and autotuning. A small one makes a stalled subscriber's backlog show up in the
    /// node's bounded queue (where it is conflated) instead of in the kernel.
    pub socket_send_buffer_bytes: usize,
}

/// `[security]`: the users file, anonymous logins, login throttling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecuritySection {
    /// When non-empty (and no users file), every login must carry this token.
    pub login_token: String,
    /// TOML file of users and their entitlements; empty: the node is open to anyone
    /// who can reach it. Reloaded on SIGHUP.
    pub users_file: String,
    /// With a users file: who may log in without a secret.
    pub anonymous: AnonymousMode,
    /// Seconds a session token from `POST /getToken` (WebSocket/HTTP port) is valid;
    /// 0: none are issued.
    pub session_token_lifetime_s: u64,
    /// Session tokens held at most; past it the oldest goes.
    pub max_session_tokens: usize,
}

impl Default for SecuritySection {
    fn default() -> Self {
        let t = tickwire_core::SessionTokenConfig::default();
        SecuritySection {
            login_token: String::new(),
            users_file: String::new(),
            anonymous: AnonymousMode::None,
            session_token_lifetime_s: t.lifetime.as_secs(),
            max_session_tokens: t.max_tokens,
        }
    }
}

/// `[security] anonymous`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AnonymousMode {
    /// Every login needs a user and a secret.
    #[default]
    None,
    /// A login without a secret may subscribe to every service (never publish).
    Subscribe,
}

impl AnonymousMode {
    /// The core's setting.
    pub fn to_core(self) -> tickwire_core::Anonymous {
        match self {
            AnonymousMode::None => tickwire_core::Anonymous::None,
            AnonymousMode::Subscribe => tickwire_core::Anonymous::Subscribe,
        }
    }
}

/// Where a node listens by default (the port LSEG applications default to).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:14002";

impl Default for NodeSection {
    fn default() -> Self {
        NodeSection {
            name: "tickwire".into(),
            listen: DEFAULT_LISTEN.parse().expect("valid default address"),
            cache: CacheMode::On,
            stats_interval_s: 10,
            cpus: Vec::new(),
            wait: WaitStrategy::Block,
            spin_us: 50,
        }
    }
}

impl Default for LimitsSection {
    fn default() -> Self {
        let l = Limits::default();
        LimitsSection {
            max_connections: 10_000,
            max_pending_logins: 64,
            max_pending_logins_per_address: 8,
            login_timeout_ms: l.login_timeout.as_millis() as u64,
            max_services: l.max_services,
            service_retention_s: l.service_retention.as_secs(),
            listen_backlog: 1024,
            max_frame_bytes: l.max_frame,
            max_streams_per_connection: l.max_streams_per_connection,
            max_output_bytes: l.max_output_bytes,
            max_output_messages: l.max_output_messages,
            heartbeat_ms: l.heartbeat.as_millis() as u64,
            close_linger_ms: 5_000,
            socket_send_buffer_bytes: 0,
        }
    }
}

impl NodeConfig {
    /// Reads and checks a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = Self::read_text(path)?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Reads a config file without checking its values: for a caller that overrides
    /// some of them first (`tickwire node`'s flags), then calls [`NodeConfig::validate`].
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let text = Self::read_text(path)?;
        Self::parse_unchecked(&text, &path.display().to_string())
    }

    fn read_text(path: &Path) -> Result<String, ConfigError> {
        std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })
    }

    fn parse_unchecked(text: &str, origin: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            message: e.to_string().trim_end().to_string(),
        })
    }

    /// Parses TOML text; `origin` names the file in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self, ConfigError> {
        let cfg = Self::parse_unchecked(text, origin)?;
        cfg.validate().map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            message: e.to_string(),
        })?;
        Ok(cfg)
    }

    /// Checks every section; the error names the key and why.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let min_frame = tickwire_proto::frame::MIN_MAX_FRAME;
        let l = &self.limits;
        let check = |ok: bool, key: &'static str, value: String, reason: String| {
            if ok {
                Ok(())
            } else {
                Err(ConfigError::Invalid { key, value, reason })
            }
        };
        check(
            l.max_frame_bytes >= min_frame
                && l.max_frame_bytes <= tickwire_proto::frame::MAX_MAX_FRAME,
            "limits.max_frame_bytes",
            l.max_frame_bytes.to_string(),
            format!("allowed: {min_frame} to 16777216"),
        )?;
        check(
            l.heartbeat_ms >= 100 && l.heartbeat_ms <= 600_000,
            "limits.heartbeat_ms",
            l.heartbeat_ms.to_string(),
            "allowed: 100 to 600000".into(),
        )?;
        check(
            l.listen_backlog >= 1 && l.listen_backlog <= 65_535,
            "limits.listen_backlog",
            l.listen_backlog.to_string(),
            "allowed: 1 to 65535".into(),
        )?;
        check(
            l.max_connections >= 1,
            "limits.max_connections",
            l.max_connections.to_string(),
            "allowed: 1 or more".into(),
        )?;
        // The login checks' and TLS handshakes' queues take this many slots, allocated
        // at start (10^8 of them aborted the node).
        check(
            (1..=100_000).contains(&l.max_pending_logins),
            "limits.max_pending_logins",
            l.max_pending_logins.to_string(),
            "allowed: 1 to 100000".into(),
        )?;
        check(
            l.max_pending_logins_per_address >= 1,
            "limits.max_pending_logins_per_address",
            l.max_pending_logins_per_address.to_string(),
            "allowed: 1 or more (more than max_pending_logins is the same as it)".into(),
        )?;
        check(
            (100..=600_000).contains(&l.login_timeout_ms),
            "limits.login_timeout_ms",
            l.login_timeout_ms.to_string(),
            "allowed: 100 to 600000".into(),
        )?;
        check(
            l.max_services >= 1,
            "limits.max_services",
            l.max_services.to_string(),
            "allowed: 1 or more".into(),
        )?;
        check(
            l.max_streams_per_connection >= 1,
            "limits.max_streams_per_connection",
            l.max_streams_per_connection.to_string(),
            "allowed: 1 or more".into(),
        )?;
        check(
            l.max_output_bytes >= l.max_frame_bytes,
            "limits.max_output_bytes",
            l.max_output_bytes.to_string(),
            format!(
                "must be at least limits.max_frame_bytes ({})",
                l.max_frame_bytes
            ),
        )?;
        check(
            l.max_output_messages >= 100,
            "limits.max_output_messages",
            l.max_output_messages.to_string(),
            "allowed: 100 or more".into(),
        )?;
        check(
            l.close_linger_ms <= 600_000,
            "limits.close_linger_ms",
            l.close_linger_ms.to_string(),
            "allowed: 0 to 600000".into(),
        )?;
        check(
            l.socket_send_buffer_bytes == 0
                || (4096..=64 * 1024 * 1024).contains(&l.socket_send_buffer_bytes),
            "limits.socket_send_buffer_bytes",
            l.socket_send_buffer_bytes.to_string(),
            "allowed: 0 (kernel default) or 4096 to 67108864".into(),
        )?;
        check(
            (1..=600_000).contains(&self.posts.timeout_ms),
            "posts.timeout_ms",
            self.posts.timeout_ms.to_string(),
            "allowed: 1 to 600000".into(),
        )?;
        check(
            self.journal.services.is_empty() || !self.journal.dir.is_empty(),
            "journal.services",
            format!("{:?}", self.journal.services),
            "needs journal.dir, the directory of the journal".into(),
        )?;
        // A service journaled for its posts alone must take posts, or nothing of it is
        // ever journaled (every post refused) while the journal looks ready.
        let takes_posts = |name: &String| self.posts.services.iter().any(|p| p == "*" || p == name);
        if let Some(name) = self
            .journal
            .services
            .iter()
            .find(|name| *name != "*" && !self.journal.updates && !takes_posts(name))
        {
            check(
                false,
                "journal.services",
                format!("{:?}", self.journal.services),
                format!(
                    "service {name:?} does not take posts on this node: add it to posts.services, or set journal.updates = true to keep its refreshes and updates"
                ),
            )?;
        }
        check(
            (1..=4096).contains(&self.journal.segment_mb),
            "journal.segment_mb",
            self.journal.segment_mb.to_string(),
            "allowed: 1 to 4096".into(),
        )?;
        // Removed a whole segment at a time: less than one would keep none but the
        // segment being written.
        let j = &self.journal;
        check(
            j.retain_mb == 0 || j.retain_mb >= j.segment_mb,
            "journal.retain_mb",
            j.retain_mb.to_string(),
            format!(
                "allowed: 0 (every segment kept) or at least journal.segment_mb ({}): old segments are removed whole",
                j.segment_mb
            ),
        )?;
        self.files.validate()?;
        check(
            self.posts.max_pending >= 1,
            "posts.max_pending",
            self.posts.max_pending.to_string(),
            "allowed: 1 or more".into(),
        )?;
        // Thresholds above the hard bounds are allowed: the effective threshold is the
        // smaller of the two (a lowered max_output_bytes needs no second edit).
        let sc = &self.slow_consumer;
        check(
            sc.conflate_above_bytes >= 4096,
            "slow_consumer.conflate_above_bytes",
            sc.conflate_above_bytes.to_string(),
            "allowed: 4096 or more".into(),
        )?;
        check(
            sc.conflate_above_messages >= 16,
            "slow_consumer.conflate_above_messages",
            sc.conflate_above_messages.to_string(),
            "allowed: 16 or more".into(),
        )?;
        self.websocket.address()?;
        // The token file itself is read by the node at start, not here: `tickwire
        // health --config` reads this file too, and need not read a secret.
        self.rssl.at(self.node.listen)?;
        for p in &self.rssl.providers {
            let ok = p
                .address
                .rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
            if !ok {
                return Err(ConfigError::Invalid {
                    key: "rssl.providers.address",
                    value: p.address.clone(),
                    reason: "expected HOST:PORT".into(),
                });
            }
        }
        check(
            self.rssl.max_msg_size >= 512,
            "rssl.max_msg_size",
            self.rssl.max_msg_size.to_string(),
            "allowed: 512 to 65535".into(),
        )?;
        self.backbone.validate()?;
        self.upstream.validate()?;
        check(
            (1024..=16 * 1024 * 1024).contains(&self.websocket.max_msg_size),
            "websocket.max_msg_size",
            self.websocket.max_msg_size.to_string(),
            "allowed: 1024 to 16777216".into(),
        )?;
        for o in &self.websocket.allowed_origins {
            if let Err(reason) = tickwire_gateway::ws::valid_allowed_origin(o) {
                return Err(ConfigError::Invalid {
                    key: "websocket.allowed_origins",
                    value: format!("{o:?}"),
                    reason,
                });
            }
        }
        let sec = &self.security;
        check(
            sec.session_token_lifetime_s <= 7 * 86_400,
            "security.session_token_lifetime_s",
            sec.session_token_lifetime_s.to_string(),
            "allowed: 0 (no tokens) to 604800 (7 days)".into(),
        )?;
        check(
            sec.max_session_tokens >= 1,
            "security.max_session_tokens",
            sec.max_session_tokens.to_string(),
            "allowed: 1 or more".into(),
        )?;
        check(
            (1..=1_000_000).contains(&self.tls.max_handshakes_per_s),
            "tls.max_handshakes_per_s",
            self.tls.max_handshakes_per_s.to_string(),
            "allowed: 1 to 1,000,000".into(),
        )?;
        match (self.tls.cert.is_empty(), self.tls.key.is_empty()) {
            (false, true) => {
                return Err(ConfigError::Invalid {
                    key: "tls.key",
                    value: "\"\"".into(),
                    reason: format!(
                    "tls.cert is set ({:?}): TLS needs both the certificate and its private key",
                    self.tls.cert
                ),
                })
            }
            (true, false) => {
                return Err(ConfigError::Invalid {
                    key: "tls.cert",
                    value: "\"\"".into(),
                    reason: format!(
                        "tls.key is set ({:?}): TLS needs both the certificate and its private key",
                        self.tls.key
                    ),
                })
            }
            _ => {}
        }
        // A Welcome carries the name in a string of at most 65,535 bytes: a longer one
        // made every login fail.
        check(
            !self.node.name.is_empty() && self.node.name.len() <= 256,
            "node.name",
            format!("{:?}", self.node.name),
            "allowed: 1 to 256 bytes".into(),
        )?;
        check(
            self.node.stats_interval_s <= 86_400,
            "node.stats_interval_s",
            self.node.stats_interval_s.to_string(),
            "allowed: 0 (off) to 86400 (a day)".into(),
        )?;
        if !self.node.cpus.is_empty() {
            // The CPUs this process may use, not how many there are: under `taskset`
            // or a cgroup's cpuset, ids were refused that were allowed and taken that
            // were not (the event loop then ran outside the operator's mask).
            let allowed = crate::allowed_cpus().unwrap_or_default();
            for &c in &self.node.cpus {
                check(
                    allowed.contains(&c),
                    "node.cpus",
                    format!("{:?}", self.node.cpus),
                    format!(
                        "CPU {c} is not one this process may run on: it may use CPUs {allowed:?}"
                    ),
                )?;
            }
        }
        Ok(())
    }

    /// The effective configuration as TOML (for `--print-config`), secrets hidden.
    pub fn to_toml(&self) -> String {
        let mut shown = self.clone();
        if !shown.security.login_token.is_empty() {
            shown.security.login_token = "(set, not shown)".into();
        }
        toml::to_string_pretty(&shown).expect("config serialises")
    }

    /// Loads the users file, if one is configured.
    pub fn load_users(&self) -> Result<Option<std::sync::Arc<tickwire_core::Users>>, ConfigError> {
        let path = &self.security.users_file;
        if path.is_empty() {
            return Ok(None);
        }
        tickwire_core::Users::load(Path::new(path))
            .map(|u| Some(std::sync::Arc::new(u)))
            .map_err(|e| ConfigError::Invalid {
                key: "security.users_file",
                value: path.clone(),
                reason: e.to_string(),
            })
    }

    /// The TLS server configuration, if `[tls]` is set: the files are read and checked
    /// (errors name the key, the file and the reason).
    pub fn load_tls(&self) -> Result<Option<std::sync::Arc<rustls::ServerConfig>>, ConfigError> {
        if !self.tls.enabled() {
            return Ok(None);
        }
        crate::tls::server_config(&self.tls.cert, &self.tls.key)
            .map(Some)
            .map_err(|e| ConfigError::Invalid {
                key: e.key,
                value: format!("{:?}", e.file),
                reason: e.reason,
            })
    }

    /// The core's settings.
    pub fn core_config(&self) -> CoreConfig {
        CoreConfig {
            node_name: self.node.name.clone(),
            cache: self.node.cache == CacheMode::On,
            limits: Limits {
                max_frame: self.limits.max_frame_bytes,
                max_streams_per_connection: self.limits.max_streams_per_connection,
                max_output_bytes: self.limits.max_output_bytes,
                max_output_messages: self.limits.max_output_messages,
                heartbeat: Duration::from_millis(self.limits.heartbeat_ms),
                login_timeout: Duration::from_millis(self.limits.login_timeout_ms),
                max_connections: self.limits.max_connections,
                max_pending_logins: self.limits.max_pending_logins,
                max_pending_logins_per_address: self.limits.max_pending_logins_per_address,
                max_services: self.limits.max_services,
                service_retention: Duration::from_secs(self.limits.service_retention_s),
                max_pending_posts: self.posts.max_pending,
                post_timeout: Duration::from_millis(self.posts.timeout_ms),
            },
            posts: tickwire_core::PostServices::from_list(&self.posts.services),
            journal: if self.journal.dir.is_empty() {
                tickwire_core::PostServices::None
            } else {
                tickwire_core::PostServices::from_list(&self.journal.services)
            },
            journal_updates: self.journal.updates && !self.journal.dir.is_empty(),
            files: self.files.enabled(),
            login_token: (!self.security.login_token.is_empty())
                .then(|| self.security.login_token.clone()),
            users: None, // loaded by the server (NodeConfig::load_users)
            anonymous: self.security.anonymous.to_core(),
            slow_consumer: SlowConsumerConfig {
                policy: self.slow_consumer.policy.to_proto(),
                per_user: self
                    .slow_consumer
                    .users
                    .iter()
                    .map(|(u, p)| (u.clone(), p.to_proto()))
                    .collect(),
                conflate_above_bytes: self.slow_consumer.conflate_above_bytes,
                conflate_above_messages: self.slow_consumer.conflate_above_messages,
            },
            session_tokens: tickwire_core::SessionTokenConfig {
                lifetime: Duration::from_secs(self.security.session_token_lifetime_s),
                max_tokens: self.security.max_session_tokens,
            },
            tls: self.tls.enabled(),
            node_id: 0, // the server's, per process
            interactive_linger: if self.upstream.nodes.is_empty() {
                Duration::ZERO
            } else {
                Duration::from_millis(self.upstream.linger_ms)
            },
        }
    }
}

/// CPUs this process may run on.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_consumer_section_parses_and_is_checked() {
        let cfg = NodeConfig::parse(
            "[slow_consumer]\npolicy = \"disconnect\"\nconflate_above_bytes = 65536\n\
             [slow_consumer.users]\nalice = \"conflate\"\n",
            "n.toml",
        )
        .unwrap();
        let core = cfg.core_config();
        assert_eq!(core.slow_consumer.policy, SlowConsumerPolicy::Disconnect);
        assert_eq!(core.slow_consumer.conflate_above_bytes, 65536);
        assert_eq!(
            core.slow_consumer.per_user.get("alice"),
            Some(&SlowConsumerPolicy::Conflate)
        );
        let e = NodeConfig::parse("[slow_consumer]\npolicy = \"drop\"\n", "n.toml").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("n.toml") && msg.contains("policy") && msg.contains("`conflate`"),
            "{msg}"
        );
        let e = NodeConfig::parse("[slow_consumer]\nconflate_above_bytes = 100\n", "n.toml")
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("slow_consumer.conflate_above_bytes = 100: allowed: 4096 or more"),
            "{e}"
        );
    }

    /// Settings each valid alone that broke the node: a name no Welcome can carry (every
    /// login failed), a statistics interval that overflowed the clock (a panic after
    /// start), a service journaled for posts it never takes (every post refused, the
    /// journal looking ready), a CPU outside the process's affinity.
    #[test]
    fn settings_that_would_break_the_node_are_refused_naming_the_key() {
        let refused = |text: &str, key: &str| {
            let e = NodeConfig::parse(text, "n.toml").unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        };
        refused(
            &format!("[node]\nname = \"{}\"\n", "n".repeat(70_000)),
            "node.name",
        );
        refused("[node]\nname = \"\"\n", "node.name");
        refused(
            "[node]\nstats_interval_s = 9223372036854775807\n",
            "node.stats_interval_s",
        );
        refused("[node]\ncpus = [1023]\n", "node.cpus");
        let journal =
            |extra: &str| format!("[journal]\ndir = \"/tmp/j\"\nservices = [\"FEED\"]\n{extra}");
        refused(&journal(""), "journal.services");
        assert!(NodeConfig::parse(&journal("updates = true\n"), "n.toml").is_ok());
        let with_posts = format!("[posts]\nservices = [\"FEED\"]\n{}", journal(""));
        assert!(NodeConfig::parse(&with_posts, "n.toml").is_ok());
        // Less than a segment would keep none but the one being written.
        let retained = |extra: &str| journal(&format!("updates = true\nsegment_mb = 8\n{extra}"));
        refused(&retained("retain_mb = 7\n"), "journal.retain_mb");
        for ok in ["retain_mb = 0\n", "retain_mb = 8\n", ""] {
            assert!(NodeConfig::parse(&retained(ok), "n.toml").is_ok(), "{ok}");
        }
        let source = |extra: &str| {
            format!("[backbone]\nrole = \"source\"\nchannel = \"aeron:udp?endpoint=239.1.1.1:40456\"\n{extra}")
        };
        refused(&source("max_asked = 0\n"), "backbone.max_asked = 0");
        refused(
            &source("max_asked = 64\nmax_asked_per_service = 65\n"),
            "backbone.max_asked_per_service = 65",
        );
        refused(
            &source("ask_patience_ms = 50\n"),
            "backbone.ask_patience_ms = 50",
        );
        let paced = "max_asked = 64\nmax_asked_per_service = 64\nask_patience_ms = 100\n";
        assert!(NodeConfig::parse(&source(paced), "n.toml").is_ok());
        let allowed = crate::allowed_cpus().unwrap();
        let cpus = format!("[node]\ncpus = [{}]\n", allowed[0]);
        assert!(NodeConfig::parse(&cpus, "n.toml").is_ok());
    }

    /// The login checks' and TLS handshakes' queues take max_pending_logins slots,
    /// allocated whole at start: 10^8 of them aborted the node (8 GB).
    #[test]
    fn a_pending_login_limit_whose_queue_cannot_be_allocated_is_refused() {
        let e = NodeConfig::parse("[limits]\nmax_pending_logins = 100000000\n", "n.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("limits.max_pending_logins = 100000000"), "{e}");
        assert!(NodeConfig::parse("[limits]\nmax_pending_logins = 100000\n", "n.toml").is_ok());
    }

    /// The files' MB are multiplied into bytes and their hours into milliseconds: past
    /// u64 the node panicked at start (or, optimised, its limits wrapped round).
    #[test]
    fn files_sizes_and_hours_that_overflow_their_products_are_refused() {
        let files = |extra: &str| {
            format!(
                "[files]\nservices = [\"FILES\"]\nspool = \"/tmp/s\"\ninbox = \"/tmp/i\"\n{extra}"
            )
        };
        let refused = |text: &str, key: &str| {
            let e = NodeConfig::parse(text, "n.toml").unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        };
        for key in ["rate_mb_per_s", "max_queue_mb", "max_file_mb"] {
            refused(&files(&format!("{key} = 20000000000000\n")), key);
        }
        refused(&files("expire_h = 5000000000000000\n"), "files.expire_h");
        assert!(NodeConfig::parse(&files(""), "n.toml").is_ok());
    }

    /// Aeron takes an eighth of the term in one message: a term under 1 MiB could not
    /// take the backbone's largest messages (an image's part of 64 KiB stopped a
    /// source's data for good), and is refused; the largest file chunk fits the
    /// smallest term (and what an edge puts back together: `reassembly::MAX_MESSAGE`).
    #[test]
    fn a_term_too_small_for_the_backbones_largest_message_is_refused() {
        let cfg = |term: usize, chunk: u32| {
            format!(
                "[backbone]\nrole = \"edge\"\nchannel = \"aeron:udp?endpoint=239.1.1.1:40456\"\nterm_length = {term}\n\
                 [files]\nservices = [\"FILES\"]\ninbox = \"/tmp/in\"\nchunk_kib = {chunk}\n"
            )
        };
        let e = NodeConfig::parse(&cfg(524_288, 16), "n.toml").unwrap_err();
        assert!(
            e.to_string().contains("backbone.term_length = 524288")
                && e.to_string().contains("from 1048576"),
            "{e}"
        );
        assert!(NodeConfig::parse(&cfg(1 << 20, 62), "n.toml").is_ok());
    }

    /// A backbone heartbeat so long that three of it overflow u64 panicked while the
    /// config was checked (and, optimised, wrapped round to a few ms and passed).
    #[test]
    fn a_backbone_heartbeat_whose_triple_overflows_is_refused() {
        let text =
            "[backbone]\nrole = \"edge\"\nchannel = \"aeron:udp?endpoint=239.1.1.1:40456\"\n\
                    heartbeat_ms = 6148914691236517206\n";
        let e = NodeConfig::parse(text, "n.toml").unwrap_err().to_string();
        assert!(e.contains("backbone.heartbeat_ms"), "{e}");
    }

    /// A site's files arrive in a directory named after their service: a service
    /// that cannot name one (a "/", a leading ".", a control character) is refused.
    #[test]
    fn a_files_service_that_cannot_name_an_inbox_directory_is_refused() {
        let cfg = |service: &str| {
            format!("[files]\nservices = [\"FILES\", {service:?}]\ninbox = \"/tmp/in\"\n")
        };
        for bad in ["a/b", ".tickwire-partial", "..", "x\ty"] {
            let e = NodeConfig::parse(&cfg(bad), "n.toml")
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("files.services") && e.contains("cannot name a directory"),
                "{bad:?}: {e}"
            );
        }
        assert!(NodeConfig::parse(&cfg("REF-DATA_2"), "n.toml").is_ok());
    }

    /// docs/OPERATIONS.md lists every key with its default: that block must parse and
    /// equal the defaults, so the documentation cannot drift from the code.
    #[test]
    fn the_documented_defaults_are_the_defaults() {
        let doc = include_str!("../../../docs/OPERATIONS.md");
        let start = doc.find("```toml\n").expect("a toml block") + "```toml\n".len();
        let len = doc[start..].find("```").expect("its end");
        let cfg = NodeConfig::parse(&doc[start..start + len], "docs/OPERATIONS.md").unwrap();
        assert_eq!(cfg, NodeConfig::default());
    }

    #[test]
    fn defaults_round_trip_through_toml() {
        let cfg = NodeConfig::default();
        let text = cfg.to_toml();
        assert_eq!(NodeConfig::parse(&text, "x").unwrap(), cfg);
    }

    #[test]
    fn errors_name_the_file_the_key_and_the_allowed_values() {
        let e = NodeConfig::parse("[node]\ncache = \"maybe\"\n", "node.toml").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("node.toml") && msg.contains("cache") && msg.contains("`on`"),
            "{msg}"
        );
        let e = NodeConfig::parse("[node]\nlisen = \"x\"\n", "node.toml").unwrap_err();
        assert!(e.to_string().contains("lisen"), "{e}");
        let e = NodeConfig::parse("[limits]\nheartbeat_ms = 5\n", "n.toml").unwrap_err();
        assert!(
            e.to_string().contains("n.toml") && e.to_string().contains("limits.heartbeat_ms = 5"),
            "{e}"
        );
        let e = NodeConfig::parse("[node]\ncpus = [4096]\n", "n.toml").unwrap_err();
        assert!(
            e.to_string()
                .contains("CPU 4096 is not one this process may run on"),
            "{e}"
        );
        let e = NodeConfig::parse("[tls]\nmax_handshakes_per_s = 0\n", "n.toml").unwrap_err();
        assert!(
            e.to_string()
                .contains("tls.max_handshakes_per_s = 0: allowed: 1 to 1,000,000"),
            "{e}"
        );
    }
}
