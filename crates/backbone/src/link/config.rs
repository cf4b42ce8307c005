//! The link's settings (`[backbone]` in the node's TOML) and its Aeron channels: where
//! the data, the requests and the files go, and where an edge listens.

use crate::{BackboneError, IdleStrategy};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Which thread runs the embedded media driver's duty cycle and the backbone's
/// receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverPlacement {
    /// The node's event loop, between its turns: a received message is handled by the
    /// thread that received it (no hand-over, no wake-up of a sleeping event loop),
    /// and what the event loop offers is sent in the same turn. The event loop then
    /// never blocks: it waits by the idle strategy. One busy thread per node.
    EventLoop,
    /// A thread of its own, which wakes the event loop when messages arrive; the event
    /// loop may block. Two threads per node, one of them busy.
    Thread,
}

impl DriverPlacement {
    /// A transport from its config spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "event-loop" => DriverPlacement::EventLoop,
            "thread" => DriverPlacement::Thread,
            _ => return None,
        })
    }
}

/// Whose pace a source's files publication follows when its edges take files at
/// different speeds (Aeron's flow control of that publication).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilesFlowControl {
    /// The slowest edge still answering (Aeron's `min` flow control): every edge gets
    /// every chunk once and none falls so far behind that it must ask for data the
    /// source no longer has. An edge silent for [`FILES_EDGE_TIMEOUT`] (gone, or its
    /// driver stopped) leaves the group, so a dead site holds the others that long
    /// at most; a site whose node cannot take the network's pace slows the others.
    Slowest,
    /// The fastest edge (Aeron's default for multicast): an edge that falls behind
    /// loses what the source has overwritten, asks for it again (NAKs, retransmissions
    /// to every edge, then the files layer's repairs) and slows every site with them.
    Fastest,
}

/// With [`FilesFlowControl::Slowest`]: how long an edge that stopped answering still
/// holds the files publication's pace.
pub const FILES_EDGE_TIMEOUT: Duration = Duration::from_secs(2);

impl FilesFlowControl {
    /// Every spelling `parse` takes, for error messages.
    pub const NAMES: &'static str = "slowest, fastest";

    /// A flow control from its config spelling.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "slowest" => FilesFlowControl::Slowest,
            "fastest" => FilesFlowControl::Fastest,
            _ => return None,
        })
    }

    /// Its config spelling.
    pub fn name(self) -> &'static str {
        match self {
            FilesFlowControl::Slowest => "slowest",
            FilesFlowControl::Fastest => "fastest",
        }
    }

    /// The files publication's channel: the data channel with this flow control, unless
    /// the channel names one itself (the operator's choice stands).
    pub fn channel(self, data_channel: &str) -> String {
        if channel_param(data_channel, "fc").is_some() {
            return data_channel.to_string();
        }
        match self {
            FilesFlowControl::Fastest => data_channel.to_string(),
            FilesFlowControl::Slowest => format!(
                "{data_channel}|fc=min,t:{}ms",
                FILES_EDGE_TIMEOUT.as_millis()
            ),
        }
    }
}

/// Aeron's default datagram payload: a 1,500-byte Ethernet frame less the IP and UDP
/// headers, rounded down to Aeron's 32-byte frame alignment.
pub const DEFAULT_MTU: usize = 1408;

/// Aeron's data frame header, which each message carries inside a datagram.
pub const FRAME_HEADER_BYTES: usize = 32;

/// Where the node's Aeron traffic goes and how the embedded driver behaves.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    /// Aeron channel of the backbone, e.g.
    /// `aeron:udp?endpoint=239.20.30.40:40456|interface=127.0.0.1`.
    pub channel: String,
    /// Aeron channel the edges' requests travel on (the same channel by default).
    pub request_channel: String,
    /// Aeron stream id of the data.
    pub data_stream: i32,
    /// Aeron stream id of the requests.
    pub request_stream: i32,
    /// Aeron stream id of file transfer: from the sources to the edges on the data
    /// channel, and from an edge to the sources on the request channel; None where the
    /// node takes part in no files service. A publication of its own: Aeron's flow
    /// control and the driver's sender then treat files and market data (or requests)
    /// apart (the sender takes a datagram from each publication in turn), so a file's
    /// chunks never queue market data behind them and a file backlog's back pressure
    /// refuses only more chunks.
    pub files_stream: Option<i32>,
    /// Aeron stream id of file transfer from an edge to the sources, on the request
    /// channel (with `files_stream` only): apart from the sources' files, which may
    /// share that channel, so no edge reads another edge's files.
    pub files_up_stream: i32,
    /// Aeron channel of the sources' files (with `files_stream`); None: the data
    /// channel's port plus one ([`files_channel_of`]). A standby source's files come
    /// on its data channel's port plus one.
    pub files_channel: Option<String>,
    /// Whose pace the files publication follows.
    pub files_flow_control: FilesFlowControl,
    /// Publish data (source role).
    pub source: bool,
    /// Receive data (edge role).
    pub edge: bool,
    /// An edge's hot-standby source where there is no multicast: its data channel
    /// (multi-destination-cast) and its request channel (unicast). The edge receives
    /// both sources, and its requests go to both.
    pub standby: Option<(String, String)>,
    /// How the thread running the driver waits.
    pub idle: IdleStrategy,
    /// With `IdleStrategy::Adaptive`: the longest pause polled through while work keeps
    /// coming ([`crate::SpinThenPark`]).
    pub spin_limit: Duration,
    /// Which thread runs the driver and the receiver.
    pub placement: DriverPlacement,
    /// With `IdleStrategy::Backoff`: the longest sleep of the idle driver thread.
    pub max_park: Duration,
    /// Aeron term buffer length (a power of two, 64 KiB to 1 GiB); a publication's log
    /// is three terms.
    pub term_length: usize,
    /// Largest datagram payload the node's publications send (Aeron's MTU: a multiple
    /// of 32, at most 65504). Each datagram costs one trip through the kernel at both
    /// ends, so larger ones carry more updates per trip where the network takes them.
    pub mtu: usize,
    /// Aeron's multicast NAK back-off ceiling.
    pub nak_max_backoff: Duration,
    /// How long a retransmission's data lingers before it may be sent again.
    pub retransmit_linger: Duration,
    /// How long an image without data (a source gone) lives in the driver.
    pub image_liveness: Duration,
    /// SO_RCVBUF and SO_SNDBUF of the driver's UDP sockets (the kernel caps them at
    /// net.core.rmem_max and wmem_max).
    pub socket_buffer: usize,
    /// How far a source may send ahead of what an edge's driver has taken (Aeron's
    /// receiver window; at most `socket_buffer`, and Aeron uses at most half a term).
    pub receiver_window: usize,
    /// Directory under which the driver makes its own (`/dev/shm` when present).
    pub driver_base: PathBuf,
    /// New Aeron sessions (SETUPs of senders not heard yet) the driver takes per
    /// second, at most (the SETUP guard, `setup_guard.rs`).
    pub new_sessions_per_s: u32,
    /// Aeron images (senders) per stream the driver keeps at most (Aeron's stream
    /// session limit).
    pub max_sessions_per_stream: u32,
}

impl LinkConfig {
    /// Settings for `channel`, with the defaults.
    pub fn new(channel: &str) -> Self {
        LinkConfig {
            channel: channel.to_string(),
            request_channel: channel.to_string(),
            data_stream: 1001,
            request_stream: 1002,
            files_stream: None,
            files_up_stream: 1004,
            files_channel: None,
            files_flow_control: FilesFlowControl::Slowest,
            source: false,
            edge: false,
            standby: None,
            idle: IdleStrategy::Adaptive,
            spin_limit: Duration::from_micros(2000),
            placement: DriverPlacement::EventLoop,
            max_park: Duration::from_millis(1),
            term_length: 4 << 20,
            mtu: DEFAULT_MTU,
            nak_max_backoff: Duration::from_micros(100),
            retransmit_linger: Duration::from_millis(1),
            image_liveness: Duration::from_secs(2),
            socket_buffer: 2 << 20,
            receiver_window: 2 << 20,
            driver_base: default_driver_base(),
            new_sessions_per_s: 50,
            max_sessions_per_stream: 256,
        }
    }
}

/// Aeron sends a multicast channel's data to an odd group address and its control
/// messages to the next one, and refuses an even data address. A channel naming an
/// even group (`239.20.30.40`) is taken to name that pair's control group: its data
/// goes to the odd group just below (`239.20.30.39`). Returns the channel Aeron gets
/// and, when it differs, a sentence saying so.
pub fn aeron_channel(channel: &str) -> (String, Option<String>) {
    let Some(start) = channel.find("endpoint=") else {
        return (channel.to_string(), None);
    };
    let at = start + "endpoint=".len();
    let end = channel[at..]
        .find(['|', ':'])
        .map_or(channel.len(), |i| at + i);
    let Ok(ip) = channel[at..end].parse::<std::net::Ipv4Addr>() else {
        return (channel.to_string(), None);
    };
    let o = ip.octets();
    if !ip.is_multicast() || o[3] % 2 == 1 || o[3] == 0 {
        return (channel.to_string(), None);
    }
    let data = std::net::Ipv4Addr::new(o[0], o[1], o[2], o[3] - 1);
    let out = format!("{}{}{}", &channel[..at], data, &channel[end..]);
    let note = format!(
        "multicast group {ip} is even: Aeron sends data to an odd group and control to the next one, so data goes to {data} and control to {ip}"
    );
    (out, Some(note))
}

/// The value of parameter `key` of an Aeron UDP channel (`aeron:udp?k=v|k=v`).
pub fn channel_param<'a>(channel: &'a str, key: &str) -> Option<&'a str> {
    let params = channel.split_once('?')?.1;
    params
        .split('|')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// The channel of the sources' files when the config names none: `data_channel` with
/// the port of its `endpoint` and of its `control` address one higher (an `endpoint`
/// port 0, the edge's own choice, stays 0). Files need a UDP endpoint of their own:
/// Aeron's C driver takes a publication's flow control from the first channel opened
/// on its endpoint, so on the data's endpoint the files would follow the fastest
/// edge whatever `files_flow_control` says; and their own socket gives them their own
/// receiver window and buffers.
pub fn files_channel_of(data_channel: &str) -> Result<String, BackboneError> {
    let bad = |detail: String| BackboneError::Channel {
        what: "files channel (the data channel's port plus one)",
        channel: data_channel.to_string(),
        detail,
    };
    let Some((head, params)) = data_channel.split_once('?') else {
        return Err(bad("no parameters: name backbone.files_channel".into()));
    };
    let mut shifted = 0;
    let mut out = Vec::new();
    for kv in params.split('|') {
        match kv.split_once('=') {
            Some((key @ ("endpoint" | "control"), addr)) => {
                let (host, port) = addr
                    .rsplit_once(':')
                    .ok_or_else(|| bad(format!("{key} {addr:?} has no port")))?;
                let port: u16 = port
                    .parse()
                    .map_err(|_| bad(format!("{key} {addr:?}: the port is not a number")))?;
                let port = match port {
                    0 => 0,
                    u16::MAX => return Err(bad(format!("{key} {addr:?}: no port above it"))),
                    p => p + 1,
                };
                out.push(format!("{key}={host}:{port}"));
                shifted += 1;
            }
            _ => out.push(kv.to_string()),
        }
    }
    if shifted == 0 {
        return Err(bad(
            "neither an endpoint nor a control address: name backbone.files_channel".into(),
        ));
    }
    Ok(format!("{head}?{}", out.join("|")))
}

/// The channel the files of the node's source (`standby`: None), or of an edge's
/// standby source (its data channel), come on, as Aeron gets it.
pub(super) fn files_channel(
    cfg: &LinkConfig,
    standby: Option<&str>,
) -> Result<String, BackboneError> {
    let named = match (standby, &cfg.files_channel) {
        (None, Some(named)) => named.clone(),
        (None, None) => files_channel_of(&cfg.channel)?,
        (Some(data), _) => files_channel_of(data)?,
    };
    Ok(aeron_channel(&named).0)
}

/// Whether `channel` is a multi-destination-cast one: the source publishes to every
/// edge that joins (`control=SOURCE:PORT|control-mode=dynamic`), with no multicast.
pub fn is_dynamic_mdc(channel: &str) -> bool {
    channel_param(channel, "control-mode") == Some("dynamic")
        && channel_param(channel, "control").is_some()
}

/// The channel an edge receives a multi-destination-cast source on: `channel` with
/// `endpoint=THIS_HOST:0` added (the edge's driver binds a port of its own and tells
/// the source's control address, which then sends to it). THIS_HOST is the channel's
/// `interface` if it has one, else the address this host reaches the source from.
/// Any other channel is returned as it is.
pub fn edge_data_channel(channel: &str) -> Result<String, BackboneError> {
    if !is_dynamic_mdc(channel) || channel_param(channel, "endpoint").is_some() {
        return Ok(channel.to_string());
    }
    let bad = |detail: String| BackboneError::Channel {
        what: "multi-destination-cast data subscription",
        channel: channel.to_string(),
        detail,
    };
    let host = match channel_param(channel, "interface") {
        Some(i) => i.split('/').next().unwrap_or(i).to_string(),
        None => {
            let control = channel_param(channel, "control").unwrap_or_default();
            let to = std::net::ToSocketAddrs::to_socket_addrs(control)
                .map_err(|e| bad(format!("control address {control:?}: {e}")))?
                .next()
                .ok_or_else(|| bad(format!("control address {control:?} resolves to nothing")))?;
            let any: std::net::SocketAddr = if to.is_ipv4() {
                "0.0.0.0:0".parse().expect("literal")
            } else {
                "[::]:0".parse().expect("literal")
            };
            let probe = std::net::UdpSocket::bind(any)
                .and_then(|s| s.connect(to).and_then(|_| s.local_addr()))
                .map_err(|e| bad(format!("no route to the source at {to}: {e}")))?;
            match probe.ip() {
                std::net::IpAddr::V6(ip) => format!("[{ip}]"),
                ip => ip.to_string(),
            }
        }
    };
    Ok(format!("{channel}|endpoint={host}:0"))
}

fn default_driver_base() -> PathBuf {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

#[cfg(test)]
mod channel_tests {
    use super::{aeron_channel, edge_data_channel, is_dynamic_mdc, FilesFlowControl};

    #[test]
    fn an_edge_on_a_multi_destination_cast_channel_gets_an_endpoint_of_its_own() {
        let mdc = "aeron:udp?control=127.0.0.1:40456|control-mode=dynamic";
        assert!(is_dynamic_mdc(mdc));
        assert_eq!(
            edge_data_channel(mdc).unwrap(),
            format!("{mdc}|endpoint=127.0.0.1:0")
        );
        // The interface, when the channel names one.
        let with_if = "aeron:udp?control=127.0.0.1:40456|control-mode=dynamic|interface=127.0.0.2";
        assert!(edge_data_channel(with_if)
            .unwrap()
            .ends_with("|endpoint=127.0.0.2:0"));
        // An endpoint already given, multicast and plain unicast: unchanged.
        for ch in [
            "aeron:udp?control=127.0.0.1:40456|control-mode=dynamic|endpoint=127.0.0.1:40500",
            "aeron:udp?endpoint=239.20.30.41:40456|interface=127.0.0.1",
            "aeron:udp?endpoint=127.0.0.1:40456",
        ] {
            assert_eq!(edge_data_channel(ch).unwrap(), ch);
        }
        assert!(!is_dynamic_mdc("aeron:udp?endpoint=127.0.0.1:40456"));
        assert!(
            edge_data_channel("aeron:udp?control=no-such-host.invalid:1|control-mode=dynamic")
                .is_err()
        );
    }

    #[test]
    fn an_even_multicast_group_is_the_control_group_of_the_odd_one_below() {
        let (ch, note) = aeron_channel("aeron:udp?endpoint=239.20.30.40:40456|interface=127.0.0.1");
        assert_eq!(
            ch,
            "aeron:udp?endpoint=239.20.30.39:40456|interface=127.0.0.1"
        );
        assert!(note.unwrap().contains("239.20.30.39"));
        for same in [
            "aeron:udp?endpoint=239.20.30.41:40456|interface=127.0.0.1",
            "aeron:udp?endpoint=127.0.0.2:40456",
            "aeron:udp?endpoint=localhost:40456",
            "aeron:ipc",
            "aeron:udp?control=127.0.0.1:4000|control-mode=dynamic",
        ] {
            assert_eq!(aeron_channel(same), (same.to_string(), None));
        }
    }

    #[test]
    fn the_files_publication_follows_the_slowest_edge_unless_the_channel_says_otherwise() {
        let ch = "aeron:udp?endpoint=239.20.30.39:40456|interface=127.0.0.1";
        assert_eq!(
            FilesFlowControl::Slowest.channel(ch),
            format!("{ch}|fc=min,t:2000ms")
        );
        assert_eq!(FilesFlowControl::Fastest.channel(ch), ch);
        let own = "aeron:udp?endpoint=239.20.30.39:40456|fc=tagged,g:7";
        for fc in [FilesFlowControl::Slowest, FilesFlowControl::Fastest] {
            assert_eq!(fc.channel(own), own);
            assert_eq!(FilesFlowControl::parse(fc.name()), Some(fc));
        }
        assert_eq!(FilesFlowControl::parse("min"), None);
    }
}

#[cfg(test)]
mod files_channel_tests {
    use super::{files_channel, files_channel_of, LinkConfig};

    #[test]
    fn the_files_go_one_port_above_the_data() {
        let multicast = "aeron:udp?endpoint=239.1.1.1:4000|interface=127.0.0.1";
        assert_eq!(
            files_channel_of(multicast).unwrap(),
            "aeron:udp?endpoint=239.1.1.1:4001|interface=127.0.0.1"
        );
        // Multi-destination-cast: the source's control port; an edge's own port 0
        // stays its own choice.
        assert_eq!(
            files_channel_of("aeron:udp?control=10.0.0.5:40456|control-mode=dynamic").unwrap(),
            "aeron:udp?control=10.0.0.5:40457|control-mode=dynamic"
        );
        assert_eq!(
            files_channel_of("aeron:udp?control=[::1]:40456|control-mode=dynamic|endpoint=[::1]:0")
                .unwrap(),
            "aeron:udp?control=[::1]:40457|control-mode=dynamic|endpoint=[::1]:0"
        );
        for bad in [
            "aeron:ipc",
            "aeron:udp?control-mode=manual",
            "aeron:udp?endpoint=239.1.1.1:65535",
            "aeron:udp?endpoint=239.1.1.1",
        ] {
            let e = files_channel_of(bad).unwrap_err().to_string();
            assert!(e.contains("files channel"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_named_files_channel_stands_and_a_standby_sends_on_its_own_port_above() {
        let mut cfg = LinkConfig::new("aeron:udp?endpoint=239.1.1.1:4000|interface=127.0.0.1");
        // An even group is Aeron's control group: the data go to the odd one below.
        cfg.files_channel = Some("aeron:udp?endpoint=239.1.1.4:5000".into());
        assert_eq!(
            files_channel(&cfg, None).unwrap(),
            "aeron:udp?endpoint=239.1.1.3:5000"
        );
        assert_eq!(
            files_channel(
                &cfg,
                Some("aeron:udp?control=10.0.0.8:40456|control-mode=dynamic")
            )
            .unwrap(),
            "aeron:udp?control=10.0.0.8:40457|control-mode=dynamic"
        );
    }
}
