//! enumtype.def files: tables of enumerated values, each shared by the fields named
//! above it.
//!
//! A table is one or more `ACRONYM FID` lines, then `VALUE DISPLAY MEANING` lines; the
//! display is `"text"` or `#HEX#` (bytes). `!` starts a comment, `!tag NAME VALUE`
//! carries metadata.

/// One table: the fields that use it and its values' display texts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnumTable {
    /// The fields that use the table.
    pub fids: Vec<i16>,
    /// Each value and its display text.
    pub values: Vec<(u16, Vec<u8>)>,
}

/// An enum dictionary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnumFile {
    /// The `RT_Version` tag.
    pub rt_version: String,
    /// The `DT_Version` tag.
    pub dt_version: String,
    /// The `DictionaryId` tag.
    pub dictionary_id: i64,
    /// The tables, in file order.
    pub tables: Vec<EnumTable>,
}

impl EnumFile {
    /// Reads an enumtype.def (`source` names it in errors).
    pub fn parse(text: &str, source: &str) -> Result<EnumFile, String> {
        let mut file = EnumFile {
            dictionary_id: 1,
            ..EnumFile::default()
        };
        let mut table = EnumTable::default();
        for entry in super::dict_lines(text) {
            let (n, line) = match entry {
                super::DictLine::Tag(name, v) => {
                    match name {
                        "RT_Version" => file.rt_version = v.to_string(),
                        "DT_Version" => file.dt_version = v.to_string(),
                        "DictionaryId" => file.dictionary_id = v.parse().unwrap_or(1),
                        _ => {}
                    }
                    continue;
                }
                super::DictLine::Entry(n, line) => (n, line),
            };
            let err = |what: &str| format!("{source}, line {n}: {what}: {line:?}");
            let (first, rest) = line
                .split_once(char::is_whitespace)
                .ok_or_else(|| err("expected ACRONYM FID or VALUE DISPLAY"))?;
            let rest = rest.trim_start();
            match first.parse::<u16>() {
                Ok(value) => {
                    if table.fids.is_empty() {
                        return Err(err("a value before any field names its table"));
                    }
                    table
                        .values
                        .push((value, display(rest).ok_or_else(|| err("bad display"))?));
                }
                Err(_) => {
                    // A field line: after values it starts the next table.
                    if !table.values.is_empty() {
                        file.tables.push(std::mem::take(&mut table));
                    }
                    let fid = rest
                        .split_whitespace()
                        .next()
                        .and_then(|f| f.parse().ok())
                        .ok_or_else(|| err("the field id is not a number"))?;
                    table.fids.push(fid);
                }
            }
        }
        if !table.fids.is_empty() {
            file.tables.push(table);
        }
        Ok(file)
    }
}

/// `"text"` or `#HEX#` at the start of `s`.
fn display(s: &str) -> Option<Vec<u8>> {
    if let Some(q) = s.strip_prefix('"') {
        return q.split_once('"').map(|(t, _)| t.as_bytes().to_vec());
    }
    // Bytes, not text: a character of several bytes between the #s is not a digit (and
    // must not be cut in two).
    let hex = s.strip_prefix('#')?.split_once('#')?.0.as_bytes();
    if hex.len() % 2 != 0 {
        return None;
    }
    let digit = |b: u8| (b as char).to_digit(16);
    hex.chunks(2)
        .map(|p| Some((digit(p[0])? * 16 + digit(p[1])?) as u8))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hex_display_is_two_hex_digits_a_byte_and_nothing_else() {
        assert_eq!(display("#DE01# x"), Some(vec![0xDE, 0x01]));
        assert_eq!(display("#de#"), Some(vec![0xDE]));
        // Not digits: a sign, a character of two bytes, an odd count.
        assert_eq!(display("#+F#"), None);
        assert_eq!(display("#4\u{5a1}5#"), None);
        assert_eq!(display("#\u{5a1}\u{5a1}#"), None);
        assert_eq!(display("#ABC#"), None);
        let text = "RDN_EXCHID 4\n 1 #4\u{5a1}5# x\n";
        assert!(EnumFile::parse(text, "t").is_err());
    }

    #[test]
    fn tables_with_shared_fields_text_and_hex_displays() {
        let text = "!tag DT_Version 23.71\n\
            RDN_EXCHID     4\n\
            ! a comment\n\
                 0        \"   \"   undefined\n\
                 1        \"ASE\"   NYSE American\n\
            CURRENCY      15\n\
            CUR_2       1000\n\
               208      #DE#   a byte\n";
        let f = EnumFile::parse(text, "t").unwrap();
        assert_eq!(f.dt_version, "23.71");
        assert_eq!(f.tables.len(), 2);
        assert_eq!(f.tables[0].values[1], (1, b"ASE".to_vec()));
        assert_eq!(f.tables[1].fids, [15, 1000]);
        assert_eq!(f.tables[1].values[0], (208, vec![0xDE]));
        assert!(EnumFile::parse("  5 \"x\" y\n", "t").is_err());
    }
}
