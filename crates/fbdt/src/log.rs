//! The crate's one logging macro (declared first in main.rs with `#[macro_use]`, so every
//! module names it as `log!` without importing the crate root).

/// A line on stderr that never fails the caller: with stderr closed (a supervisor gone)
/// `eprintln!` would panic and end a server's accept loop. Formatted first and written with
/// one system call (stderr is unbuffered: `writeln!` would write each piece on its own, and
/// lines of two threads could interleave).
macro_rules! log {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let line = format!("{}\n", format_args!($($t)*));
        let _ = std::io::stderr().write_all(line.as_bytes());
    }};
}
