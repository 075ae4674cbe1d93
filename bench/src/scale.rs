//! Sizes of each scenario per `--scale` (`BENCH_SCALE`).

use std::time::Duration;

use clap::ValueEnum;

/// How big the benchmark runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ScaleName {
    /// Tiny sizes, one run each: checks that the harness works (the smoke test).
    Smoke,
    /// The sizes; about 20 minutes on 2 cores.
    Default,
    /// Registration throughput with 10,000 vmdks.
    Large,
}

/// The sizes of one benchmark run.
#[derive(Debug, Clone)]
pub struct Scale {
    /// `smoke`, `default` or `large`.
    pub name: &'static str,
    /// Repetitions of every figure.
    pub runs: usize,
    /// vmdks per throughput run with C > 1, at least: see [`Scale::volumes_at`].
    pub throughput_volumes: usize,
    /// Shortest time a throughput run with C > 1 lasts at the ideal rate C ÷ L: the fixed
    /// costs of a run (the first PVs reaching the registrar, the last status write) and one
    /// disturbed second must not decide a 10 % threshold.
    pub min_run_seconds: u64,
    /// vmdks per throughput run with C = 1 (the serial baseline).
    pub serial_volumes: usize,
    /// Injected `CnsCreateVolume` latencies L, ms.
    pub latencies_ms: Vec<u64>,
    /// Concurrency limits C.
    pub concurrencies: Vec<u16>,
    /// Volumes of the end-to-end steady-state pass.
    pub steady_volumes: usize,
    /// Numbers of existing volumes for memory and start-up (0 = idle baseline); the
    /// in-process steady-state pass runs over the largest.
    pub tracked_sizes: Vec<usize>,
    /// Time the throughput runs may spend waiting for a quiet machine and measuring
    /// disturbed pairs again ([`crate::scenarios::quiet::Gate`]).
    pub quiet_budget: Duration,
}

impl Scale {
    /// The sizes of `name`.
    pub fn of(name: ScaleName) -> Scale {
        match name {
            ScaleName::Smoke => Scale {
                name: "smoke",
                runs: 1,
                throughput_volumes: 8,
                min_run_seconds: 0,
                serial_volumes: 4,
                latencies_ms: vec![50],
                concurrencies: vec![1, 8],
                steady_volumes: 30,
                tracked_sizes: vec![0, 200, 600],
                // Run by `cargo nextest` beside other tests: the machine is never quiet.
                quiet_budget: Duration::ZERO,
            },
            ScaleName::Default => Scale {
                name: "default",
                runs: 3,
                throughput_volumes: 1_000,
                min_run_seconds: 6,
                serial_volumes: 250,
                latencies_ms: vec![50, 200],
                concurrencies: vec![1, 8, 32],
                steady_volumes: 10_000,
                tracked_sizes: vec![0, 1_000, 10_000, 100_000],
                quiet_budget: Duration::from_secs(600),
            },
            ScaleName::Large => Scale {
                name: "large",
                throughput_volumes: 10_000,
                serial_volumes: 2_500,
                ..Scale::of(ScaleName::Default)
            },
        }
    }

    /// vmdks of a throughput run at concurrency `c` and create latency `latency_ms`: the
    /// serial baseline's at C = 1, else [`Scale::throughput_volumes`] or, where that would
    /// take less than [`Scale::min_run_seconds`] at C ÷ L, enough for that long (rounded up
    /// to a multiple of 500).
    pub fn volumes_at(&self, c: u16, latency_ms: u64) -> usize {
        if c == 1 {
            return self.serial_volumes;
        }
        let at_ideal = self.min_run_seconds * 1_000 * u64::from(c) / latency_ms.max(1);
        let at_ideal = usize::try_from(at_ideal.div_ceil(500) * 500).unwrap_or(usize::MAX);
        self.throughput_volumes.max(at_ideal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_points_register_enough_vmdks_to_last_the_shortest_run() {
        let default = Scale::of(ScaleName::Default);
        // 640 volumes/s ideal: 6 s are 3,840 vmdks, rounded up to 4,000.
        assert_eq!(default.volumes_at(32, 50), 4_000);
        // 160 volumes/s ideal: 1,000 vmdks already take 6.25 s.
        assert_eq!(default.volumes_at(8, 50), 1_000);
        assert_eq!(default.volumes_at(32, 200), 1_000);
        assert_eq!(default.volumes_at(1, 50), default.serial_volumes);
        let smoke = Scale::of(ScaleName::Smoke);
        assert_eq!(smoke.volumes_at(8, 50), smoke.throughput_volumes);
        assert_eq!(Scale::of(ScaleName::Large).volumes_at(32, 50), 10_000);
    }
}
