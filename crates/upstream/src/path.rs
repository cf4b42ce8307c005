//! Node identities and the chain of nodes a node is fed from.

use std::fmt;

pub use tickwire_proto::{parse_node_login, NODE_LOGIN_PREFIX};

/// A chain of nodes, nearest first: a node's own entry, then its upstream's, and so on
/// to the top. Written `name#id>name#id` (ids in hex) in the `TW_PATH` field of the
/// `TICKWIRE/NODE` item.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodePath(pub Vec<(u64, String)>);

/// Longest chain read from a peer: more is junk (or a loop that went round).
const MAX_DEPTH: usize = 64;

impl NodePath {
    /// Reads a chain as [`fmt::Display`] writes it (`name#hexid>name#hexid`); `None`
    /// for text that is not one. Chains longer than 64 nodes are cut.
    pub fn parse(text: &str) -> Option<NodePath> {
        if text.is_empty() {
            return Some(NodePath::default());
        }
        let mut v = Vec::new();
        for part in text.split('>').take(MAX_DEPTH) {
            let (name, id) = part.rsplit_once('#')?;
            v.push((u64::from_str_radix(id, 16).ok()?, name.to_string()));
        }
        Some(NodePath(v))
    }

    /// Whether the node `id` is in the chain (a loop, when it is this node).
    pub fn contains(&self, id: u64) -> bool {
        self.0.iter().any(|(i, _)| *i == id)
    }

    /// This chain with a node in front (a `>` in its name, the separator, becomes `_`).
    pub fn below(&self, id: u64, name: &str) -> NodePath {
        let mut v = vec![(id, name.replace('>', "_"))];
        v.extend(self.0.iter().take(MAX_DEPTH - 1).cloned());
        NodePath(v)
    }

    /// The chain's node ids, nearest first.
    pub fn ids(&self) -> Vec<u64> {
        self.0.iter().map(|(i, _)| *i).collect()
    }
}

impl fmt::Display for NodePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (id, name)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(">")?;
            }
            write!(f, "{name}#{id:016x}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_reads_back_as_written_and_junk_is_refused() {
        let p = NodePath::default().below(2, "b").below(1, "a#x");
        let text = p.to_string();
        assert_eq!(text, "a#x#0000000000000001>b#0000000000000002");
        assert_eq!(NodePath::parse(&text), Some(p.clone()));
        assert!(p.contains(2) && !p.contains(3));
        assert_eq!(NodePath::parse(""), Some(NodePath::default()));
        assert_eq!(NodePath::parse("nohash"), None);
        assert_eq!(NodePath::parse("a#zz"), None);
        assert_eq!(
            parse_node_login("tickwire-node/00000000000000ff/x"),
            Some(255)
        );
        assert_eq!(parse_node_login("tickwire-client"), None);
    }

    proptest::proptest! {
        /// What a peer's figures item says is read, never trusted: any text parses to
        /// a bounded chain or to nothing, without panicking.
        #[test]
        fn any_text_reads_as_a_bounded_chain_or_nothing(text in ".{0,600}") {
            if let Some(p) = NodePath::parse(&text) {
                proptest::prop_assert!(p.0.len() <= MAX_DEPTH);
            }
        }

        #[test]
        fn a_written_chain_reads_back(ids in proptest::collection::vec((0u64.., "[a-z#>]{0,12}"), 0..80)) {
            let mut p = NodePath::default();
            for (id, name) in ids.iter().rev() {
                p = p.below(*id, name);
            }
            proptest::prop_assert_eq!(NodePath::parse(&p.to_string()), Some(p));
        }
    }
}
