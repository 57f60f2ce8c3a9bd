//! The frame parser's fuzz seeds (`fuzz/seeds/frame_parser/`): one frame of every type of
//! the current wire version, built here from the typed frames, and `all` with every one in
//! a row. The files must be what this test builds — a seed of an older wire version only
//! teaches the fuzzer the refusal path (the seeds were version 2 until wire v6). After a
//! wire change: `UPDATE_SEEDS=1 cargo test -p fbdt-core --test fuzz_seeds`.

use std::path::{Path, PathBuf};

use fbdt_core::wire::{
    Ack, Align, Close, Data, DataAck, Frame, Hello, Join, JoinOk, LaneRepr, MpData, PathRx, Scheme, Stalled, NO_PATH,
};
use fbdt_core::seq::Seq;

fn seeds() -> Vec<(&'static str, Frame<'static>)> {
    vec![
        (
            "hello",
            Frame::Hello(Hello {
                scheme: Scheme::Fbdt,
                isn: 123,
                recv_buffer: 512 << 10,
                segment_size: 16 << 10,
                key: std::array::from_fn(|i| i as u8),
            }),
        ),
        (
            "join",
            Frame::Join(Join {
                token: *b"\x01\x02\x03\x04\x05\x06\x07\x08",
                path_index: 1,
                epoch: 1,
                hmac: std::array::from_fn(|i| 0x20 + i as u8),
            }),
        ),
        (
            "join_ok",
            Frame::JoinOk(JoinOk {
                path_index: 1,
                epoch: 1,
                hmac: [0x5a; 32],
            }),
        ),
        (
            "stalled",
            Frame::Stalled(Stalled { path_index: 1, epoch: 1 }),
        ),
        (
            "data",
            Frame::Data(Data {
                seq: Seq(0xffff_fff0),
                fin: true,
                payload: b"payload",
            }),
        ),
        (
            "ack",
            Frame::Ack(Ack {
                cum: Seq(5),
                window: 1000,
                fin: false,
                path_rx: vec![PathRx { epoch: 0, bytes: 1 }, PathRx { epoch: 2, bytes: 1 << 20 }]
                    .into_iter()
                    .collect(),
                ranges: vec![(Seq(7), Seq(9))].into_iter().collect(),
            }),
        ),
        (
            "align",
            Frame::Align(Align {
                window_id: 1,
                start: Seq(0),
                end: Seq(100),
                lanes: vec![LaneRepr {
                    lo: Seq(0),
                    hi: Seq(100),
                    bottom: 0,
                    top: NO_PATH,
                }],
            }),
        ),
        (
            "close",
            Frame::Close(Close {
                code: 3,
                reason: "flow control".into(),
            }),
        ),
        (
            "mp_data",
            Frame::MpData(MpData {
                dsn: 1 << 40,
                fin: false,
                payload: b"meta payload",
            }),
        ),
        (
            "data_ack",
            Frame::DataAck(DataAck {
                data_ack: 1 << 40,
                window: 6 << 20,
                fin: false,
                path_rx: vec![PathRx { epoch: 0, bytes: 3 }],
            }),
        ),
    ]
}

fn encode(f: &Frame) -> Vec<u8> {
    let mut out = Vec::new();
    f.emit(&mut out);
    out
}

#[test]
fn the_frame_parser_seeds_are_frames_of_the_current_wire() {
    let dir: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/frame_parser");
    let update = std::env::var_os("UPDATE_SEEDS").is_some();
    let mut all = Vec::new();
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for (name, frame) in seeds() {
        let bytes = encode(&frame);
        // What the fuzz target checks of every input it accepts.
        assert_eq!(Frame::parse(&bytes).unwrap(), (frame, bytes.len()), "{name}");
        all.extend_from_slice(&bytes);
        files.push((name.to_string(), bytes));
    }
    files.push(("all".to_string(), all));
    for (name, bytes) in &files {
        let path = dir.join(name);
        if update {
            std::fs::write(&path, bytes).unwrap();
        } else {
            let stored = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert_eq!(&stored, bytes, "seed {name} is stale: UPDATE_SEEDS=1 cargo test -p fbdt-core --test fuzz_seeds");
        }
    }
    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    let mut built: Vec<String> = files.into_iter().map(|(n, _)| n).collect();
    built.sort();
    assert_eq!(on_disk, built, "a seed file this test does not build");
}
