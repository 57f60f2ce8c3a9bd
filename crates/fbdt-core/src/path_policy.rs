//! When a path's TCP connection counts as stalled, and what a runtime does about it: keep
//! it, open a fresh connection beside it (a *probe*), or let the probe replace it.
//!
//! A pure state machine, told the time like the rest of the core: the runtime feeds it the
//! core's `Event::PathStalled` reports, TCP_INFO samples ([`TcpSignals`]) and probe
//! outcomes, each with `now`, and carries out the [`Decision`]. It reads no clock and opens
//! no socket, so the runtime only measures and acts.
//!
//! Why probe: a connection whose link went away backs its RTO off exponentially, so after
//! the link returns it may stay silent for up to `TCP_RTO_MAX`. A fresh connection's SYN is
//! not held back by that, so it finds the link as soon as it is back.

use crate::time::{Duration, Instant};

/// What TCP_INFO says about one connection, as far as stalls go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpSignals {
    /// Segments sent and not yet acknowledged (`tcpi_unacked`).
    pub unacked: u32,
    /// Time since the last ACK arrived (`tcpi_last_ack_recv`, millisecond resolution).
    pub since_last_ack: Duration,
    /// Smoothed RTT (`tcpi_rtt`).
    pub srtt: Duration,
    /// Retransmission timeouts in a row without an ACK (`tcpi_backoff`).
    pub backoff: u8,
    /// Time since TCP last sent data (`tcpi_last_data_sent`, ms resolution): during a
    /// back-off, since its timeout retransmission.
    pub since_last_send: Duration,
    /// Time since data last arrived (`tcpi_last_data_recv`, ms resolution). With nothing
    /// outstanding this is the sign of life: Linux's fast path takes in-order data that
    /// acknowledges nothing new without touching `tcpi_last_ack_recv`.
    pub since_last_recv: Duration,
}

/// TCP's own sign of a stall needs at least this much silence: a few RTOs' worth on the
/// short paths of a LAN (Linux's minimum RTO is 200 ms).
const MIN_SILENCE_MS: u64 = 300;
/// ... or this many smoothed RTTs, on long paths.
const SILENCE_RTTS: u64 = 4;
/// A timeout retransmission counts as unanswered after this many RTTs ...
const RTO_ANSWER_RTTS: u64 = 2;
/// ... and at least this long (ms resolution of TCP_INFO, delayed ACKs on short paths).
const RTO_ANSWER_MIN_MS: u64 = 10;

impl TcpSignals {
    /// TCP's own sign: data is outstanding and no ACK came for `max(300 ms, 4 × srtt)`; the
    /// link under this connection is probably gone and its RTO is backing off.
    pub fn looks_stalled(&self) -> bool {
        self.unacked > 0 && self.since_last_ack.as_micros() / 1000 > self.silence_limit_ms()
    }

    fn silence_limit_ms(&self) -> u64 {
        (self.srtt.as_micros() / 1000 * SILENCE_RTTS).max(MIN_SILENCE_MS)
    }

    /// Nothing outstanding and nothing arrived for as long as [`Self::looks_stalled`]
    /// waits: when the core still misses its ACKs, they are stuck in the peer's TCP (whose
    /// RTO backs off), not in ours.
    fn peer_silent(&self) -> bool {
        self.unacked == 0 && self.since_last_recv.as_micros() / 1000 > self.silence_limit_ms()
    }

    /// TCP's own timeout fired and its retransmission has had time for an answer and got
    /// none: the link does not carry now. Until then TCP recovers on its own (on a lossy
    /// radio the retransmission usually gets through), and a fresh connection would only
    /// restart slow start and cost a handshake.
    pub fn rto_failed(&self) -> bool {
        let wait_ms = (self.srtt.as_micros() / 1000 * RTO_ANSWER_RTTS).max(RTO_ANSWER_MIN_MS);
        self.unacked > 0 && self.backoff >= 1 && self.since_last_send.as_micros() / 1000 >= wait_ms
    }

    /// Replacing this connection (which counts as stalled) is worth it: TCP's long
    /// silence, its failed timeout, or the peer's long silence.
    fn replaceable(&self) -> bool {
        self.looks_stalled() || self.rto_failed() || self.peer_silent()
    }

    /// TCP's sign, or nothing heard since the core reported the stall at `core_stalled_at`:
    /// no ACK while data is outstanding, no data while none is (the core's stall is then
    /// its ACKs, which the peer sends as data, not arriving). The core notices within a
    /// few RTTs; TCP's sign needs 300 ms of silence. When the peer reported the stall
    /// (`peer`), its data is what is stuck: only data arriving ends that stall (an ACK for
    /// ours says the link carries our way, not that the peer's timer has fired).
    fn stalled(&self, core_stalled_at: Option<Instant>, peer: bool, now: Instant) -> bool {
        let heard = if self.unacked > 0 && !peer {
            self.since_last_ack
        } else {
            self.since_last_recv
        };
        self.looks_stalled()
            || core_stalled_at.is_some_and(|at| heard.as_micros() / 1000 >= now.saturating_since(at).as_micros() / 1000)
    }
}

/// What the runtime should do with a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Nothing to do.
    Keep,
    /// Open a fresh connection beside the current one, retrying until one connects.
    Probe,
    /// The connection works again: abandon the probe.
    CancelProbe,
    /// The probe connected and the old connection is still stalled (or gone): the fresh
    /// connection takes the path over.
    Replace,
    /// The probe connected while the old connection is stalled but TCP has not yet given
    /// up on it (its timeout has not fired, or its retransmission may still be answered):
    /// keep the fresh connection aside. A later TCP_INFO sample turns it into `Replace`
    /// (TCP failed) or `CancelProbe` (an ACK came).
    Hold,
    /// The probe connected but is not needed (the old connection recovered, or the session
    /// is ending): close the fresh connection.
    DiscardProbe,
}

/// What the runtime can do right now, as inputs to every decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Abilities {
    /// A probe is under way for this path.
    pub probing: bool,
    /// This end can open connections for the path (a client that knows where the path
    /// goes) and the session is not ending.
    pub can_probe: bool,
    /// A probe's connection is held aside ([`Decision::Hold`]).
    pub holding: bool,
}

/// Stall state of one path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PathPolicy {
    /// When the core reported the current connection stalled (our core's report, or the
    /// peer's); cleared once TCP heard from the peer after that, or the connection changed.
    core_stalled_at: Option<Instant>,
    /// The peer reported the stall (`Event::PeerStalled`): its data sits in its own TCP,
    /// whose state ours cannot show.
    peer_stall: bool,
}

impl PathPolicy {
    /// The core reported the path stalled (`Event::PathStalled`). Probing at once, rather
    /// than after TCP's 300 ms of silence, has a fresh connection ready by the time the old
    /// one is known to be stuck.
    pub fn on_core_stalled(&mut self, now: Instant, can: Abilities) -> Decision {
        self.core_stalled_at = Some(now);
        Self::probe_if(can)
    }

    /// The peer reported that the path stalls its data (`Event::PeerStalled`): as
    /// [`Self::on_core_stalled`], and the probe replaces the old connection once it
    /// connects unless the peer's data arrived since the report. Our TCP cannot tell
    /// whether the peer's has given up (its timer backs off in the peer's kernel), and a
    /// probe that connected shows the link carries: an old connection still silent then
    /// waits for the peer's next timeout, which a fresh one does not.
    pub fn on_peer_stalled(&mut self, now: Instant, can: Abilities) -> Decision {
        self.peer_stall = true;
        self.on_core_stalled(now, can)
    }

    /// A TCP_INFO sample of the path's connection.
    pub fn on_tcp_info(&mut self, tcp: &TcpSignals, now: Instant, can: Abilities) -> Decision {
        if self.core_stalled_at.is_some() && !self.stalled(tcp, now) {
            // TCP heard from the peer since the report: that stall is over.
            self.core_stalled_at = None;
            self.peer_stall = false;
        }
        if !self.stalled(tcp, now) {
            if can.probing || can.holding {
                Decision::CancelProbe
            } else {
                Decision::Keep
            }
        } else if can.holding {
            if self.replaceable(tcp) && can.can_probe {
                Decision::Replace
            } else {
                Decision::Keep
            }
        } else {
            Self::probe_if(can)
        }
    }

    /// A probe connected. `old` is the current connection's TCP_INFO (`None`: there is no
    /// connection any more, or it cannot be read); `ending`: the session is ending.
    pub fn on_probe_connected(&self, old: Option<&TcpSignals>, now: Instant, ending: bool) -> Decision {
        let still_stalled = old.is_none_or(|t| self.stalled(t, now));
        if !still_stalled || ending {
            Decision::DiscardProbe
        } else if old.is_none_or(|t| self.replaceable(t)) {
            Decision::Replace
        } else {
            Decision::Hold
        }
    }

    /// Another connection carries the path now (or none does): earlier reports are about
    /// the old one.
    pub fn on_connection_changed(&mut self) {
        self.core_stalled_at = None;
        self.peer_stall = false;
    }

    fn stalled(&self, tcp: &TcpSignals, now: Instant) -> bool {
        tcp.stalled(self.core_stalled_at, self.peer_stall, now)
    }

    /// A stalled connection may be replaced: TCP's own signs, or the peer's report (whose
    /// TCP we cannot read).
    fn replaceable(&self, tcp: &TcpSignals) -> bool {
        self.peer_stall || tcp.replaceable()
    }

    fn probe_if(can: Abilities) -> Decision {
        if !can.probing && !can.holding && can.can_probe {
            Decision::Probe
        } else {
            Decision::Keep
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Instant {
        Instant::from_micros(v * 1000)
    }

    /// Data outstanding, last ACK `ago` ms before the sample, 10 ms RTT; TCP's timeout
    /// fired and its retransmission went out as long ago as the last ACK (a dead link).
    fn tcp(ago: u64) -> TcpSignals {
        TcpSignals {
            unacked: 10,
            since_last_ack: Duration::from_millis(ago),
            srtt: Duration::from_millis(10),
            backoff: 1,
            since_last_send: Duration::from_millis(ago),
            since_last_recv: Duration::from_millis(ago),
        }
    }

    /// Nothing outstanding at TCP (every byte the core sent was taken by the peer's TCP);
    /// the last ACK was long ago and the last data `recv` ms ago.
    fn drained(recv: u64) -> TcpSignals {
        TcpSignals {
            unacked: 0,
            since_last_ack: Duration::from_millis(5000),
            srtt: Duration::from_millis(10),
            backoff: 0,
            since_last_send: Duration::from_millis(recv),
            since_last_recv: Duration::from_millis(recv),
        }
    }

    /// As [`tcp`], but TCP's timeout has not fired yet (a lossy link waiting for its RTO).
    fn waiting(ago: u64) -> TcpSignals {
        TcpSignals {
            backoff: 0,
            since_last_send: Duration::from_millis(1),
            ..tcp(ago)
        }
    }

    /// As [`tcp`], but TCP's timeout retransmission went out `sent` ms ago.
    fn retransmitted(ago: u64, sent: u64) -> TcpSignals {
        TcpSignals {
            since_last_send: Duration::from_millis(sent),
            ..tcp(ago)
        }
    }

    const IDLE: Abilities = Abilities {
        probing: false,
        can_probe: true,
        holding: false,
    };
    const PROBING: Abilities = Abilities {
        probing: true,
        can_probe: true,
        holding: false,
    };
    const HOLDING: Abilities = Abilities {
        probing: false,
        can_probe: true,
        holding: true,
    };
    const SERVER: Abilities = Abilities {
        probing: false,
        can_probe: false,
        holding: false,
    };

    #[test]
    fn tcp_sign_alone() {
        // (last ACK ago ms, srtt ms, unacked, stalled?)
        let rows = [
            (50, 10, 10, false),
            (300, 10, 10, false),
            (301, 10, 10, true),
            (301, 10, 0, false),
            (399, 100, 10, false),
            (401, 100, 10, true),
        ];
        for (ago, srtt, unacked, want) in rows {
            let t = TcpSignals {
                unacked,
                since_last_ack: Duration::from_millis(ago),
                srtt: Duration::from_millis(srtt),
                ..TcpSignals::default()
            };
            assert_eq!(t.looks_stalled(), want, "ago {ago} srtt {srtt} unacked {unacked}");
        }
    }

    /// "At t, feed X, expect Y" for one path.
    enum Feed {
        CoreStalled(Abilities),
        PeerStalled(Abilities),
        TcpInfo(TcpSignals, Abilities),
        ProbeConnected(Option<TcpSignals>, bool),
        ConnectionChanged,
    }

    fn play(rows: &[(u64, Feed, Decision)]) {
        let mut p = PathPolicy::default();
        for (i, (t, feed, want)) in rows.iter().enumerate() {
            let now = ms(*t);
            let got = match feed {
                Feed::CoreStalled(can) => p.on_core_stalled(now, *can),
                Feed::PeerStalled(can) => p.on_peer_stalled(now, *can),
                Feed::TcpInfo(tcp, can) => p.on_tcp_info(tcp, now, *can),
                Feed::ProbeConnected(old, ending) => p.on_probe_connected(old.as_ref(), now, *ending),
                Feed::ConnectionChanged => {
                    p.on_connection_changed();
                    Decision::Keep
                }
            };
            assert_eq!(got, *want, "row {i} at {t} ms");
        }
    }

    #[test]
    fn core_report_probes_at_once_and_the_probe_replaces_a_silent_connection() {
        use Feed::*;
        play(&[
            (1000, CoreStalled(IDLE), Decision::Probe),
            // 40 ms after the report, the last ACK is 45 ms old: no ACK since the report.
            (1040, TcpInfo(tcp(45), PROBING), Decision::Keep),
            (1060, ProbeConnected(Some(tcp(65)), false), Decision::Replace),
        ]);
    }

    #[test]
    fn an_ack_after_the_report_ends_the_stall_and_cancels_the_probe() {
        use Feed::*;
        play(&[
            (1000, CoreStalled(IDLE), Decision::Probe),
            // The last ACK came 5 ms ago, after the report 40 ms ago.
            (1040, TcpInfo(tcp(5), PROBING), Decision::CancelProbe),
            // The report is forgotten: 20 ms of silence is no stall on its own.
            (1050, TcpInfo(tcp(20), IDLE), Decision::Keep),
        ]);
    }

    #[test]
    fn with_nothing_outstanding_the_peers_data_is_the_sign_of_life() {
        use Feed::*;
        play(&[
            (1000, CoreStalled(IDLE), Decision::Probe),
            // No ACK for 5 s, but none was due; no data since the report either: the
            // core's ACKs are not coming. Keep probing.
            (1040, TcpInfo(drained(45), PROBING), Decision::Keep),
            // Data came 3 ms ago: the peer is heard, the stall is over.
            (1050, TcpInfo(drained(3), PROBING), Decision::CancelProbe),
        ]);
    }

    #[test]
    fn a_held_probe_replaces_a_connection_whose_peer_stays_silent() {
        use Feed::*;
        play(&[
            (1000, CoreStalled(IDLE), Decision::Probe),
            // The peer's TCP may yet retransmit what the core waits for: held.
            (1020, ProbeConnected(Some(drained(25)), false), Decision::Hold),
            (1200, TcpInfo(drained(205), HOLDING), Decision::Keep),
            // Silent as long as TCP's own sign waits (300 ms): its RTO is backing off.
            (1301, TcpInfo(drained(306), HOLDING), Decision::Replace),
        ]);
    }

    #[test]
    fn a_probe_that_connects_after_recovery_is_discarded() {
        use Feed::*;
        play(&[
            (1000, CoreStalled(IDLE), Decision::Probe),
            (1030, ProbeConnected(Some(tcp(2)), false), Decision::DiscardProbe),
        ]);
    }

    #[test]
    fn tcp_silence_alone_probes_and_no_connection_means_replace() {
        use Feed::*;
        play(&[
            (500, TcpInfo(tcp(200), IDLE), Decision::Keep),
            (700, TcpInfo(tcp(400), IDLE), Decision::Probe),
            (710, TcpInfo(tcp(410), PROBING), Decision::Keep),
            (900, ProbeConnected(None, false), Decision::Replace),
        ]);
    }

    #[test]
    fn nothing_is_replaced_while_ending_and_a_server_never_probes() {
        use Feed::*;
        play(&[
            (1000, CoreStalled(SERVER), Decision::Keep),
            (1400, TcpInfo(tcp(400), SERVER), Decision::Keep),
            (1500, ProbeConnected(Some(tcp(500)), true), Decision::DiscardProbe),
        ]);
    }

    #[test]
    fn a_connection_waiting_for_its_own_timeout_is_not_replaced() {
        use Feed::*;
        play(&[
            (1000, CoreStalled(IDLE), Decision::Probe),
            // The probe connects 5 ms later; TCP has not retransmitted yet: held aside.
            (1005, ProbeConnected(Some(waiting(35)), false), Decision::Hold),
            (1010, TcpInfo(waiting(40), HOLDING), Decision::Keep),
            // The timeout fired at 1170 and its retransmission is 4 ms old: not yet.
            (1174, TcpInfo(retransmitted(204, 4), HOLDING), Decision::Keep),
            // Its ACK came: the held connection is dropped, the old one carries on.
            (1182, TcpInfo(waiting(2), HOLDING), Decision::CancelProbe),
            (1190, TcpInfo(waiting(10), IDLE), Decision::Keep),
        ]);
    }

    #[test]
    fn a_held_probe_replaces_once_the_timeout_retransmission_goes_unanswered() {
        use Feed::*;
        play(&[
            (1000, CoreStalled(IDLE), Decision::Probe),
            (1005, ProbeConnected(Some(waiting(35)), false), Decision::Hold),
            (1174, TcpInfo(retransmitted(204, 4), HOLDING), Decision::Keep),
            // 20 ms (two RTTs) after the retransmission, still no ACK: the link is gone.
            (1190, TcpInfo(retransmitted(220, 20), HOLDING), Decision::Replace),
        ]);
    }

    #[test]
    fn a_new_connection_forgets_the_old_report() {
        use Feed::*;
        play(&[
            (1000, CoreStalled(IDLE), Decision::Probe),
            (1010, ConnectionChanged, Decision::Keep),
            // 50 ms of silence on the new connection is not a stall without a report.
            (1060, TcpInfo(tcp(50), IDLE), Decision::Keep),
        ]);
    }

    #[test]
    fn the_peers_report_replaces_as_soon_as_the_probe_connects() {
        use Feed::*;
        // The client of a download: nothing of ours outstanding, the server's data stuck.
        // Where our own core's report holds the probe (above), the peer's replaces: the
        // probe's handshake shows the link carries, the old connection still heard nothing.
        play(&[
            (1000, PeerStalled(IDLE), Decision::Probe),
            (1030, TcpInfo(drained(70), PROBING), Decision::Keep),
            (1060, ProbeConnected(Some(drained(100)), false), Decision::Replace),
        ]);
    }

    #[test]
    fn the_peers_data_after_its_report_cancels_the_probe() {
        use Feed::*;
        play(&[
            (1000, PeerStalled(IDLE), Decision::Probe),
            (1020, TcpInfo(drained(4), PROBING), Decision::CancelProbe),
        ]);
        play(&[
            (1000, PeerStalled(IDLE), Decision::Probe),
            (1030, ProbeConnected(Some(drained(5)), false), Decision::DiscardProbe),
        ]);
    }

    #[test]
    fn after_the_peers_report_only_its_data_counts_as_heard() {
        use Feed::*;
        // Our own bytes outstanding and just acknowledged (the link carries our way again),
        // but no data from the peer since its report: its timer has not fired yet.
        let acked_not_fed = TcpSignals {
            since_last_ack: Duration::from_millis(2),
            since_last_recv: Duration::from_millis(80),
            ..tcp(2)
        };
        play(&[
            (1000, PeerStalled(IDLE), Decision::Probe),
            (1040, TcpInfo(acked_not_fed, PROBING), Decision::Keep),
            (1050, ProbeConnected(Some(acked_not_fed), false), Decision::Replace),
        ]);
        // Our own core's report is about our data: that ACK ends it.
        play(&[
            (1000, CoreStalled(IDLE), Decision::Probe),
            (1040, TcpInfo(acked_not_fed, PROBING), Decision::CancelProbe),
        ]);
    }

    #[test]
    fn a_new_connection_forgets_the_peers_report() {
        use Feed::*;
        play(&[
            (1000, PeerStalled(IDLE), Decision::Probe),
            (1010, ConnectionChanged, Decision::Keep),
            (1020, CoreStalled(IDLE), Decision::Probe),
            // Our own report again: the probe is held as before, not replaced at once.
            (1040, ProbeConnected(Some(drained(45)), false), Decision::Hold),
        ]);
    }
}
