//! Process CPU time and memory from /proc (Linux), for the benchmark programs.

use std::time::Duration;

/// User + system CPU time of this process so far.
pub(crate) fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 (1-based) of stat, i.e. 11 and 12 after the ')'.
    let total = ticks(11) + ticks(12);
    Duration::from_millis(total * 10) // USER_HZ is 100 on Linux
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Resident memory now, in KiB.
pub(crate) fn rss_kib() -> u64 {
    status_kib("VmRSS:")
}

/// Peak resident memory since start (or the last reset), in KiB.
pub(crate) fn peak_rss_kib() -> u64 {
    status_kib("VmHWM:")
}

/// Resets the peak to the current RSS (Linux ≥ 4.0).
pub(crate) fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}
