#![no_main]
//! Op sequences on a keyed admission registry, checked against a sequential model of its
//! documented policy.
libfuzzer_sys::fuzz_target!(|data: &[u8]| slotpool_fuzz::keyed_model::run(data));
