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
    /// vmdks per throughput run with C > 1.
    pub throughput_volumes: usize,
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

    /// vmdks of a throughput run at concurrency `c`.
    pub fn volumes_at(&self, c: u16) -> usize {
        if c == 1 {
            self.serial_volumes
        } else {
            self.throughput_volumes
        }
    }
}
