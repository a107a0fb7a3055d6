#![no_main]
//! Op sequences on the slot table and its gate, checked against a sequential model.
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    slotpool_fuzz::slots_model::run(data);
});
