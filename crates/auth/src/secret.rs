//! Secrets as the users file keeps them: a password as an argon2id hash (PHC string,
//! salted, slow to guess), or a token as its SHA-256 (tokens are long and random, so a
//! fast hash is enough and keeps their check cheap).

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Secret {
    /// An argon2 PHC string (`$argon2id$v=19$m=...,t=...,p=...$salt$hash`).
    Password(String),
    /// SHA-256 of the token.
    Token([u8; 32]),
}

/// A secret's hash that cannot be read or made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecretError {
    /// Not an argon2 password hash.
    #[error(
        "not an argon2 password hash (a \"$argon2id$...\" string from `tickwire users hash`): {0}"
    )]
    BadPasswordHash(String),
    /// Not a token hash.
    #[error("not a token hash: expected \"sha256:\" and 64 hex digits (from `tickwire users hash --token`)")]
    BadTokenHash,
    /// Hashing failed.
    #[error("cannot hash: {0}")]
    Hash(String),
}

/// Hashes a password for the users file: argon2id with the library's default cost and
/// a random salt.
pub fn hash_password(password: &str) -> Result<String, SecretError> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| SecretError::Hash(e.to_string()))
}

/// Hashes a token for the users file: `sha256:` and 64 hex digits.
pub fn hash_token(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    format!("sha256:{}", hex::encode(digest))
}

impl Secret {
    pub(crate) fn password(phc: &str) -> Result<Secret, SecretError> {
        let parsed =
            PasswordHash::new(phc).map_err(|e| SecretError::BadPasswordHash(e.to_string()))?;
        if !parsed.algorithm.as_str().starts_with("argon2") {
            return Err(SecretError::BadPasswordHash(format!(
                "algorithm {}",
                parsed.algorithm
            )));
        }
        Ok(Secret::Password(phc.to_string()))
    }

    pub(crate) fn token(text: &str) -> Result<Secret, SecretError> {
        let digits = text
            .strip_prefix("sha256:")
            .ok_or(SecretError::BadTokenHash)?;
        if digits.len() != 64 {
            return Err(SecretError::BadTokenHash);
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(digits, &mut out).map_err(|_| SecretError::BadTokenHash)?;
        Ok(Secret::Token(out))
    }

    pub(crate) fn matches(&self, given: &str) -> bool {
        match self {
            Secret::Password(phc) => match PasswordHash::new(phc) {
                Ok(h) => Argon2::default()
                    .verify_password(given.as_bytes(), &h)
                    .is_ok(),
                Err(_) => false,
            },
            Secret::Token(want) => {
                let got = Sha256::digest(given.as_bytes());
                // Constant time: every byte compared whatever differs first.
                got.iter().zip(want).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
            }
        }
    }

    /// Spends about what checking a password costs, for an unknown user.
    pub(crate) fn burn_time(given: &str) {
        static DUMMY: OnceLock<Option<Secret>> = OnceLock::new();
        let dummy = DUMMY.get_or_init(|| {
            hash_password("tickwire: not a user")
                .ok()
                .and_then(|h| Secret::password(&h).ok())
        });
        if let Some(d) = dummy {
            let _ = d.matches(given);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hashed_token_matches_its_token_and_no_other() {
        let secret = Secret::token(&hash_token("s3cret")).expect("a hash we wrote reads back");
        assert!(secret.matches("s3cret"));
        assert!(!secret.matches("s3cret "));
    }

    #[test]
    fn a_token_hash_is_64_hex_digits_and_nothing_else() {
        let good = hash_token("x");
        let digits = &good["sha256:".len()..];
        for bad in [
            digits.to_string(),                    // no prefix
            format!("sha256:{}", &digits[..62]),   // short
            format!("sha256:{digits}00"),          // long
            format!("sha256:{}zz", &digits[2..]),  // not hex
            format!("sha256:{}", "+f".repeat(32)), // a sign is not a digit
        ] {
            assert!(
                matches!(Secret::token(&bad), Err(SecretError::BadTokenHash)),
                "{bad} was taken"
            );
        }
    }
}
