//! The meta-layer receiver: ONE reorder buffer for all paths, in-order delivery, and ONE
//! receive window: `window = recv_buffer − unread bytes`, counted from data_ack, so the
//! right edge `data_ack + window` only moves right and out-of-order bytes held for a slow
//! path use up the same window the fast path needs (head-of-line blocking).

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

use crate::error::ProtocolError;
use crate::path::PathId;
use crate::scheme::{SchemeReceiver, StreamParams};
use crate::stats::ReceiverStats;
use crate::time::Instant;
use crate::wire::{DataAck, Frame, MpData};

pub struct MetaReceiver {
    recv_buffer: u64,
    rcv_nxt: u64,
    ready: VecDeque<u8>,
    ofo: BTreeMap<u64, Vec<u8>>,
    ofo_bytes: u64,
    fin_at: Option<u64>,
    path_rx: Vec<u64>,
    up: u32,
    /// Paths owing a DATA_ACK (the path data arrived on, as a subflow ACKs its own data).
    ack_due: u32,
    /// Right edge last advertised.
    advertised_edge: u64,
    stats: ReceiverStats,
}

impl MetaReceiver {
    pub fn new(params: StreamParams) -> Self {
        MetaReceiver {
            recv_buffer: params.recv_buffer as u64,
            rcv_nxt: 0,
            ready: VecDeque::new(),
            ofo: BTreeMap::new(),
            ofo_bytes: 0,
            fin_at: None,
            path_rx: Vec::new(),
            up: 0,
            ack_due: 0,
            advertised_edge: params.recv_buffer as u64,
            stats: ReceiverStats::default(),
        }
    }

    fn edge(&self) -> u64 {
        self.rcv_nxt + self.recv_buffer - self.ready.len() as u64
    }

    fn deliver(&mut self, dsn: u64, payload: &[u8]) {
        let skip = (self.rcv_nxt - dsn) as usize;
        let part = &payload[skip.min(payload.len())..];
        self.ready.extend(part);
        self.rcv_nxt += part.len() as u64;
        self.stats.bytes_delivered += part.len() as u64;
    }

    fn on_mp_data(&mut self, path: PathId, d: &MpData<'_>, _now: Instant) -> Result<(), ProtocolError> {
        let len = d.payload.len() as u64;
        let end = d.dsn + len;
        let i = path.index();
        if self.path_rx.len() <= i {
            self.path_rx.resize(i + 1, 0);
            self.stats.per_path_bytes_received.resize(i + 1, 0);
        }
        self.path_rx[i] += len;
        self.stats.per_path_bytes_received[i] += len;
        self.ack_due |= path.bit();
        if d.fin {
            match self.fin_at {
                Some(f) if f != end => {
                    return Err(ProtocolError::Unexpected {
                        path,
                        what: "DATA_FIN at two different offsets",
                    })
                }
                _ => self.fin_at = Some(end),
            }
        }
        if self.fin_at.is_some_and(|f| end > f) {
            return Err(ProtocolError::Unexpected {
                path,
                what: "MP_DATA past the DATA_FIN",
            });
        }
        if end > self.advertised_edge.max(self.edge()) {
            return Err(ProtocolError::Unexpected {
                path,
                what: "MP_DATA beyond the shared receive window",
            });
        }
        if end <= self.rcv_nxt {
            self.stats.redundant_bytes_received += len;
            return Ok(());
        }
        if d.dsn <= self.rcv_nxt {
            self.deliver(d.dsn, d.payload);
            while let Some(entry) = self.ofo.first_entry() {
                if *entry.key() > self.rcv_nxt {
                    break;
                }
                let (k, v) = entry.remove_entry();
                self.ofo_bytes -= v.len() as u64;
                if k + v.len() as u64 > self.rcv_nxt {
                    self.deliver(k, &v);
                } else {
                    self.stats.redundant_bytes_received += v.len() as u64;
                }
            }
        } else if let std::collections::btree_map::Entry::Vacant(e) = self.ofo.entry(d.dsn) {
            e.insert(d.payload.to_vec());
            self.ofo_bytes += len;
        } else {
            self.stats.redundant_bytes_received += len;
        }
        self.stats.max_out_of_order_bytes = self.stats.max_out_of_order_bytes.max(self.ofo_bytes);
        let held = self.ofo_bytes + self.ready.len() as u64;
        self.stats.max_buffered_bytes = self.stats.max_buffered_bytes.max(held);
        Ok(())
    }

    /// The DATA_ACK to send on `path` now, if one is due there.
    fn poll_data_ack(&mut self, path: PathId) -> Option<DataAck> {
        if self.ack_due & path.bit() == 0 {
            return None;
        }
        self.ack_due &= !path.bit();
        self.stats.acks_sent += 1;
        let window = self.edge() - self.rcv_nxt;
        self.advertised_edge = self.advertised_edge.max(self.edge());
        Some(DataAck {
            data_ack: self.rcv_nxt,
            window: window.min(u64::from(u32::MAX)) as u32,
            fin: self.fin_at == Some(self.rcv_nxt),
            path_rx: self.path_rx.clone(),
        })
    }
}

impl SchemeReceiver for MetaReceiver {
    fn handle_frame(
        &mut self,
        path: PathId,
        frame: &Frame<'_>,
        _encoded: &Bytes,
        now: Instant,
    ) -> Result<(), ProtocolError> {
        match frame {
            Frame::MpData(d) => self.on_mp_data(path, d, now),
            Frame::Align(_) => Err(ProtocolError::Unexpected {
                path,
                what: "ALIGN in a meta-layer session",
            }),
            _ => Err(ProtocolError::Unexpected {
                path,
                what: "FBDT DATA in a meta-layer session",
            }),
        }
    }

    fn poll_frame(&mut self, path: PathId, _now: Instant) -> Option<Frame<'static>> {
        self.poll_data_ack(path).map(Frame::DataAck)
    }

    fn read(&mut self, buf: &mut [u8]) -> usize {
        let n = buf.len().min(self.ready.len());
        for (dst, src) in buf.iter_mut().zip(self.ready.drain(..n)) {
            *dst = src;
        }
        self.stats.bytes_read += n as u64;
        // A window update once a quarter of the buffer opened since the last advertisement.
        if n > 0 && self.edge() >= self.advertised_edge + self.recv_buffer / 4 {
            self.ack_due |= self.up;
        }
        n
    }

    fn readable(&self) -> usize {
        self.ready.len()
    }

    fn is_finished(&self) -> bool {
        self.fin_at == Some(self.rcv_nxt) && self.ready.is_empty()
    }

    fn path_up(&mut self, path: PathId, _now: Instant) {
        let i = path.index();
        if self.path_rx.len() <= i {
            self.path_rx.resize(i + 1, 0);
            self.stats.per_path_bytes_received.resize(i + 1, 0);
        }
        // A new connection: its counter restarts (the sender resets its side too).
        self.path_rx[i] = 0;
        self.up |= path.bit();
    }

    fn path_down(&mut self, path: PathId, _now: Instant) {
        self.up &= !path.bit();
        self.ack_due &= !path.bit();
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn handle_timeout(&mut self, _now: Instant) {}

    fn stats(&self) -> ReceiverStats {
        self.stats.clone()
    }
}
