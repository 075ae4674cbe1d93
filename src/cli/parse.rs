//! Value parsers of the command line: rates, the vCenter URL, durations.

use std::time::Duration;

/// Highest accepted `--vc-requests-per-second`.
pub const MAX_REQUESTS_PER_SECOND: f64 = 10_000.0;

/// Parses `--vc-requests-per-second`: a finite number above 0 and at most
/// [`MAX_REQUESTS_PER_SECOND`] (the rate limiter spaces calls by its inverse).
pub fn parse_requests_per_second(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    if !value.is_finite() || value <= 0.0 || value > MAX_REQUESTS_PER_SECOND {
        return Err(format!(
            "{text:?}: must be a number above 0 and at most {MAX_REQUESTS_PER_SECOND}"
        ));
    }
    // Spacing below a microsecond-per-call is meaningless; tiny rates would make the
    // limiter wait for ages (or overflow): at least one call every hour.
    if value < 1.0 / 3600.0 {
        return Err(format!(
            "{text:?}: too small; at least one request per hour (0.0003) is needed"
        ));
    }
    Ok(value)
}

/// Parses `--vc-url`: an `https` URL with a host. Plain `http` is refused: volmig would
/// send the vCenter password unencrypted. So is a URL with a user or password in it
/// (`https://user:password@vc/sdk`); the error shows neither.
pub fn parse_vc_url(text: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(text.trim()).map_err(|e| format!("not a URL: {e}"))?;
    crate::vcenter_config::check_url(&url)?;
    Ok(url)
}

/// The `--vc-url` parser: [`parse_vc_url`], with errors that never repeat the value (it
/// may embed a password).
#[derive(Debug, Clone, Copy)]
pub struct VcUrlParser;

impl clap::builder::TypedValueParser for VcUrlParser {
    type Value = url::Url;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<url::Url, clap::Error> {
        let invalid = |message: String| {
            // A message that names the flag itself needs no prefix.
            let message = if message.starts_with("--vc-url ") {
                format!("{message}\n")
            } else {
                format!("invalid value for --vc-url: {message}\n")
            };
            clap::Error::raw(clap::error::ErrorKind::ValueValidation, message).with_cmd(cmd)
        };
        let text = value
            .to_str()
            .ok_or_else(|| invalid("not UTF-8".to_owned()))?;
        parse_vc_url(text).map_err(invalid)
    }
}

/// Parses durations like `10m`, `30s`, `1h30m`, `250ms` (jiff's friendly format; ISO 8601
/// such as `PT10M` works too). Must be positive.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let parsed: jiff::SignedDuration = text
        .parse()
        .map_err(|e| format!("{text:?}: not a duration like 10m, 30s or 250ms ({e})"))?;
    if parsed.is_negative() || parsed.is_zero() {
        return Err(format!("{text:?}: must be greater than zero"));
    }
    Duration::try_from(parsed).map_err(|e| format!("{text:?}: {e}"))
}
