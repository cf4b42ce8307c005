#![no_main]

use libfuzzer_sys::fuzz_target;

// The logic is shared with the stable-Rust corpus replay test in tickwire-gateway.
#[path = "../../crates/gateway/tests/fuzz_logic/mod.rs"]
mod fuzz_logic;

fuzz_target!(|data: &[u8]| {
    let _ = fuzz_logic::ws_connection(data);
});
