//! Byte counts as people read them.

/// A byte count as people read it: "0 B", "512 MiB", "22.8 GiB".
pub(crate) fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    // The unit is chosen by the value as printed (one decimal): 1,048,575
    // bytes is "1 MiB", not "1024 KiB".
    while (v * 10.0).round() >= 10240.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        return format!("{bytes} B");
    }
    let s = format!("{v:.1}");
    format!("{} {}", s.strip_suffix(".0").unwrap_or(&s), UNITS[u])
}
