//! Progress on stderr, drawn by `indicatif` (ten redraws a second; nothing
//! when stderr is not a terminal, so logs and pipes stay clean): one bar per
//! long command, its label the phase. `tigac convert` updates it as it
//! reads, sorts and writes; `tigac run` over a `.gfg` watches the rows its
//! page streams finish ([`tiga::Progress`]) from a thread of its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One bar for a whole command.
pub struct Bar {
    bar: indicatif::ProgressBar,
    label: String,
}

impl Bar {
    pub fn new() -> Bar {
        let bar = indicatif::ProgressBar::with_draw_target(None, indicatif::ProgressDrawTarget::stderr_with_hz(10));
        let style = indicatif::ProgressStyle::with_template("{msg:<24} [{bar:30}] {percent:>3}%")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("#-");
        bar.set_style(style);
        Bar { bar, label: String::new() }
    }

    pub fn update(&mut self, label: &str, done: u64, total: u64) {
        if label != self.label {
            self.label = label.to_string();
            self.bar.set_message(self.label.clone());
        }
        self.bar.set_length(total.max(1));
        self.bar.set_position(done.min(total.max(1)));
    }

    pub fn clear(&mut self) {
        self.bar.finish_and_clear();
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Draws a call's [`tiga::Progress`] until dropped. The count is polled
/// (ten times a second) rather than pushed, so the workers that advance it
/// never wait on the terminal.
pub struct Watch {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watch {
    /// Watch `progress` under `label`; `None` when stderr is not a
    /// terminal (nothing would be drawn).
    pub fn start(progress: &tiga::Progress, label: &str) -> Option<Watch> {
        use std::io::IsTerminal as _;
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s, label) = (progress.clone(), stop.clone(), label.to_string());
        let thread = std::thread::Builder::new()
            .name("tigac-progress".into())
            .spawn(move || {
                let mut bar = Bar::new();
                while !s.load(Ordering::Relaxed) {
                    let (done, total) = p.rows();
                    bar.update(&label, done, total);
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
            .ok()?;
        Some(Watch { stop, thread: Some(thread) })
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
