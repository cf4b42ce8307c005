//! Session tokens: what `POST /getToken` on a node's WebSocket/HTTP port hands out once
//! a user's password checked out, so the WebSocket upgrade that follows can log in with
//! a cookie (`AuthToken=...`) instead of the password.
//!
//! A token is 32 bytes from the operating system's CSPRNG, written as 64 hex digits. The
//! store keeps only its SHA-256 (a memory dump of the node yields no usable token, and a
//! lookup compares hashes, so its timing says nothing about the token), the user it
//! stands for and when it expires. It holds at most `max` tokens: issuing one more first
//! drops the expired ones, then the oldest. Lookups and issues are O(1) amortised, so
//! the store can live on the node's event loop; the password check that precedes an
//! issue must not (it is argon2: the node runs it on its verification thread).

use argon2::password_hash::rand_core::{OsRng, RngCore};
use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

type Key = [u8; 32];

struct Entry {
    user: String,
    expires: Instant,
}

/// The session tokens a node has issued and that have not expired or been revoked.
pub struct SessionTokens {
    by_key: FxHashMap<Key, Entry>,
    /// Keys in the order they were issued, which is the order they expire in (one
    /// lifetime for all). Keys revoked early stay here until they reach the front.
    order: VecDeque<(Key, Instant)>,
    max: usize,
}

fn key_of(token: &str) -> Key {
    Sha256::digest(token.as_bytes()).into()
}

impl SessionTokens {
    /// A store holding at most `max` tokens (at least one).
    pub fn new(max: usize) -> Self {
        SessionTokens {
            by_key: FxHashMap::default(),
            order: VecDeque::new(),
            max: max.max(1),
        }
    }

    /// Tokens held.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// No token is live.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// A new token for `user`, valid for `lifetime` from `now`. When the store is full
    /// the oldest token goes: a token is needed only to open a connection, so losing
    /// an old one costs its holder a new `/getToken` at worst, while refusing new ones
    /// would let one user lock everyone else out.
    pub fn issue(&mut self, user: &str, lifetime: Duration, now: Instant) -> String {
        self.expire(now);
        while self.by_key.len() >= self.max {
            match self.order.pop_front() {
                Some((key, _)) => {
                    self.by_key.remove(&key);
                }
                None => break,
            }
        }
        let mut bytes = [0u8; 32];
        OsRng.fill_bytes(&mut bytes);
        let token = hex::encode(bytes);
        let key = key_of(&token);
        let expires = now + lifetime;
        self.by_key.insert(
            key,
            Entry {
                user: user.to_string(),
                expires,
            },
        );
        self.order.push_back((key, expires));
        self.compact();
        token
    }

    /// The user a token stands for, if it is known and has not expired.
    pub fn user_of(&mut self, token: &str, now: Instant) -> Option<&str> {
        self.expire(now);
        let key = key_of(token);
        match self.by_key.get(&key) {
            Some(e) if now < e.expires => self.by_key.get(&key).map(|e| e.user.as_str()),
            Some(_) => {
                self.by_key.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Drops the tokens expired at `now` (from the front of the issue order: O(1) when
    /// none is due).
    pub fn expire(&mut self, now: Instant) {
        while let Some(&(key, expires)) = self.order.front() {
            if now < expires {
                break;
            }
            self.order.pop_front();
            if self.by_key.get(&key).is_some_and(|e| e.expires == expires) {
                self.by_key.remove(&key);
            }
        }
    }

    /// Revokes every token whose user `keep` refuses (a users file reloaded without
    /// that user, or with the user changed). Returns the users whose tokens went, each
    /// with how many.
    pub fn revoke_unless(&mut self, keep: impl Fn(&str) -> bool) -> Vec<(String, usize)> {
        let mut gone: FxHashMap<String, usize> = FxHashMap::default();
        self.by_key.retain(|_, e| {
            let k = keep(&e.user);
            if !k {
                *gone.entry(e.user.clone()).or_default() += 1;
            }
            k
        });
        self.compact();
        let mut gone: Vec<(String, usize)> = gone.into_iter().collect();
        gone.sort();
        gone
    }

    /// Keeps the issue order within twice the tokens held: revoked keys would otherwise
    /// wait there until their expiry.
    fn compact(&mut self) {
        if self.order.len() > 2 * self.by_key.len() + 16 {
            let by_key = &self.by_key;
            self.order
                .retain(|(k, exp)| by_key.get(k).is_some_and(|e| e.expires == *exp));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn a_token_is_random_hex_and_names_its_user_until_it_expires() {
        let t0 = Instant::now();
        let mut s = SessionTokens::new(10);
        let a = s.issue("alice", HOUR, t0);
        let b = s.issue("alice", HOUR, t0);
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()), "{a}");
        assert_ne!(a, b, "two tokens are never the same");
        assert_eq!(s.user_of(&a, t0 + HOUR / 2), Some("alice"));
        assert_eq!(s.user_of("0".repeat(64).as_str(), t0), None);
        assert_eq!(s.user_of(&a, t0 + HOUR), None, "expired at its lifetime");
        assert!(s.is_empty(), "expired tokens are dropped");
    }

    #[test]
    fn the_store_is_bounded_and_the_oldest_token_goes_first() {
        let t0 = Instant::now();
        let mut s = SessionTokens::new(3);
        let tokens: Vec<String> = (0..5)
            .map(|i| s.issue(&format!("u{i}"), HOUR, t0 + Duration::from_secs(i)))
            .collect();
        assert_eq!(s.len(), 3);
        let now = t0 + Duration::from_secs(10);
        assert_eq!(s.user_of(&tokens[0], now), None);
        assert_eq!(s.user_of(&tokens[1], now), None);
        assert_eq!(s.user_of(&tokens[4], now), Some("u4"));
    }

    #[test]
    fn revoked_tokens_stop_working_and_the_order_stays_bounded() {
        let t0 = Instant::now();
        let mut s = SessionTokens::new(100);
        let a = s.issue("alice", HOUR, t0);
        let b = s.issue("bob", HOUR, t0);
        assert_eq!(s.revoke_unless(|u| u != "alice"), vec![("alice".into(), 1)]);
        assert_eq!(s.user_of(&a, t0), None);
        assert_eq!(s.user_of(&b, t0), Some("bob"));
        // Issued and revoked over and over: the issue order does not grow with it.
        for _ in 0..1000 {
            s.issue("alice", HOUR, t0);
            s.revoke_unless(|u| u != "alice");
        }
        assert!(s.order.len() <= 2 * s.len() + 17, "{}", s.order.len());
    }
}
