//! The records of a run as a pretty JSON array (`target/slotpool-bench/results.json` by
//! default), one object per implementation and case, in the order they ran.

use super::Record;

/// Writes `records` as a pretty JSON array to `path`, creating its directory.
///
/// # Errors
/// Any I/O or serialization error.
pub fn write_json(path: &std::path::Path, records: &[Record]) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let json = serde_json::to_string_pretty(records).map_err(std::io::Error::other)?;
    std::fs::write(path, json + "\n")
}
