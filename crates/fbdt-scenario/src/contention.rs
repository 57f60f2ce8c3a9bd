//! Shared airtime: other stations on a path's channel. What the path offers follows from
//! the airtime it gets — rate and delay change together, as on a contended WiFi channel
//! (what MuSher was designed against).
//!
//! Model (documented in docs/scenarios.md):
//! - `stations` others each want `load` of the channel's airtime; together they hold
//!   `busy = min(stations · load, stations / (stations + 1))` — at saturation the channel's
//!   access rule gives every backlogged station an equal share;
//! - the path keeps the rest, `share = 1 − busy`, so its rate is multiplied by `share`;
//! - between two of the path's transmit opportunities the others hold the channel for
//!   `txop · busy / share` on average; a packet arriving at a random moment waits half of
//!   that, which is added to the path's one-way delay.

/// Upper bound on `stations` (a busy enterprise channel has a few dozen).
pub const MAX_STATIONS: u32 = 64;
/// Upper bound on `txop_ms` (802.11's longest TXOP limit is about 8 ms).
pub const MAX_TXOP_MS: f64 = 10.0;
/// The transmit opportunity assumed when an event gives none: an 802.11ac A-MPDU of a few
/// milliseconds (its limit is 5.3 ms).
pub const DEFAULT_TXOP_MS: f64 = 2.0;

/// Fraction of the channel's airtime the path keeps.
pub fn airtime_share(stations: u32, load: f64) -> f64 {
    let n = f64::from(stations);
    1.0 - (n * load).min(n / (n + 1.0))
}

/// Mean extra one-way delay, ms, of a packet waiting for the channel.
pub fn access_delay_ms(stations: u32, load: f64, txop_ms: f64) -> f64 {
    let share = airtime_share(stations, load);
    txop_ms * (1.0 - share) / share / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn light_load_takes_its_airtime_and_saturation_shares_equally() {
        // Two stations at 10% each: 80% left, each packet waits 2 · 0.2 / 0.8 / 2 = 0.25 ms.
        assert!((airtime_share(2, 0.1) - 0.8).abs() < 1e-12);
        assert!((access_delay_ms(2, 0.1, 2.0) - 0.25).abs() < 1e-12);
        // Four saturating stations (load 1): five equal shares.
        assert!((airtime_share(4, 1.0) - 0.2).abs() < 1e-12);
        assert!((access_delay_ms(4, 1.0, 2.0) - 4.0).abs() < 1e-12);
        // More load never gives the path more airtime or less delay.
        let mut last = (1.0, 0.0);
        for l in 1..=20 {
            let load = f64::from(l) / 20.0;
            let now = (airtime_share(3, load), access_delay_ms(3, load, 2.0));
            assert!(
                now.0 <= last.0 && now.1 >= last.1,
                "load {load}: {now:?} after {last:?}"
            );
            last = now;
        }
    }
}
