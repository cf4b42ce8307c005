//! What the `rdm_dictionary` fuzz target does with an input, shared with the stable-Rust
//! replay of its corpus (`tests/fuzz_rdm_corpus.rs`). A node reads an RDMFieldDictionary
//! and an enumtype.def from the files its configuration names (`[rssl]`), which may be
//! anything: the input is both, the field dictionary up to its first NUL byte and the
//! enumeration tables after it. Reading must never panic; what is read must hold
//! together (fields by id, ascending, each found again by its id with its type), and a
//! dictionary read must build the downloads consumers ask for. A panic or a failed check
//! is a bug; an error is fine.

use tickwire_rssl::dictionary::{Downloads, EnumFile, FieldFile, RwfDictionary};

/// The two files of an input.
pub(crate) fn split(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[]),
    }
}

pub(crate) fn rdm_dictionary(data: &[u8]) {
    let _ = read(data);
}

/// Both files read, or the first error (which names the file); checked as above.
pub(crate) fn read(data: &[u8]) -> Result<RwfDictionary, String> {
    let (fields, enums) = split(data);
    let text = |b| std::str::from_utf8(b).map_err(|e| e.to_string());
    let fields = FieldFile::parse(text(fields)?, "RDMFieldDictionary");
    let enums = EnumFile::parse(text(enums)?, "enumtype.def");
    for e in [fields.as_ref().err(), enums.as_ref().err()]
        .into_iter()
        .flatten()
    {
        assert!(
            e.contains("RDMFieldDictionary") || e.contains("enumtype.def"),
            "an error names its file: {e}"
        );
    }
    let (fields, enums) = (fields?, enums?);
    assert!(!fields.fields.is_empty());
    assert!(
        fields.fields.windows(2).all(|w| w[0].fid < w[1].fid),
        "fields by id, ascending, each once"
    );
    let d = RwfDictionary::new(fields.clone(), enums, "fuzz");
    assert_eq!(d.len(), fields.fields.len());
    for f in &fields.fields {
        assert_eq!(d.field(f.fid), Some(f));
        assert_eq!(d.rwf_type(f.fid), f.rwf_type);
    }
    let downloads = Downloads::build(&d, 1024);
    assert!(!downloads.fields.is_empty() || d.is_empty());
    assert!(downloads.fields.iter().all(|p| !p.is_empty()));
    assert!(!downloads.fields_info.is_empty() && !downloads.enums_info.is_empty());
    Ok(d)
}
