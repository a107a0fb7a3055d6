#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| slotpool_fuzz::session_model::run(data));
