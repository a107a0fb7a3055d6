#![no_main]
//! Op sequences on a managed pool, checked against a sequential model of its documented policy.
libfuzzer_sys::fuzz_target!(|data: &[u8]| slotpool_fuzz::managed_model::run(data));
