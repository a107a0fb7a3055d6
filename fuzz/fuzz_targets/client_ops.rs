#![no_main]
//! Op sequences on a client pool over its channel pool, checked against a sequential model of
//! their documented policy.
libfuzzer_sys::fuzz_target!(|data: &[u8]| slotpool_fuzz::client_model::run(data));
