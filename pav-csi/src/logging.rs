//! The log set-up of a driver's `main` (cargo feature `logging`): pav-csi's
//! and the provisioner's [`tracing`](https://docs.rs/tracing) events on
//! standard output, filtered by `RUST_LOG` (default `info`), as text or as
//! JSON lines.
//!
//! ```no_run
//! // In `main`, before serving; `--log-format json` on a command line
//! // parses into a `LogFormat` (it implements `FromStr`).
//! let format: pav_csi::logging::LogFormat = "json".parse()?;
//! pav_csi::logging::init(format);
//! # Ok::<(), pav_csi::logging::UnknownLogFormat>(())
//! ```
//!
//! Text is coloured only when standard output is a terminal: a container's
//! output is a pipe, and colour codes there reach `kubectl logs` and log
//! collectors as `ESC[2m…` noise. JSON is never coloured.

use std::io::IsTerminal as _;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::util::SubscriberInitExt as _;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum LogFormat {
    /// Lines for people to read, coloured only on a terminal.
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `fields`, `target`,
    /// and the spans the event happened in), for log collectors.
    Json,
}

impl LogFormat {
    /// Its name on command lines: `text` or `json`.
    pub fn name(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

impl std::fmt::Display for LogFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A log format name that is neither `text` nor `json`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown log format {0:?}: expected text or json")]
pub struct UnknownLogFormat(pub String);

impl std::str::FromStr for LogFormat {
    type Err = UnknownLogFormat;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        match name {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            _ => Err(UnknownLogFormat(name.to_owned())),
        }
    }
}

/// Installs the process-wide `tracing` subscriber: `format` on standard
/// output, filtered by `RUST_LOG` (`info` when unset or invalid).
///
/// Keeps an earlier set-up, so tests that start several components, or a
/// program that installed its own subscriber, are not disturbed.
pub fn init(format: LogFormat) {
    init_at(format, tracing::Level::INFO);
}

/// [`init`] with `level` as the filter when `RUST_LOG` is unset or
/// invalid (a driver's `--log-level`; `RUST_LOG` still refines it per
/// module).
pub fn init_at(format: LogFormat, level: tracing::Level) {
    let colour = coloured(format, std::io::stdout().is_terminal());
    // try_init also forwards the `log` records of dependencies that use it.
    let _ = subscriber(format, colour, filter_from_env(level), std::io::stdout).try_init();
}

/// Whether lines carry colour codes: text on a terminal only.
fn coloured(format: LogFormat, stdout_is_terminal: bool) -> bool {
    format == LogFormat::Text && stdout_is_terminal
}

/// `RUST_LOG`, or `level` when it is unset or cannot be parsed.
fn filter_from_env(level: tracing::Level) -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::default()
            .add_directive(tracing::level_filters::LevelFilter::from_level(level).into())
    })
}

/// The subscriber [`init`] installs, writing to `writer`.
fn subscriber<W>(
    format: LogFormat,
    colour: bool,
    filter: EnvFilter,
    writer: W,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour)
        .with_writer(writer);
    match format {
        LogFormat::Text => Box::new(builder.finish()),
        LogFormat::Json => Box::new(builder.json().finish()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// What a subscriber wrote, in memory.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// The lines `format` (with colour or not) writes for one event.
    fn logged(format: LogFormat, colour: bool) -> String {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = subscriber(format, colour, EnvFilter::new("info"), move || {
            writer.clone()
        });
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(volume = "pvc-1", "volume created");
            tracing::debug!("below the filter");
        });
        String::from_utf8(captured.0.lock().unwrap().clone()).unwrap()
    }

    /// `kubectl logs` showed `ESC[2m…`: pav coloured its lines whatever
    /// its output was.
    #[test]
    fn colour_only_for_text_on_a_terminal() {
        assert!(coloured(LogFormat::Text, true));
        assert!(!coloured(LogFormat::Text, false));
        assert!(!coloured(LogFormat::Json, true));
        assert!(!coloured(LogFormat::Json, false));

        let plain = logged(LogFormat::Text, false);
        assert!(plain.contains("volume created"), "{plain}");
        assert!(!plain.contains('\u{1b}'), "{plain:?}");
        // The switch is what keeps the codes out.
        assert!(logged(LogFormat::Text, true).contains('\u{1b}'));
    }

    #[test]
    fn json_is_one_object_per_line() {
        let lines = logged(LogFormat::Json, false);
        let events: Vec<serde_json::Value> = lines
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
            .collect();
        assert_eq!(events.len(), 1, "{lines}");
        assert_eq!(events[0]["level"], "INFO");
        assert_eq!(events[0]["fields"]["message"], "volume created");
        assert_eq!(events[0]["fields"]["volume"], "pvc-1");
    }

    #[test]
    fn formats_are_named_on_the_command_line() {
        for format in [LogFormat::Text, LogFormat::Json] {
            assert_eq!(format.to_string().parse(), Ok(format));
        }
        assert_eq!(LogFormat::default(), LogFormat::Text);
        assert_eq!(
            "JSON".parse::<LogFormat>().unwrap_err().to_string(),
            "unknown log format \"JSON\": expected text or json"
        );
    }
}
