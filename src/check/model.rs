//! What `volmig check` found (docs/operations.md, "Preflight: `volmig check`"): one
//! [`Check`] per line, and the rendering of all of them as a table or JSON. Pure.

use serde::Serialize;

/// One line of `volmig check`: a check that passed (`✓`), passed with a warning (`!`) or
/// failed (`✗`), what it found, and what to do when it did not pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Short name, e.g. `vCenter TLS`.
    pub name: String,
    /// False: the check failed (`✗`); `volmig check` exits 1.
    pub ok: bool,
    /// True: passed, but worth a look (`!`).
    pub warning: bool,
    /// What was found (never a password).
    pub detail: String,
    /// What to do when it did not pass (empty when it did).
    pub fix: String,
}

impl Check {
    /// A passed check.
    pub fn pass(name: &str, detail: impl Into<String>) -> Check {
        Check {
            name: name.to_owned(),
            ok: true,
            warning: false,
            detail: detail.into(),
            fix: String::new(),
        }
    }

    /// A passed check with a warning and what to do about it.
    pub fn warn(name: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name: name.to_owned(),
            ok: true,
            warning: true,
            detail: detail.into(),
            fix: fix.into(),
        }
    }

    /// A failed check and what to do.
    pub fn fail(name: &str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            name: name.to_owned(),
            ok: false,
            warning: false,
            detail: detail.into(),
            fix: fix.into(),
        }
    }

    /// `✓`, `!` or `✗`.
    pub fn mark(&self) -> &'static str {
        match (self.ok, self.warning) {
            (false, _) => "✗",
            (true, true) => "!",
            (true, false) => "✓",
        }
    }
}

/// Every check of one run, in order, and the verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    /// The checks, in the order they ran.
    pub checks: Vec<Check>,
    /// True when no check failed (warnings allowed).
    pub ok: bool,
}

impl CheckReport {
    /// The report of `checks`: ok when none failed.
    pub fn new(checks: Vec<Check>) -> CheckReport {
        let ok = checks.iter().all(|c| c.ok);
        CheckReport { checks, ok }
    }

    /// One line per check (`✓ name  detail`, the fix indented below a `✗` or `!`), then the
    /// verdict.
    pub fn table(&self) -> String {
        let width = self
            .checks
            .iter()
            .map(|c| c.name.chars().count())
            .max()
            .unwrap_or(0);
        let mut out = String::new();
        for check in &self.checks {
            out.push_str(&format!(
                "{} {:width$}  {}\n",
                check.mark(),
                check.name,
                check.detail
            ));
            if !check.fix.is_empty() && (!check.ok || check.warning) {
                out.push_str(&format!("  {:width$}  → {}\n", "", check.fix));
            }
        }
        out.push_str(&self.verdict());
        out.push('\n');
        out
    }

    /// `{"checks":[{"name","ok","warning","detail","fix"}],"ok":bool}`, pretty-printed.
    pub fn json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self)
            // Only strings and booleans: serialization cannot fail.
            .unwrap_or_else(|e| format!("{{\"error\":{:?}}}", e.to_string()));
        text.push('\n');
        text
    }

    /// `all N checks passed (W warnings)` or `F of N checks failed`.
    pub fn verdict(&self) -> String {
        let total = self.checks.len();
        let failed = self.checks.iter().filter(|c| !c.ok).count();
        let warnings = self.checks.iter().filter(|c| c.ok && c.warning).count();
        if failed == 0 {
            format!("all {total} checks passed ({warnings} warnings)")
        } else {
            format!("{failed} of {total} checks failed")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_check_fails_the_report_and_a_warning_does_not() {
        let warned = CheckReport::new(vec![
            Check::pass("a", "fine"),
            Check::warn("b", "hm", "look"),
        ]);
        assert!(warned.ok);
        assert_eq!(warned.verdict(), "all 2 checks passed (1 warnings)");
        let failed = CheckReport::new(vec![Check::pass("a", "fine"), Check::fail("b", "x", "y")]);
        assert!(!failed.ok);
        assert_eq!(failed.verdict(), "1 of 2 checks failed");
    }

    #[test]
    fn the_table_marks_each_line_and_shows_fixes_only_below_failures_and_warnings() {
        let report = CheckReport::new(vec![
            Check::pass("TLS", "verified"),
            Check::warn("Driver", "absent", "install it"),
            Check::fail("Login", "InvalidLogin", "check the credentials Secret"),
        ]);
        let table = report.table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines[0], "✓ TLS     verified");
        assert_eq!(lines[1], "! Driver  absent");
        assert_eq!(lines[2], "          → install it");
        assert_eq!(lines[3], "✗ Login   InvalidLogin");
        assert!(lines[4].ends_with("→ check the credentials Secret"));
        assert_eq!(lines[5], "1 of 3 checks failed");
    }

    #[test]
    fn json_has_the_documented_shape() {
        let report = CheckReport::new(vec![Check::fail("Login", "d", "f")]);
        let value: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"checks": [{"name": "Login", "ok": false, "warning": false,
                "detail": "d", "fix": "f"}], "ok": false})
        );
    }
}
