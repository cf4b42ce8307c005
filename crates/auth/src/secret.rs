//! Secrets as the users file keeps them: a password as an argon2id hash (PHC string,
//! salted, slow to guess), or a token as its SHA-256 (tokens are long and random, so a
//! fast hash is enough and keeps their check cheap).

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

/// The shortest argon2 output a password hash may hold.
const MIN_HASH_BYTES: usize = 16;

/// The most an argon2 hash in the users file may cost: memory in KiB (256 MiB), passes,
/// lanes (`tickwire users hash` makes m=19456, t=2, p=1).
const MAX_COST: [(&str, u32); 3] = [("m", 262_144), ("t", 16), ("p", 8)];

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

/// Whether two secrets (or their digests) are the same, in a time that does not tell
/// how much of one matched (only whether their lengths differ).
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
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
        let bad = |why: String| Err(SecretError::BadPasswordHash(why));
        if parsed.algorithm.as_str() != "argon2id" {
            return bad(format!("algorithm {} (argon2id only)", parsed.algorithm));
        }
        // Without its output the hash matches no password: the user could never log in.
        if !parsed.hash.is_some_and(|h| h.len() >= MIN_HASH_BYTES) {
            return bad(format!("no hash output of {MIN_HASH_BYTES} bytes or more"));
        }
        // Every login naming the user (whoever sends it, whatever password) pays the
        // hash's cost: a mistyped `m` made each one take a gigabyte.
        for (name, most) in MAX_COST {
            let value = parsed.params.get_decimal(name);
            if !value.is_some_and(|v| v <= most) {
                return bad(format!(
                    "{name}={} (at most {most}: every login naming the user pays it)",
                    value.map_or("?".to_string(), |v| v.to_string())
                ));
            }
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
                same_secret(&got, want)
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

    /// A hash that cannot match (no output), or costs without bound at each login
    /// naming its user, is refused when the users file is read, saying why.
    #[test]
    fn a_password_hash_must_have_its_output_and_a_bounded_cost() {
        let good = hash_password("pw").unwrap();
        assert!(Secret::password(&good).unwrap().matches("pw"));
        let (head, tail) = good.rsplit_once('$').unwrap();
        for (phc, why) in [
            (head.to_string(), "no hash output"),
            (good.replace("m=19456", "m=1048576"), "m=1048576"),
            (good.replace("t=2", "t=1000"), "t=1000"),
            (good.replace("p=1", "p=64"), "p=64"),
            (good.replace("$argon2id$", "$argon2i$"), "argon2id only"),
            (format!("{head}${}", &tail[..16]), "no hash output"),
        ] {
            match Secret::password(&phc) {
                Err(e) => assert!(e.to_string().contains(why), "{phc}: {e}"),
                Ok(_) => panic!("{phc} accepted"),
            }
        }
    }

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
