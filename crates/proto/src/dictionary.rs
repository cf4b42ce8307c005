//! The field dictionary: field id <-> name and type.
//!
//! File format (one field per line, `#` or `!` starts a comment):
//! ```text
//! # NAME      FID   TYPE
//! BID         22    REAL
//! DSPLY_NAME  3     ASCII
//! ```
//! TYPE is one of INT, UINT, REAL, DATE, TIME, ASCII, UTF8, ENUM.

use crate::field::FieldType;
use std::collections::HashMap;
use thiserror::Error;

/// One field of a dictionary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldDef {
    /// The field id.
    pub fid: i16,
    /// The field's name (acronym).
    pub name: String,
    /// How its values are encoded.
    pub field_type: FieldType,
}

/// Why a dictionary file was refused.
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum DictionaryError {
    /// A line that is not `FID NAME TYPE`.
    #[error("line {line}: expected `NAME FID TYPE`, found {found:?}")]
    Syntax {
        /// The line (from 1).
        line: usize,
        /// What the line holds.
        found: String,
    },
    /// A field id that is not a number in range.
    #[error("line {line}: field id {value:?} is not an integer in -32768..=32767")]
    BadFid {
        /// The line (from 1).
        line: usize,
        /// The value.
        value: String,
    },
    /// A type the dictionary does not know.
    #[error("line {line}: unknown type {value:?} (allowed: INT, UINT, REAL, DATE, TIME, ASCII, UTF8, ENUM)")]
    BadType {
        /// The line (from 1).
        line: usize,
        /// The value.
        value: String,
    },
    /// A field id given twice.
    #[error("line {line}: field id {fid} is defined twice")]
    DuplicateFid {
        /// The line (from 1).
        line: usize,
        /// The field id.
        fid: i16,
    },
    /// A name given twice.
    #[error("line {line}: field name {name:?} is defined twice")]
    DuplicateName {
        /// The line (from 1).
        line: usize,
        /// The name.
        name: String,
    },
}

/// Field names and types by id (the node's and clients' dictionary).
#[derive(Debug, Clone, Default)]
pub struct Dictionary {
    by_fid: HashMap<i16, FieldDef>,
    by_name: HashMap<String, i16>,
}

/// Field ids of the standard MarketPrice fields Tickwire itself uses.
pub mod fid {
    // Each constant is the field's id under its name in the standard RDMFieldDictionary.
    #![allow(missing_docs)]
    pub const DSPLY_NAME: i16 = 3;
    pub const TIMACT: i16 = 5;
    pub const TRDPRC_1: i16 = 6;
    pub const NETCHNG_1: i16 = 11;
    pub const HIGH_1: i16 = 12;
    pub const LOW_1: i16 = 13;
    pub const CURRENCY: i16 = 15;
    pub const TRADE_DATE: i16 = 16;
    pub const OPEN_PRC: i16 = 19;
    pub const HST_CLOSE: i16 = 21;
    pub const BID: i16 = 22;
    pub const ASK: i16 = 25;
    pub const BIDSIZE: i16 = 30;
    pub const ASKSIZE: i16 = 31;
    pub const ACVOL_1: i16 = 32;
    pub const TRDVOL_1: i16 = 178;
    /// Latency timestamp: nanoseconds since the Unix epoch at the publisher.
    pub const TIM_TRK_1: i16 = 3902;
}

/// The built-in MarketPrice dictionary, in file format.
pub const DEFAULT_DICTIONARY: &str = include_str!("default_dictionary.txt");

impl Dictionary {
    /// The built-in MarketPrice dictionary.
    pub fn market_price() -> Self {
        Self::parse(DEFAULT_DICTIONARY).expect("built-in dictionary parses")
    }

    /// Reads a dictionary file (docs/PROTOCOL.md gives its form).
    pub fn parse(text: &str) -> Result<Self, DictionaryError> {
        let mut d = Dictionary::default();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let content = raw.split(['#', '!']).next().unwrap_or("").trim();
            if content.is_empty() {
                continue;
            }
            let parts: Vec<&str> = content.split_whitespace().collect();
            if parts.len() != 3 {
                return Err(DictionaryError::Syntax {
                    line,
                    found: content.to_string(),
                });
            }
            let fid: i16 = parts[1].parse().map_err(|_| DictionaryError::BadFid {
                line,
                value: parts[1].to_string(),
            })?;
            let field_type = FieldType::from_name(parts[2]).ok_or(DictionaryError::BadType {
                line,
                value: parts[2].to_string(),
            })?;
            let name = parts[0].to_string();
            if d.by_fid.contains_key(&fid) {
                return Err(DictionaryError::DuplicateFid { line, fid });
            }
            if d.by_name.contains_key(&name) {
                return Err(DictionaryError::DuplicateName { line, name });
            }
            d.by_name.insert(name.clone(), fid);
            d.by_fid.insert(
                fid,
                FieldDef {
                    fid,
                    name,
                    field_type,
                },
            );
        }
        Ok(d)
    }

    /// Fields it has.
    pub fn len(&self) -> usize {
        self.by_fid.len()
    }

    /// It has no field.
    pub fn is_empty(&self) -> bool {
        self.by_fid.is_empty()
    }

    /// A field's definition.
    pub fn get(&self, fid: i16) -> Option<&FieldDef> {
        self.by_fid.get(&fid)
    }

    /// A field's name.
    pub fn name(&self, fid: i16) -> Option<&str> {
        self.by_fid.get(&fid).map(|d| d.name.as_str())
    }

    /// Field id for a name (case-sensitive, as dictionaries are), or a plain number.
    pub fn fid(&self, name: &str) -> Option<i16> {
        self.by_name
            .get(name)
            .copied()
            .or_else(|| self.by_name.get(&name.to_ascii_uppercase()).copied())
            .or_else(|| name.parse().ok())
    }

    /// All fields, ordered by id.
    pub fn fields(&self) -> Vec<&FieldDef> {
        let mut v: Vec<_> = self.by_fid.values().collect();
        v.sort_by_key(|d| d.fid);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_in_dictionary_has_the_standard_fields() {
        let d = Dictionary::market_price();
        assert!(d.len() >= 50, "only {} fields", d.len());
        for (name, id) in [
            ("BID", 22),
            ("ASK", 25),
            ("BIDSIZE", 30),
            ("ASKSIZE", 31),
            ("TRDPRC_1", 6),
            ("ACVOL_1", 32),
            ("TIMACT", 5),
            ("TIM_TRK_1", 3902),
        ] {
            assert_eq!(d.fid(name), Some(id), "{name}");
            assert_eq!(d.name(id), Some(name));
        }
        assert_eq!(d.get(22).unwrap().field_type, FieldType::Real);
        assert_eq!(d.get(5).unwrap().field_type, FieldType::Time);
    }

    #[test]
    fn errors_name_the_line_and_value() {
        assert_eq!(
            Dictionary::parse("BID 22 REAL\nASK x REAL").unwrap_err(),
            DictionaryError::BadFid {
                line: 2,
                value: "x".into()
            }
        );
        assert!(matches!(
            Dictionary::parse("BID 22 FLOAT"),
            Err(DictionaryError::BadType { line: 1, .. })
        ));
        assert!(matches!(
            Dictionary::parse("BID 22 REAL\nBID2 22 REAL"),
            Err(DictionaryError::DuplicateFid { line: 2, fid: 22 })
        ));
        assert!(matches!(
            Dictionary::parse("BID 22"),
            Err(DictionaryError::Syntax { line: 1, .. })
        ));
    }
}
