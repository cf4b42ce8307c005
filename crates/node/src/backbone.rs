//! `[backbone]`: the node's part in the multi-node system (docs/OPERATIONS.md) and how
//! its settings become the backbone crate's.

use crate::config_error::{invalid, ConfigError};
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tickwire_backbone::{
    channel_param, DriverPlacement, EdgeConfig, FilesFlowControl, IdleStrategy, LinkConfig, Role,
    SourceConfig,
};

/// `[backbone]`: empty `role` means a single node, on no backbone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BackboneSection {
    /// `source` (puts its publishers' services on the backbone), `edge` (serves its
    /// subscribers from the backbone), `both`, or empty (no backbone).
    pub role: String,
    /// Aeron channel, e.g. `aeron:udp?endpoint=239.20.30.40:40456|interface=127.0.0.1`
    /// (multicast), a unicast one, or multi-destination-cast where there is no multicast
    /// (`aeron:udp?control=SOURCE_HOST:40456|control-mode=dynamic`: the source sends to
    /// every edge that joins; then `request_channel` must be unicast to the source).
    pub channel: String,
    /// Channel of the edges' requests to the sources; empty: `channel`.
    pub request_channel: String,
    /// An edge's hot-standby source where there is no multicast: its
    /// multi-destination-cast data channel (the edge receives both sources)...
    pub standby_channel: String,
    /// ...and its unicast request channel (the edge's requests go to both).
    pub standby_request_channel: String,
    /// Aeron stream id of the sources' data.
    pub data_stream: i32,
    /// Aeron stream id of the edges' requests.
    pub request_stream: i32,
    /// Aeron stream id of file transfer from the sources to the edges (used where the
    /// node has `[files]`): apart from the data, so files never hold market data up.
    pub files_stream: i32,
    /// Aeron stream id of file transfer from an edge to the sources, on the request
    /// channel (used where the node has `[files]`).
    pub files_up_stream: i32,
    /// Aeron channel of the sources' files down to the edges; empty (the default): the
    /// data channel with its port one higher (`endpoint` and `control` ports). Apart
    /// from the data's UDP endpoint, so that `files_flow_control` holds (Aeron takes
    /// the flow control of every publication on an endpoint from the first one) and
    /// files have their own socket buffers and receiver window. A standby source's
    /// files come on its data channel's port plus one.
    pub files_channel: String,
    /// Whose pace a source's files follow when its edges take them at different
    /// speeds: `slowest` (default: every edge gets each chunk once; an edge silent for
    /// 2 s stops holding the others) or `fastest` (an edge that falls behind asks for
    /// what it lost again, and the retransmissions go to every edge).
    pub files_flow_control: String,
    /// Aeron term buffer length in bytes (a power of two from 65536 to 1073741824). A
    /// publication holds three terms; each source and each receiving edge maps one log
    /// per source.
    pub term_length: usize,
    /// Largest datagram payload the node sends (Aeron's MTU), in bytes: a multiple of
    /// 32 up to 65504. 1408 fits a 1,500-byte Ethernet frame; 8192 fits a jumbo
    /// (9,000-byte) frame and carries about six times as many updates per datagram.
    pub mtu: usize,
    /// An edge declares a source lost (its items suspect) after this much silence.
    pub liveness_ms: u64,
    /// How often sources and edges say they are alive.
    pub heartbeat_ms: u64,
    /// A source also sends a heartbeat this many microseconds after its last data
    /// message when nothing follows (0: never), so that an edge that lost that message
    /// finds out then, not with the next data.
    pub tail_probe_us: u64,
    /// Which thread runs Aeron's media driver and the backbone's receiver:
    /// `event-loop` (default: the node's event loop, between its turns; a received
    /// update reaches the subscribers from the thread that received it, and the event
    /// loop, never blocking, waits by `idle`) or `thread` (a thread of its own, which
    /// wakes the event loop when messages arrive; the event loop waits by
    /// `[node] wait`).
    pub driver: String,
    /// How the thread running the driver waits when idle: `adaptive` (default: polls
    /// through pauses shorter than `spin_us` while work keeps coming, else parks in
    /// epoll on the driver's sockets and the node's: no CPU at rest), `block` (always
    /// parks), `yield` (polls, yielding the CPU: a CPU busy at rest too), `backoff`
    /// (spins, yields, then sleeps up to `max_park_us`), `sleep` (1 ms sleeps) or `spin`
    /// (a core of its own). docs/OPERATIONS.md, "Waiting: what idle costs".
    pub idle: String,
    /// With `idle = "adaptive"`: the longest pause between bursts of work that is
    /// polled through rather than parked in, in microseconds.
    pub spin_us: u64,
    /// With `idle = "backoff"`: the longest sleep of an idle driver thread, in
    /// microseconds (it spins, yields, then sleeps 1 µs, 2, 4... up to this).
    pub max_park_us: u64,
    /// Aeron's multicast NAK back-off ceiling, in microseconds.
    pub nak_max_backoff_us: u64,
    /// How long a retransmission lingers before the same data may be sent again, in
    /// microseconds.
    pub retransmit_linger_us: u64,
    /// Largest data message built from several updates; 0 (the default): what one
    /// datagram carries (`mtu` less Aeron's 32-byte frame header), so that a batch is
    /// never split across datagrams.
    pub batch_bytes: usize,
    /// SO_RCVBUF and SO_SNDBUF of the driver's UDP sockets, in bytes (the kernel caps
    /// them at net.core.rmem_max / wmem_max; the node warns when it does).
    pub socket_buffer_bytes: usize,
    /// How many bytes a source may send ahead of what an edge's driver has taken
    /// (Aeron's receiver window); 0: half the term length. At most socket_buffer_bytes.
    pub receiver_window_bytes: usize,
    /// Services a source puts on the backbone; empty: all (but the node's own figures).
    pub services: Vec<String>,
    /// New senders (Aeron sessions) the node's media driver takes per second at most:
    /// a flood of forged SETUP frames costs bounded work (docs/OPERATIONS.md, "Floods
    /// on the backbone"). A burst of more new sources or edges than this joins over
    /// several seconds.
    pub new_sessions_per_s: u32,
    /// Senders per stream the media driver keeps at most (Aeron's stream session
    /// limit): an edge's sources, a source's edges.
    pub max_sessions_per_stream: u32,
    /// Requests a source has asked of its core and not had answered yet, at most
    /// (its publishers' images are asked for as they come, not all at once).
    pub max_asked: usize,
    /// Of which one service may hold this many; 0 (the default): a quarter of
    /// `max_asked` (at least 1). A service whose publisher never answers holds back its
    /// own new items, not the other services'.
    pub max_asked_per_service: usize,
    /// A request unanswered this long, in milliseconds, stops counting against the two
    /// above (it stays open, and its answer still goes out when it comes): silent
    /// publishers delay the other services' new items by this much at most.
    pub ask_patience_ms: u64,
    /// The backbone's key file (`tickwire backbone keygen > FILE`, the same file on
    /// every node): every message sent is sealed with a MAC, and every message received
    /// that is not sealed with one of its keys for the stream it came on, or is replayed,
    /// is dropped and counted. Empty: no authentication (anyone who can send to the channel is heard).
    pub key_file: String,
}

impl Default for BackboneSection {
    fn default() -> Self {
        BackboneSection {
            role: String::new(),
            channel: String::new(),
            request_channel: String::new(),
            standby_channel: String::new(),
            standby_request_channel: String::new(),
            data_stream: 1001,
            request_stream: 1002,
            files_stream: 1003,
            files_up_stream: 1004,
            files_channel: String::new(),
            files_flow_control: "slowest".into(),
            term_length: 4 << 20,
            mtu: tickwire_backbone::DEFAULT_MTU,
            liveness_ms: 1000,
            heartbeat_ms: 100,
            tail_probe_us: 100,
            driver: "event-loop".into(),
            idle: "adaptive".into(),
            spin_us: 2000,
            max_park_us: 1000,
            nak_max_backoff_us: 100,
            retransmit_linger_us: 1000,
            batch_bytes: 0,
            socket_buffer_bytes: 2 << 20,
            receiver_window_bytes: 0,
            services: Vec::new(),
            new_sessions_per_s: 50,
            max_sessions_per_stream: 256,
            max_asked: SourceConfig::default().max_asked,
            max_asked_per_service: 0,
            ask_patience_ms: SourceConfig::default().ask_patience.as_millis() as u64,
            key_file: String::new(),
        }
    }
}

impl BackboneSection {
    /// The role, if the node is on a backbone.
    pub fn role(&self) -> Option<Role> {
        Role::parse(&self.role)
    }

    /// Checks the section; the error names the key and why.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.role.is_empty() {
            if !self.channel.is_empty() {
                return Err(invalid(
                    "backbone.role",
                    "\"\"",
                    "a channel is set: say which role the node has (source, edge or both)",
                ));
            }
            return Ok(());
        }
        if self.role().is_none() {
            return Err(invalid(
                "backbone.role",
                format!("{:?}", self.role),
                "allowed values are source, edge, both (or empty: no backbone)",
            ));
        }
        for (key, ch) in [
            ("backbone.channel", &self.channel),
            ("backbone.request_channel", &self.request_channel),
        ] {
            if key == "backbone.request_channel" && ch.is_empty() {
                continue;
            }
            if ch.starts_with("aeron:ipc") {
                // Every node embeds its own media driver: shared memory reaches no
                // other node (the nodes started and never heard each other).
                return Err(invalid(
                    key,
                    format!("{ch:?}"),
                    "aeron:ipc reaches no other node (each node runs its own media driver): use aeron:udp, e.g. aeron:udp?endpoint=239.20.30.40:40456|interface=127.0.0.1 on one machine",
                ));
            }
            if !ch.starts_with("aeron:udp?") {
                return Err(invalid(
                    key,
                    format!("{ch:?}"),
                    "an Aeron channel is needed, e.g. aeron:udp?endpoint=239.20.30.40:40456|interface=127.0.0.1",
                ));
            }
        }
        if tickwire_backbone::is_dynamic_mdc(&self.channel) {
            if self.request_channel.is_empty() {
                return Err(invalid(
                    "backbone.request_channel",
                    "\"\"",
                    "the channel is multi-destination-cast (control-mode=dynamic), which carries a source's data to the edges only: the edges' requests need a unicast channel to the source, e.g. aeron:udp?endpoint=SOURCE_HOST:40457",
                ));
            }
            if let Err(e) = tickwire_backbone::edge_data_channel(&self.channel) {
                return Err(invalid(
                    "backbone.channel",
                    format!("{:?}", self.channel),
                    &e.to_string(),
                ));
            }
        }
        if !self.standby_channel.is_empty() || !self.standby_request_channel.is_empty() {
            let (key, value) = if self.standby_channel.is_empty() {
                ("backbone.standby_channel", &self.standby_channel)
            } else {
                (
                    "backbone.standby_request_channel",
                    &self.standby_request_channel,
                )
            };
            if value.is_empty() {
                return Err(invalid(
                    key,
                    "\"\"",
                    "a standby source takes both standby_channel (its data, e.g. aeron:udp?control=STANDBY_HOST:40456|control-mode=dynamic) and standby_request_channel (e.g. aeron:udp?endpoint=STANDBY_HOST:40457)",
                ));
            }
            if !matches!(self.role(), Some(Role::Edge | Role::Both)) {
                return Err(invalid(
                    "backbone.standby_channel",
                    format!("{:?}", self.standby_channel),
                    "only an edge receives a standby source",
                ));
            }
            if self.request_channel.is_empty() {
                return Err(invalid(
                    "backbone.request_channel",
                    "\"\"",
                    "with a standby source, the first source's request channel is needed too (requests go to both)",
                ));
            }
            for (key, ch) in [
                ("backbone.standby_channel", &self.standby_channel),
                (
                    "backbone.standby_request_channel",
                    &self.standby_request_channel,
                ),
            ] {
                if !ch.starts_with("aeron:udp?") {
                    return Err(invalid(
                        key,
                        format!("{ch:?}"),
                        "an Aeron UDP channel is needed, e.g. aeron:udp?control=STANDBY_HOST:40456|control-mode=dynamic",
                    ));
                }
            }
            if let Err(e) = tickwire_backbone::edge_data_channel(&self.standby_channel) {
                return Err(invalid(
                    "backbone.standby_channel",
                    format!("{:?}", self.standby_channel),
                    &e.to_string(),
                ));
            }
        }
        if self.data_stream == self.request_stream {
            return Err(invalid(
                "backbone.request_stream",
                self.request_stream,
                "must differ from backbone.data_stream",
            ));
        }
        if self.files_stream == self.data_stream || self.files_stream == self.request_stream {
            return Err(invalid(
                "backbone.files_stream",
                self.files_stream,
                "must differ from backbone.data_stream and backbone.request_stream",
            ));
        }
        if [self.data_stream, self.request_stream, self.files_stream]
            .contains(&self.files_up_stream)
        {
            return Err(invalid(
                "backbone.files_up_stream",
                self.files_up_stream,
                "must differ from backbone.data_stream, request_stream and files_stream",
            ));
        }
        if !self.files_channel.is_empty() {
            if !self.files_channel.starts_with("aeron:udp?") {
                return Err(invalid(
                    "backbone.files_channel",
                    format!("{:?}", self.files_channel),
                    "an Aeron UDP channel (aeron:udp?endpoint=HOST:PORT or control=HOST:PORT|control-mode=dynamic)",
                ));
            }
            let shares = ["endpoint", "control"].iter().any(|key| {
                let files = channel_param(&self.files_channel, key);
                files.is_some() && files == channel_param(&self.channel, key)
            });
            if shares {
                return Err(invalid(
                    "backbone.files_channel",
                    format!("{:?}", self.files_channel),
                    "must not share the data channel's address and port: Aeron would give the files the data's flow control",
                ));
            }
        }
        if FilesFlowControl::parse(&self.files_flow_control).is_none() {
            return Err(invalid(
                "backbone.files_flow_control",
                format!("{:?}", self.files_flow_control),
                &format!("allowed values are {}", FilesFlowControl::NAMES),
            ));
        }
        // Aeron takes at most an eighth of the term in one message, and the backbone's
        // largest messages (one Tickwire message of 64 KiB with its headers and seal, a
        // file chunk) need 128 KiB: a smaller term stopped a source's data for good at
        // the first large image.
        if !self.term_length.is_power_of_two() || !(1 << 20..=1 << 30).contains(&self.term_length) {
            return Err(invalid(
                "backbone.term_length",
                self.term_length,
                "allowed: a power of two from 1048576 (Aeron then takes messages of 128 KiB, the backbone's largest) to 1073741824",
            ));
        }
        if !(100..=60_000).contains(&self.liveness_ms) {
            return Err(invalid(
                "backbone.liveness_ms",
                self.liveness_ms,
                "allowed: 100 to 60000",
            ));
        }
        // Divided, not multiplied: three times a huge heartbeat overflowed.
        if self.heartbeat_ms < 10 || self.heartbeat_ms > self.liveness_ms / 3 {
            return Err(invalid(
                "backbone.heartbeat_ms",
                self.heartbeat_ms,
                "allowed: 10 up to a third of backbone.liveness_ms",
            ));
        }
        if self.tail_probe_us > 100_000 {
            return Err(invalid(
                "backbone.tail_probe_us",
                self.tail_probe_us,
                "allowed: 0 (no probe) to 100000",
            ));
        }
        if DriverPlacement::parse(&self.driver).is_none() {
            return Err(invalid(
                "backbone.driver",
                format!("{:?}", self.driver),
                "allowed values are event-loop, thread",
            ));
        }
        if IdleStrategy::parse(&self.idle).is_none() {
            return Err(invalid(
                "backbone.idle",
                format!("{:?}", self.idle),
                &format!("allowed values are {}", IdleStrategy::NAMES),
            ));
        }
        if self.spin_us > 1_000_000 {
            return Err(invalid(
                "backbone.spin_us",
                self.spin_us,
                "allowed: 0 (never poll through a pause) to 1000000 (1 s)",
            ));
        }
        if !(1..=1_000_000).contains(&self.max_park_us) {
            return Err(invalid(
                "backbone.max_park_us",
                self.max_park_us,
                "allowed: 1 to 1000000 (1 s)",
            ));
        }
        if self.batch_bytes != 0 && !(256..=65_536).contains(&self.batch_bytes) {
            return Err(invalid(
                "backbone.batch_bytes",
                self.batch_bytes,
                "allowed: 0 (what one datagram carries), or 256 to 65536",
            ));
        }
        if !(65_536..=1 << 30).contains(&self.socket_buffer_bytes) {
            return Err(invalid(
                "backbone.socket_buffer_bytes",
                self.socket_buffer_bytes,
                "allowed: 65536 to 1073741824",
            ));
        }
        if self.receiver_window_bytes != 0
            && (self.receiver_window_bytes < 4096
                || self.receiver_window_bytes > self.term_length / 2
                || self.receiver_window_bytes > self.socket_buffer_bytes)
        {
            return Err(invalid(
                "backbone.receiver_window_bytes",
                self.receiver_window_bytes,
                "allowed: 0 (half the term length), or 4096 up to half of backbone.term_length and at most backbone.socket_buffer_bytes",
            ));
        }
        if !self.mtu.is_multiple_of(32) || !(512..=65_504).contains(&self.mtu) {
            return Err(invalid(
                "backbone.mtu",
                self.mtu,
                "allowed: a multiple of 32 from 512 to 65504 (1408 fits a 1,500-byte Ethernet frame, 8192 a 9,000-byte jumbo frame)",
            ));
        }
        if self.mtu > self.receiver_window() {
            return Err(invalid(
                "backbone.mtu",
                self.mtu,
                "larger than the receiver window (backbone.receiver_window_bytes, or half of backbone.term_length within backbone.socket_buffer_bytes): a datagram must fit in it",
            ));
        }
        if !(1..=10_000).contains(&self.new_sessions_per_s) {
            return Err(invalid(
                "backbone.new_sessions_per_s",
                self.new_sessions_per_s,
                "allowed: 1 to 10000",
            ));
        }
        if !(1..=100_000).contains(&self.max_sessions_per_stream) {
            return Err(invalid(
                "backbone.max_sessions_per_stream",
                self.max_sessions_per_stream,
                "allowed: 1 to 100000",
            ));
        }
        // A sanity bound: the budget is there to pace the images of items whose
        // publishers answer later; with more than a million unanswered it paces nothing.
        if !(1..=1_000_000).contains(&self.max_asked) {
            return Err(invalid(
                "backbone.max_asked",
                self.max_asked,
                "allowed: 1 to 1000000",
            ));
        }
        if self.max_asked_per_service > self.max_asked {
            return Err(invalid(
                "backbone.max_asked_per_service",
                self.max_asked_per_service,
                "allowed: 0 (a quarter of backbone.max_asked), or 1 up to backbone.max_asked",
            ));
        }
        // Shorter, requests would stop counting before publishers could answer them, and
        // the budget would no longer pace their images; longer than 10 minutes, silent
        // publishers would hold the other services' new items back that long.
        if !(100..=600_000).contains(&self.ask_patience_ms) {
            return Err(invalid(
                "backbone.ask_patience_ms",
                self.ask_patience_ms,
                "allowed: 100 to 600000 (10 minutes)",
            ));
        }
        if self.nak_max_backoff_us > 10_000_000 || self.retransmit_linger_us > 10_000_000 {
            return Err(invalid(
                "backbone.nak_max_backoff_us",
                self.nak_max_backoff_us.max(self.retransmit_linger_us),
                "allowed: up to 10000000 (10 s)",
            ));
        }
        Ok(())
    }

    /// The Aeron side's settings.
    pub fn link_config(&self) -> LinkConfig {
        let mut l = LinkConfig::new(&self.channel);
        if !self.request_channel.is_empty() {
            l.request_channel = self.request_channel.clone();
        }
        if !self.standby_channel.is_empty() {
            l.standby = Some((
                self.standby_channel.clone(),
                self.standby_request_channel.clone(),
            ));
        }
        l.data_stream = self.data_stream;
        l.request_stream = self.request_stream;
        l.files_up_stream = self.files_up_stream;
        l.files_channel = (!self.files_channel.is_empty()).then(|| self.files_channel.clone());
        l.files_flow_control =
            FilesFlowControl::parse(&self.files_flow_control).unwrap_or(FilesFlowControl::Slowest);
        l.term_length = self.term_length;
        l.mtu = self.mtu;
        l.idle = IdleStrategy::parse(&self.idle).unwrap_or(IdleStrategy::Adaptive);
        l.spin_limit = Duration::from_micros(self.spin_us);
        l.placement = DriverPlacement::parse(&self.driver).unwrap_or(DriverPlacement::EventLoop);
        l.max_park = Duration::from_micros(self.max_park_us);
        l.nak_max_backoff = Duration::from_micros(self.nak_max_backoff_us);
        l.retransmit_linger = Duration::from_micros(self.retransmit_linger_us);
        l.socket_buffer = self.socket_buffer_bytes;
        l.receiver_window = self.receiver_window();
        l.new_sessions_per_s = self.new_sessions_per_s;
        l.max_sessions_per_stream = self.max_sessions_per_stream;
        l
    }

    /// `receiver_window_bytes`, or by default half a term within the socket buffer.
    fn receiver_window(&self) -> usize {
        match self.receiver_window_bytes {
            0 => (self.term_length / 2).min(self.socket_buffer_bytes),
            w => w,
        }
    }

    /// One service's share of `max_asked`: `max_asked_per_service`, or by default a
    /// quarter of it (at least 1).
    pub fn max_asked_per_service(&self) -> usize {
        match self.max_asked_per_service {
            0 => (self.max_asked / 4).max(1),
            n => n,
        }
    }

    /// The largest data message a source builds: `batch_bytes`, or by default one
    /// datagram's payload (within Aeron's largest message, an eighth of a term), less
    /// the seal's trailer when the backbone is authenticated.
    pub fn batch_bytes(&self) -> usize {
        let trailer = if self.key_file.is_empty() {
            0
        } else {
            tickwire_backbone::auth::TRAILER_LEN
        };
        match self.batch_bytes {
            0 => {
                (self.mtu - tickwire_backbone::FRAME_HEADER_BYTES).min(self.term_length / 8)
                    - trailer
            }
            b => b - trailer,
        }
    }

    /// The key file, read (a node with a key file it cannot use does not start).
    pub fn key_file(
        &self,
        now: std::time::Instant,
    ) -> Result<Option<tickwire_backbone::KeyFile>, ConfigError> {
        if self.key_file.is_empty() {
            return Ok(None);
        }
        tickwire_backbone::KeyFile::load(std::path::Path::new(&self.key_file), now)
            .map(Some)
            .map_err(|e| invalid("backbone.key_file", format!("{:?}", self.key_file), &e))
    }

    /// The source role's settings, for a node named `node_name`.
    pub fn source_config(&self, node_name: &str) -> SourceConfig {
        SourceConfig {
            name: node_name.to_string(),
            heartbeat: Duration::from_millis(self.heartbeat_ms),
            tail_probe: Duration::from_micros(self.tail_probe_us),
            edge_timeout: Duration::from_millis(self.liveness_ms * 3),
            services: self.services.clone(),
            never: vec![crate::node_item::NODE_SERVICE.to_string()],
            batch_bytes: self.batch_bytes(),
            max_asked: self.max_asked,
            max_asked_per_service: self.max_asked_per_service(),
            ask_patience: Duration::from_millis(self.ask_patience_ms),
            ..SourceConfig::default()
        }
    }

    /// The edge role's settings, for a node named `node_name`.
    pub fn edge_config(&self, node_name: &str) -> EdgeConfig {
        EdgeConfig {
            name: node_name.to_string(),
            heartbeat: Duration::from_millis(self.heartbeat_ms),
            liveness: Duration::from_millis(self.liveness_ms),
            request_retry: Duration::from_millis(self.liveness_ms.max(500)),
            ..EdgeConfig::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge() -> BackboneSection {
        BackboneSection {
            role: "edge".into(),
            channel: "aeron:udp?endpoint=239.1.1.1:4000|interface=127.0.0.1".into(),
            ..BackboneSection::default()
        }
    }

    #[test]
    fn the_receiver_window_defaults_to_half_a_term_within_the_socket_buffer() {
        let l = edge().link_config();
        assert_eq!(l.socket_buffer, 2 << 20);
        assert_eq!(l.receiver_window, 2 << 20);
        assert_eq!(l.term_length, 4 << 20);
        let small = BackboneSection {
            term_length: 1 << 30,
            socket_buffer_bytes: 1 << 20,
            ..edge()
        };
        assert_eq!(small.link_config().receiver_window, 1 << 20);
        let set = BackboneSection {
            receiver_window_bytes: 65_536,
            ..edge()
        };
        assert_eq!(set.link_config().receiver_window, 65_536);
    }

    /// The source's pacing of its asks of the core: today's values by default, an
    /// operator's taken as set, and one service's share a quarter of the budget unless
    /// set.
    #[test]
    fn the_asks_of_the_core_are_paced_as_set() {
        let s = edge().source_config("n");
        assert_eq!(
            (s.max_asked, s.max_asked_per_service, s.ask_patience),
            (4096, 1024, Duration::from_secs(5))
        );
        let set = BackboneSection {
            max_asked: 100,
            max_asked_per_service: 7,
            ask_patience_ms: 1500,
            ..edge()
        };
        assert!(set.validate().is_ok());
        let s = set.source_config("n");
        assert_eq!(
            (s.max_asked, s.max_asked_per_service, s.ask_patience),
            (100, 7, Duration::from_millis(1500))
        );
        for (max_asked, share) in [(100, 25), (3, 1)] {
            let budget = BackboneSection {
                max_asked,
                ..edge()
            };
            assert!(budget.validate().is_ok());
            assert_eq!(budget.source_config("n").max_asked_per_service, share);
        }
    }

    #[test]
    fn asks_of_the_core_out_of_range_are_refused_by_key() {
        let refused = |b: BackboneSection, key: &str| match b.validate() {
            Err(ConfigError::Invalid { key: k, .. }) => assert_eq!(k, key),
            other => panic!("{key}: {other:?}"),
        };
        for max_asked in [0, 1_000_001] {
            refused(
                BackboneSection {
                    max_asked,
                    ..edge()
                },
                "backbone.max_asked",
            );
        }
        refused(
            BackboneSection {
                max_asked: 100,
                max_asked_per_service: 101,
                ..edge()
            },
            "backbone.max_asked_per_service",
        );
        for ask_patience_ms in [0, 99, 600_001] {
            refused(
                BackboneSection {
                    ask_patience_ms,
                    ..edge()
                },
                "backbone.ask_patience_ms",
            );
        }
        for ok in [
            BackboneSection {
                max_asked: 1,
                max_asked_per_service: 1,
                ask_patience_ms: 100,
                ..edge()
            },
            BackboneSection {
                max_asked: 1_000_000,
                max_asked_per_service: 1_000_000,
                ask_patience_ms: 600_000,
                ..edge()
            },
        ] {
            assert!(ok.validate().is_ok(), "{ok:?}");
        }
    }

    #[test]
    fn the_four_streams_must_differ() {
        assert!(edge().validate().is_ok());
        for (data, requests, files, up, key) in [
            (7, 7, 9, 10, "backbone.request_stream"),
            (7, 8, 7, 10, "backbone.files_stream"),
            (7, 8, 8, 10, "backbone.files_stream"),
            (7, 8, 9, 7, "backbone.files_up_stream"),
            (7, 8, 9, 8, "backbone.files_up_stream"),
            (7, 8, 9, 9, "backbone.files_up_stream"),
        ] {
            let b = BackboneSection {
                data_stream: data,
                request_stream: requests,
                files_stream: files,
                files_up_stream: up,
                ..edge()
            };
            match b.validate() {
                Err(ConfigError::Invalid { key: k, .. }) => assert_eq!(k, key),
                other => panic!("{key}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_files_channel_must_be_aeron_udp_apart_from_the_data() {
        assert_eq!(edge().link_config().files_channel, None);
        let named = BackboneSection {
            files_channel: "aeron:udp?endpoint=239.1.1.1:4100|interface=127.0.0.1".into(),
            ..edge()
        };
        assert!(named.validate().is_ok());
        assert_eq!(
            named.link_config().files_channel.as_deref(),
            Some("aeron:udp?endpoint=239.1.1.1:4100|interface=127.0.0.1")
        );
        for bad in [
            "aeron:udp?endpoint=239.1.1.1:4000|interface=127.0.0.1",
            "aeron:udp?endpoint=239.1.1.1:4000",
            "239.1.1.1:4100",
        ] {
            let b = BackboneSection {
                files_channel: bad.into(),
                ..edge()
            };
            match b.validate() {
                Err(ConfigError::Invalid { key, .. }) => assert_eq!(key, "backbone.files_channel"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    #[test]
    fn files_follow_the_slowest_edge_by_default_and_an_unknown_pace_is_refused() {
        assert_eq!(
            edge().link_config().files_flow_control,
            FilesFlowControl::Slowest
        );
        let fastest = BackboneSection {
            files_flow_control: "fastest".into(),
            ..edge()
        };
        assert_eq!(
            fastest.link_config().files_flow_control,
            FilesFlowControl::Fastest
        );
        let min = BackboneSection {
            files_flow_control: "min".into(),
            ..edge()
        };
        match min.validate() {
            Err(e @ ConfigError::Invalid { .. }) => {
                assert!(e.to_string().contains("slowest, fastest"), "{e}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn socket_buffers_and_windows_out_of_range_are_refused_by_key() {
        let refused = |b: BackboneSection, key: &str| match b.validate() {
            Err(ConfigError::Invalid { key: k, .. }) => assert_eq!(k, key),
            other => panic!("{key}: {other:?}"),
        };
        refused(
            BackboneSection {
                socket_buffer_bytes: 1024,
                ..edge()
            },
            "backbone.socket_buffer_bytes",
        );
        // More than half a term, and more than the socket buffer.
        refused(
            BackboneSection {
                receiver_window_bytes: 4 << 20,
                ..edge()
            },
            "backbone.receiver_window_bytes",
        );
        refused(
            BackboneSection {
                term_length: 1 << 24,
                receiver_window_bytes: 4 << 20,
                ..edge()
            },
            "backbone.receiver_window_bytes",
        );
        assert!(BackboneSection {
            receiver_window_bytes: 256 << 10,
            ..edge()
        }
        .validate()
        .is_ok());
    }
    #[test]
    fn the_mtu_defaults_to_an_ethernet_frame_and_must_fit_aeron_and_the_window() {
        assert_eq!(edge().link_config().mtu, 1408);
        let jumbo = BackboneSection {
            mtu: 8192,
            ..edge()
        };
        assert!(jumbo.validate().is_ok());
        assert_eq!(jumbo.link_config().mtu, 8192);
        for (mtu, window, why) in [
            (1000, 0, "a multiple of 32"),
            (65_536, 0, "to 65504"),
            (256, 0, "from 512"),
            (8192, 4096, "larger than the receiver window"),
        ] {
            let b = BackboneSection {
                mtu,
                receiver_window_bytes: window,
                ..edge()
            };
            match b.validate() {
                Err(ConfigError::Invalid { key, reason, .. }) => {
                    assert_eq!(key, "backbone.mtu", "{mtu}");
                    assert!(reason.contains(why), "{mtu}: {reason}");
                }
                other => panic!("{mtu}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_batch_fills_one_datagram_unless_told_otherwise() {
        assert_eq!(edge().batch_bytes(), 1376);
        let jumbo = BackboneSection {
            mtu: 8192,
            ..edge()
        };
        assert_eq!(jumbo.batch_bytes(), 8160);
        let set = BackboneSection {
            batch_bytes: 1000,
            ..jumbo.clone()
        };
        assert_eq!(set.batch_bytes(), 1000);
        match (BackboneSection {
            batch_bytes: 70_000,
            ..jumbo.clone()
        })
        .validate()
        {
            Err(ConfigError::Invalid { key, .. }) => assert_eq!(key, "backbone.batch_bytes"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_driver_runs_in_the_event_loop_unless_told_to_have_a_thread() {
        assert_eq!(edge().link_config().placement, DriverPlacement::EventLoop);
        let own = BackboneSection {
            driver: "thread".into(),
            ..edge()
        };
        assert!(own.validate().is_ok());
        assert_eq!(own.link_config().placement, DriverPlacement::Thread);
        match (BackboneSection {
            driver: "dedicated".into(),
            ..edge()
        })
        .validate()
        {
            Err(ConfigError::Invalid { key, reason, .. }) => {
                assert_eq!(key, "backbone.driver");
                assert!(reason.contains("event-loop, thread"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
}
