#![no_main]

use libfuzzer_sys::fuzz_target;

// The logic is shared with the stable-Rust corpus replay test in tickwire-files.
#[path = "../../crates/files/tests/fuzz_logic/mod.rs"]
mod fuzz_logic;

fuzz_target!(|data: &[u8]| {
    fuzz_logic::files_hub(data);
});
