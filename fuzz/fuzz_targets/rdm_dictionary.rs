#![no_main]

use libfuzzer_sys::fuzz_target;

// The logic is shared with the stable-Rust corpus replay test in tickwire-rssl.
#[path = "../../crates/rssl/tests/fuzz_rdm/mod.rs"]
mod fuzz_rdm;

fuzz_target!(|data: &[u8]| {
    fuzz_rdm::rdm_dictionary(data);
});
