//! What `--vc-requests-per-second` and `--max-concurrent-registrations` mean for the length of a
//! migration (docs/operations.md, "Sizing `--vc-requests-per-second` and
//! `--max-concurrent-registrations`"): a model from the calls one registration makes, not a
//! measurement.

use std::fmt::Write as _;

/// Backend calls one new registration passes through volmig's gate (rate limit and
/// concurrency slots): `QueryVirtualDiskUuid`, `CnsQueryVolume` (adopt before create),
/// `CnsCreateVolume` and, below vCenter 8.0.3, `VslmSetVStorageObjectControlFlags`.
pub const CALLS_BELOW_803: f64 = 4.0;
/// The same on vCenter 8.0.3 and later (registration protects the disk itself).
pub const CALLS_FROM_803: f64 = 3.0;

/// Registrations per second: the lower of the rate bound (`rate ÷ calls`) and the
/// concurrency bound (`concurrency ÷ (calls × latency)`, every call holding a slot for
/// `latency` seconds).
pub fn registrations_per_second(rate: f64, concurrency: f64, calls: f64, latency: f64) -> f64 {
    let by_rate = rate / calls;
    let by_slots = concurrency / (calls * latency);
    by_rate.min(by_slots)
}

/// Hours to register `volumes` vmdks at [`registrations_per_second`].
pub fn migration_hours(volumes: f64, rate: f64, concurrency: f64, calls: f64, latency: f64) -> f64 {
    volumes / registrations_per_second(rate, concurrency, calls, latency) / 3600.0
}

/// The report section: the defaults at 100,000 vmdks, and how to size both flags.
pub fn section() -> String {
    let mut o = String::new();
    let _ = writeln!(o, "## Sizing the vCenter request rate\n");
    let _ = writeln!(
        o,
        "A model, not a measurement: one new registration makes {CALLS_BELOW_803} gated \
         vCenter calls below 8.0.3 ({CALLS_FROM_803} from 8.0.3 on), each holding one of \
         `--max-concurrent-registrations` slots for the call's latency L and taking one token \
         of `--vc-requests-per-second`. Registrations per second = min(rate ÷ calls, C ÷ \
         (calls × L)).\n"
    );
    let _ = writeln!(
        o,
        "| 100,000 vmdks | rate | C | L | registrations/s | hours |\n|---|---|---|---|---|---|"
    );
    for (what, rate, c, l) in [
        ("defaults", 50.0, 8.0, 0.2),
        ("defaults, fast vCenter", 50.0, 8.0, 0.05),
        ("rate 200", 200.0, 8.0, 0.2),
        ("rate 200, C = 32", 200.0, 32.0, 0.2),
    ] {
        let per_second = registrations_per_second(rate, c, CALLS_BELOW_803, l);
        let hours = migration_hours(100_000.0, rate, c, CALLS_BELOW_803, l);
        let _ = writeln!(
            o,
            "| {what} | {rate} | {c} | {:.0} ms | {per_second:.1} | {hours:.1} |",
            l * 1000.0
        );
    }
    let _ = writeln!(
        o,
        "\nAt the defaults (50 calls/s, C = 8) and L = 200 ms a 100,000-vmdk migration takes \
         about {:.1} hours; the slots, not the rate, are the bound. To size: pick the \
         registrations per second R vCenter may take, then set `--vc-requests-per-second` ≥ \
         calls × R and `--max-concurrent-registrations` ≥ calls × R × L (L from \
         `volmig_backend_request_duration_seconds`). Full sync lists CNS volumes outside \
         this gate (one `CnsQueryAllVolume` per 500 volumes per pass).\n",
        migration_hours(100_000.0, 50.0, 8.0, CALLS_BELOW_803, 0.2)
    );
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lower_bound_wins() {
        // Defaults at 200 ms: slots allow 10/s, the rate 12.5/s.
        assert!((registrations_per_second(50.0, 8.0, 4.0, 0.2) - 10.0).abs() < 1e-9);
        // A fast vCenter: the rate is the bound (12.5/s), slots would allow 40/s.
        assert!((registrations_per_second(50.0, 8.0, 4.0, 0.05) - 12.5).abs() < 1e-9);
        // 100,000 at 10/s: 10,000 s.
        assert!((migration_hours(100_000.0, 50.0, 8.0, 4.0, 0.2) - 10_000.0 / 3600.0).abs() < 1e-9);
    }

    #[test]
    fn the_section_states_the_default_in_hours() {
        let text = section();
        assert!(text.contains("about 2.8 hours"), "{text}");
        assert!(
            text.contains("| defaults | 50 | 8 | 200 ms | 10.0 | 2.8 |"),
            "{text}"
        );
    }
}
