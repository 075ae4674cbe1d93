//! The Dockerfile builds what `make release` builds, on a minimal non-root base, from a
//! build context that keeps every workspace member. No Docker engine is needed.

use serde_json::Value;

use crate::helm::{read_repo_file, render};

/// `KEY = value` assignments of a Makefile fragment.
fn make_variable(text: &str, name: &str) -> String {
    text.lines()
        .find_map(|line| {
            let (key, value) = line.split_once(":=")?;
            (key.trim() == name).then(|| value.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("mk/helm.mk does not define {name}"))
}

#[test]
fn dockerfile_builds_the_release_binary_on_a_minimal_nonroot_base() {
    let dockerfile = read_repo_file("Dockerfile");
    let makefile = read_repo_file("mk/helm.mk");
    let cargo_toml = read_repo_file("Cargo.toml");

    // Same cargo command as `make release`.
    let release_args = make_variable(&makefile, "RELEASE_CARGO_ARGS");
    assert!(
        makefile.contains("cargo $(RELEASE_CARGO_ARGS)"),
        "make release runs cargo"
    );
    let docker_cargo = format!("cargo {release_args}");
    assert!(
        dockerfile
            .lines()
            .any(|l| l.trim().trim_end_matches('\\').trim() == docker_cargo),
        "the Dockerfile does not run `{docker_cargo}` (make release)"
    );
    for flag in ["build", "--release", "--locked", "--bin volmig"] {
        assert!(
            release_args.contains(flag),
            "make release lacks {flag}: {release_args}"
        );
    }
    assert!(
        !release_args.contains("--target"),
        "no --target: the binary is target/release/"
    );

    let stages: Vec<(String, Option<String>)> = dockerfile
        .lines()
        .filter_map(|l| l.trim().strip_prefix("FROM "))
        .map(|rest| {
            let mut words = rest.split_whitespace();
            let image = words.next().expect("FROM image").to_owned();
            let alias = match (words.next(), words.next()) {
                (Some(kw), Some(alias)) if kw.eq_ignore_ascii_case("AS") => Some(alias.to_owned()),
                _ => None,
            };
            (image, alias)
        })
        .collect();
    assert_eq!(
        stages.len(),
        2,
        "multi-stage: a build and a runtime stage: {stages:?}"
    );
    let (build_image, build_alias) = &stages[0];
    let rust_version = cargo_toml
        .lines()
        .find_map(|l| l.trim().strip_prefix("rust-version = "))
        .expect("workspace rust-version")
        .trim_matches('"');
    assert_eq!(
        build_image,
        &format!("docker.io/library/rust:{rust_version}-alpine"),
        "the build stage uses the Rust {rust_version} toolchain of Cargo.toml, on Alpine \
         (musl host target: a static binary)"
    );
    let alias = build_alias.as_deref().expect("the build stage is named");
    let (runtime_image, _) = &stages[1];
    assert!(
        runtime_image.starts_with("gcr.io/distroless/static")
            && runtime_image.ends_with(":nonroot"),
        "runtime base must be distroless static (no shell, no libc needed), nonroot: {runtime_image}"
    );
    assert!(
        dockerfile.contains("target/release/volmig"),
        "the image takes target/release/volmig, the file `make release` builds"
    );
    let copy = dockerfile
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("COPY --from={alias}")))
        .expect("the runtime stage copies from the build stage");
    let installed = copy.split_whitespace().last().expect("COPY destination");

    let user = dockerfile
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("USER "))
        .expect("USER in the runtime stage");
    let uid = user.split(':').next().expect("uid");
    let values: Value = serde_saphyr::from_str(&read_repo_file("charts/volmig/values.yaml"))
        .expect("values.yaml parses");
    assert_eq!(
        uid,
        values["podSecurityContext"]["runAsUser"].to_string(),
        "image user = chart"
    );
    assert_ne!(uid, "0");

    let entrypoint = dockerfile
        .lines()
        .find_map(|l| l.trim().strip_prefix("ENTRYPOINT "))
        .expect("ENTRYPOINT");
    let entrypoint: Vec<String> =
        serde_json::from_str(entrypoint).expect("ENTRYPOINT in exec form (no shell needed)");
    assert_eq!(
        entrypoint,
        [installed],
        "the entrypoint is the copied binary"
    );
    assert_eq!(
        render(&[]).args()[0],
        "run",
        "the chart's args start with the subcommand"
    );
    assert!(
        dockerfile.contains(&format!("EXPOSE {}", values["http"]["port"])),
        "EXPOSE matches the chart's http.port"
    );

    // The build context keeps every workspace member, the manifests and the lock file.
    let ignore = read_repo_file(".dockerignore");
    let patterns: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let mut needed = workspace_members(&cargo_toml);
    needed.extend(["Cargo.toml", "Cargo.lock", "src"].map(str::to_owned));
    for path in &needed {
        for pattern in &patterns {
            let pattern = pattern.trim_end_matches('/');
            assert!(
                !(path == pattern || path.starts_with(&format!("{pattern}/"))),
                ".dockerignore pattern {pattern:?} hides {path:?} from the image build"
            );
        }
    }
    assert!(
        patterns.contains(&"target"),
        ".dockerignore keeps target/ out of the context"
    );
}

/// `[workspace] members` of Cargo.toml, without the root package (just enough TOML).
fn workspace_members(cargo_toml: &str) -> Vec<String> {
    let missing = || panic!("Cargo.toml has no `[workspace] members = [...]`");
    let start = cargo_toml.find("members").unwrap_or_else(missing);
    let rest = &cargo_toml[start..];
    let open = rest.find('[').unwrap_or_else(missing);
    let close = rest.find(']').unwrap_or_else(missing);
    rest[open + 1..close]
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_owned())
        .filter(|m| !m.is_empty() && m != ".")
        .collect()
}
