//! Progress bars that still say something when stderr is not a terminal (a CI log, `2>&1 |
//! tee`). indicatif hides its bars there, and with them every line printed through a bar
//! (`bar.println`: calibration fallbacks, rescaled runs). Off a terminal the bar becomes a
//! log: lines printed through it appear at once, and the bar's own line every
//! [`LOG_EVERY`].

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, TermLike};

/// How often the bar's line is logged when stderr is not a terminal.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(10);

/// A bar of `len` steps: drawn on a terminal, logged otherwise.
pub fn bar(len: u64) -> ProgressBar {
    if std::io::stderr().is_terminal() {
        ProgressBar::new(len)
    } else {
        ProgressBar::with_draw_target(Some(len), log_target())
    }
}

/// A spinner (no known length): drawn on a terminal, logged otherwise.
pub fn spinner() -> ProgressBar {
    if std::io::stderr().is_terminal() {
        ProgressBar::new_spinner()
    } else {
        ProgressBar::with_draw_target(None, log_target())
    }
}

fn log_target() -> ProgressDrawTarget {
    ProgressDrawTarget::term_like_with_hz(Box::new(LineLog::default()), 1)
}

/// A pretend terminal that turns indicatif's redraws into log lines. Each draw writes the
/// lines printed through the bar since the last one, then the bar itself as its last line.
#[derive(Debug, Default)]
struct LineLog {
    state: Mutex<LogState>,
}

#[derive(Debug, Default)]
struct LogState {
    /// Lines of the draw in progress, the last one still open.
    lines: Vec<String>,
    last_bar: Option<(Instant, String)>,
}

impl LogState {
    fn open_line(&mut self) -> &mut String {
        if self.lines.is_empty() {
            self.lines.push(String::new());
        }
        self.lines.last_mut().expect("just ensured")
    }

    /// Ends a draw: the lines printed through the bar, then the bar's line if it is due.
    fn finish_draw(&mut self, now: Instant) -> Vec<String> {
        let mut lines = std::mem::take(&mut self.lines);
        let Some(bar) = lines.pop() else {
            return lines;
        };
        lines.retain(|l| !l.is_empty());
        let due = match &self.last_bar {
            None => true,
            Some((at, text)) => now.duration_since(*at) >= LOG_EVERY && *text != bar,
        };
        if due && !bar.trim().is_empty() {
            lines.push(bar.trim_end().to_string());
            self.last_bar = Some((now, bar));
        }
        lines
    }
}

impl TermLike for LineLog {
    fn width(&self) -> u16 {
        100
    }
    fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
        Ok(())
    }
    fn write_line(&self, s: &str) -> std::io::Result<()> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.open_line().push_str(s);
        st.lines.push(String::new());
        Ok(())
    }
    fn write_str(&self, s: &str) -> std::io::Result<()> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.open_line().push_str(s);
        Ok(())
    }
    fn clear_line(&self) -> std::io::Result<()> {
        // Clearing what an earlier draw left on screen: a log keeps it.
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        for l in st.finish_draw(Instant::now()) {
            eprintln!("{l}");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One draw as indicatif makes it: lines joined by `write_line("")`, then a flush.
    fn draw(log: &mut LogState, lines: &[&str], now: Instant) -> Vec<String> {
        for (i, l) in lines.iter().enumerate() {
            if i > 0 {
                log.open_line();
                log.lines.push(String::new());
            }
            log.open_line().push_str(l);
        }
        log.finish_draw(now)
    }

    #[test]
    fn printed_lines_appear_at_once_and_the_bar_at_most_every_interval() {
        let mut log = LogState::default();
        let t0 = Instant::now();
        assert_eq!(draw(&mut log, &["[1/9] los"], t0), ["[1/9] los"]);
        assert!(draw(&mut log, &["[2/9] los"], t0 + Duration::from_secs(1)).is_empty());
        assert_eq!(
            draw(
                &mut log,
                &["scale is now 0.2", "[2/9] los"],
                t0 + Duration::from_secs(2)
            ),
            ["scale is now 0.2"]
        );
        assert_eq!(draw(&mut log, &["[3/9] los  "], t0 + LOG_EVERY), ["[3/9] los"]);
        // An unchanged bar is not logged again.
        assert!(draw(&mut log, &["[3/9] los  "], t0 + 3 * LOG_EVERY).is_empty());
        assert!(log.lines.is_empty());
    }
}
