//! Hard bounds on everything a scenario file can ask for. They keep a typo from asking the
//! emulator for something absurd and keep memory bounded; docs/scenarios.md lists them.

/// More paths than any multi-RAT device we model; also bounds per-path work in the backends.
pub const MAX_PATHS: usize = 16;
pub const MAX_EVENTS: usize = 1_000;
/// One day.
pub const MAX_DURATION_S: f64 = 86_400.0;
/// 100 Gbit/s, above any radio or NIC we emulate.
pub const MAX_RATE_MBPS: f64 = 100_000.0;
/// 10 s one way: far beyond the paper's +500 ms experiment, still a finite timer.
pub const MAX_DELAY_MS: f64 = 10_000.0;
pub const MAX_QUEUE_PACKETS: u32 = 1_000_000;
/// Models resample at most every millisecond; finer than the emulator can follow anyway.
pub const MIN_STEP_S: f64 = 0.001;
/// Bounds a resolved timeline (≈ 40 MB per path) and the repetitions of one event.
pub const MAX_STEPS_PER_PATH: usize = 1_000_000;
/// Entries in a `steps` rate model.
pub const MAX_RATE_STEPS: usize = 100_000;
pub const MAX_RATE_FACTOR: f64 = 100.0;
pub const MAX_SCENARIO_BYTES: u64 = 1 << 20;
pub const MAX_TRACE_BYTES: u64 = 64 << 20;
pub const MAX_TRACE_LINES: usize = 8_000_000;
/// A trace may span at most one day (its timestamps are milliseconds).
pub const MAX_TRACE_MS: u64 = 86_400_000;
pub const MIN_BIN_MS: f64 = 1.0;
pub const MAX_BIN_MS: f64 = 60_000.0;
/// Linux interface names are at most 15 bytes; the emulator may name links after paths.
pub const MAX_PATH_NAME: usize = 15;
/// TCP_CA_NAME_MAX is 16 including the NUL.
pub const MAX_CC_NAME: usize = 15;
pub const MAX_NAME: usize = 64;
pub const MAX_DESCRIPTION: usize = 4_096;
/// A radio's idle timeout and wake-up time: one minute is far past any power-save timer.
pub const MAX_RADIO_MS: f64 = 60_000.0;
/// Competing single-path TCP flows through a shared bottleneck: enough to load a backhaul,
/// few enough that the simulator's per-flow work stays small.
pub const MAX_COMPETING_TCP: u32 = 16;
