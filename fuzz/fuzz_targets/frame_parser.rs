//! Any bytes into the frame decoder: no panic, no over-read, and whatever is accepted
//! re-encodes to exactly the bytes it came from.
#![no_main]

use fbdt_core::wire::Frame;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    while let Ok((frame, used)) = Frame::parse(rest) {
        assert!(used <= rest.len());
        let mut again = Vec::new();
        frame.emit(&mut again);
        assert_eq!(again.as_slice(), &rest[..used]);
        rest = &rest[used..];
    }
});
