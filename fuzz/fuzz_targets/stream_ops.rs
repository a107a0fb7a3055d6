#![no_main]
//! Op sequences on a stream pool over a scripted connector and peers, checked against a
//! sequential model of its documented policy.
libfuzzer_sys::fuzz_target!(|data: &[u8]| slotpool_fuzz::stream_model::run(data));
