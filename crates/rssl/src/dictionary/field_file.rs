//! RDMFieldDictionary files: one field per line, `!` comments, `!tag NAME VALUE`
//! metadata.
//!
//! `ACRONYM "DDE ACRONYM" FID RIPPLES_TO FIELD_TYPE LENGTH [( ENUM_LENGTH )] RWF_TYPE
//! RWF_LENGTH`, e.g. `BID "BID" 22 BID_1 PRICE 17 REAL64 7`.

/// One field as the file has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldEntry {
    /// The acronym (the first column).
    pub name: String,
    /// The DDE acronym (the quoted column).
    pub long_name: String,
    /// The field id.
    pub fid: i16,
    /// The field its value ripples to (0: none).
    pub ripple_to: i16,
    /// The Marketfeed type: -1 none, 0 time in seconds, 1 integer, 3 date, 4 price,
    /// 5 alphanumeric, 6 enumerated, 7 time, 8 binary.
    pub mf_type: i8,
    /// The Marketfeed length.
    pub length: u16,
    /// The enumerated display length.
    pub enum_length: u8,
    /// The RWF type (`dt`).
    pub rwf_type: u8,
    /// The RWF length.
    pub rwf_length: u16,
}

/// A field dictionary: its fields (by field id, ascending) and its version tags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldFile {
    /// The `Version` tag.
    pub version: String,
    /// The `DictionaryId` tag.
    pub dictionary_id: i64,
    /// The fields, in file order.
    pub fields: Vec<FieldEntry>,
}

impl FieldFile {
    /// Reads an RDMFieldDictionary (`source` names it in errors).
    pub fn parse(text: &str, source: &str) -> Result<FieldFile, String> {
        let mut file = FieldFile {
            dictionary_id: 1,
            ..FieldFile::default()
        };
        let mut ripples: Vec<(usize, String)> = Vec::new();
        for entry in super::dict_lines(text) {
            let (n, line) = match entry {
                super::DictLine::Tag(name, v) => {
                    match name {
                        "Version" => file.version = v.to_string(),
                        "DictionaryId" => file.dictionary_id = v.parse().unwrap_or(1),
                        _ => {}
                    }
                    continue;
                }
                super::DictLine::Entry(n, line) => (n, line),
            };
            let err = |what: &str| format!("{source}, line {n}: {what}: {line:?}");
            let (name, rest) = line
                .split_once(char::is_whitespace)
                .ok_or_else(|| err("no display name"))?;
            let rest = rest.trim_start();
            let (long_name, rest) = rest
                .strip_prefix('"')
                .and_then(|r| r.split_once('"'))
                .ok_or_else(|| err("the display name is not quoted"))?;
            let cols: Vec<&str> = rest
                .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
                .filter(|c| !c.is_empty())
                .collect();
            if !(6..=7).contains(&cols.len()) {
                return Err(err(
                    "expected FID RIPPLES_TO TYPE LENGTH [ENUM_LENGTH] RWF_TYPE RWF_LENGTH",
                ));
            }
            let fid: i16 = cols[0]
                .parse()
                .map_err(|_| err("the field id is not a number"))?;
            let mf_type = mf_type_by_name(cols[2]).ok_or_else(|| err("unknown field type"))?;
            let length = cols[3]
                .parse()
                .map_err(|_| err("the length is not a number"))?;
            let enum_length = if cols.len() == 7 {
                cols[4]
                    .parse()
                    .map_err(|_| err("the enum length is not a number"))?
            } else {
                0
            };
            let rwf_name = cols[cols.len() - 2];
            let rwf_type = super::rwf_type_by_name(rwf_name)
                .ok_or_else(|| err(&format!("unknown RWF type {rwf_name}")))?;
            let rwf_length = cols[cols.len() - 1]
                .parse()
                .map_err(|_| err("the RWF length is not a number"))?;
            if cols[1] != "NULL" {
                ripples.push((file.fields.len(), cols[1].to_string()));
            }
            file.fields.push(FieldEntry {
                name: name.to_string(),
                long_name: long_name.to_string(),
                fid,
                ripple_to: 0,
                mf_type,
                length,
                enum_length,
                rwf_type,
                rwf_length,
            });
        }
        if file.fields.is_empty() {
            return Err(format!("{source}: no fields"));
        }
        // Ripples name fields that may come later in the file.
        let by_name: std::collections::HashMap<&str, i16> = file
            .fields
            .iter()
            .map(|f| (f.name.as_str(), f.fid))
            .collect();
        let resolved: Vec<(usize, i16)> = ripples
            .iter()
            .filter_map(|(i, name)| by_name.get(name.as_str()).map(|fid| (*i, *fid)))
            .collect();
        for (i, fid) in resolved {
            file.fields[i].ripple_to = fid;
        }
        file.fields.sort_by_key(|f| f.fid);
        file.fields.dedup_by_key(|f| f.fid);
        Ok(file)
    }
}

fn mf_type_by_name(name: &str) -> Option<i8> {
    Some(match name {
        "NONE" => -1,
        "TIME_SECONDS" => 0,
        "INTEGER" => 1,
        "DATE" => 3,
        "PRICE" => 4,
        "ALPHANUMERIC" => 5,
        "ENUMERATED" => 6,
        "TIME" => 7,
        "BINARY" => 8,
        _ => return None,
    })
}
