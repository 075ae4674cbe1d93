//! The shell commands of docs/operations.md's runbooks, as an admin would copy them:
//! the `sh` blocks of a section, continuation lines joined, step comments (`# 3`)
//! removed. For tests that walk a runbook in order (tests/hold_runbook.rs).
#![allow(dead_code)] // each test crate uses a different subset
#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test support: a missing section should fail the test loudly"
)]

use super::e2e::helm;

/// The commands of case B's `sh` block, continuation lines joined, step comments removed.
pub fn runbook_commands() -> Vec<String> {
    let docs = helm::read_repo_file("docs/operations.md");
    let case_b = docs
        .split_once("**Case B")
        .expect("docs/operations.md has a case B")
        .1;
    let block = case_b
        .split_once("```sh\n")
        .expect("case B has an sh block")
        .1
        .split_once("\n```")
        .unwrap()
        .0;
    commands_of(block)
}

/// The commands of every `sh` block of "Decommissioning volmig", in order.
pub fn decommission_commands() -> Vec<String> {
    let docs = helm::read_repo_file("docs/operations.md");
    let section = docs
        .split_once("### Decommissioning volmig")
        .expect("docs/operations.md has a decommission procedure")
        .1
        .split_once("\n## ")
        .unwrap()
        .0;
    section
        .split("```sh\n")
        .skip(1)
        .flat_map(|block| commands_of(block.split_once("```").unwrap().0))
        .collect()
}

/// The commands of one `sh` block.
pub fn commands_of(block: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut current = String::new();
    for line in block.lines() {
        let line = strip_step_comment(line);
        match line.strip_suffix('\\') {
            Some(head) => current.push_str(head),
            None => {
                current.push_str(line);
                commands.push(current.split_whitespace().collect::<Vec<_>>().join(" "));
                current.clear();
            }
        }
    }
    commands
}

/// `cmd  # 3` → `cmd`.
fn strip_step_comment(line: &str) -> &str {
    match line.rsplit_once(" #") {
        Some((head, tail)) if tail.trim().chars().all(|c| c.is_ascii_digit()) => head.trim_end(),
        _ => line.trim_end(),
    }
}

/// The shell words of one command (single quotes only, as the runbook uses).
pub fn words(command: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in command.chars() {
        match c {
            '\'' => quoted = !quoted,
            ' ' if !quoted => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            c => word.push(c),
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}
