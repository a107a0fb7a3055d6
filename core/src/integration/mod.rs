//! Integrations behind cargo features: they adapt the pools to a framework and import them,
//! never the other way round.

#[cfg(feature = "metrics")]
pub mod metrics;
#[cfg(feature = "tonic")]
pub mod tonic;
