//! `volmig`: command-line entry point. Parsing and wiring only; the library holds the logic.

use std::io::IsTerminal as _;
use std::process::ExitCode;

use tracing_subscriber::EnvFilter;
use volmig::cli::{Cli, Command, LogFormat, LogLevel};
use volmig::lookup::LookupError;

/// Exit code of `volmig lookup` for a path that is not registered yet.
const EXIT_NOT_REGISTERED: u8 = 3;

/// The filter directive of `--log-level`: volmig at the level, the Kubernetes client one
/// notch quieter at `info` (its `info` lines are per request).
fn level_directive(level: LogLevel) -> &'static str {
    match level {
        LogLevel::Error => "error",
        LogLevel::Warn => "warn",
        LogLevel::Info => "info,kube_client=warn",
        LogLevel::Debug => "debug",
        LogLevel::Trace => "trace",
    }
}

/// Logs to stderr at `level`, unless the `VOLMIG_LOG` filter is set: it wins, for
/// fine-grained filters (docs/operations.md "Logs").
fn init_logging(format: LogFormat, level: LogLevel) {
    let filter = EnvFilter::try_from_env("VOLMIG_LOG")
        .unwrap_or_else(|_| EnvFilter::new(level_directive(level)));
    // Colours only on a terminal: `kubectl logs` and log collectors get plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

fn main() -> ExitCode {
    // Run as `kubectl-volmig`, usage and help say `kubectl volmig`.
    let cli = Cli::parse_invocation(std::env::args_os());
    match cli.command {
        Command::Crd(args) => match if args.driver {
            volmig::k8s::driver_cache::crd_yaml()
        } else {
            volmig::volume_migration::crd_yaml()
        } {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: cannot render the CRD: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Run(args) if args.once => {
            init_logging(args.log_format, args.log_level);
            let result = runtime()
                .map_err(anyhow::Error::from)
                .and_then(|rt| rt.block_on(volmig::daemon::dry_run_once(*args)));
            print_rendered(result)
        }
        Command::Run(args) => {
            init_logging(args.log_format, args.log_level);
            let result = runtime()
                .map_err(anyhow::Error::from)
                .and_then(|rt| rt.block_on(volmig::daemon::run(*args)));
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = format!("{e:#}"), "volmig run failed");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Lookup(args) => {
            let result = runtime().map_err(anyhow::Error::from).and_then(|rt| {
                rt.block_on(async {
                    let client = volmig::daemon::kube_client(&args.kube).await?;
                    Ok(match (&args.pv, &args.volume_path) {
                        (Some(pv), _) => volmig::lookup::lookup_pv(client, pv).await,
                        (None, path) => {
                            volmig::lookup::lookup(client, path.as_deref().unwrap_or_default())
                                .await
                        }
                    })
                })
            });
            match result {
                Ok(Ok(id)) => {
                    println!("{id}");
                    ExitCode::SUCCESS
                }
                Ok(Err(e @ LookupError::NotRegisteredYet { .. })) => {
                    eprintln!("{e}");
                    ExitCode::from(EXIT_NOT_REGISTERED)
                }
                Ok(Err(e @ LookupError::InvalidPath(_))) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
                Ok(Err(e)) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Report(args) => {
            let result = runtime().map_err(anyhow::Error::from).and_then(|rt| {
                rt.block_on(async {
                    let client = volmig::daemon::kube_client(&args.kube).await?;
                    Ok(volmig::report::run(client, &args.options()).await?)
                })
            });
            print_rendered(result)
        }
        Command::Check(args) => check(&args),
    }
}

/// `volmig check`: every preflight line, then exit 0 (no ✗), 1 (a ✗) or 2 (bad arguments).
fn check(args: &volmig::cli::CheckArgs) -> ExitCode {
    let report = match runtime() {
        Ok(rt) => rt.block_on(volmig::check::run(args)),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(volmig::check::EXIT_ERROR);
        }
    };
    match volmig::check::render(&report, args.run.output) {
        Ok((text, code)) => {
            print!("{text}");
            ExitCode::from(code)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(volmig::check::EXIT_ERROR)
        }
    }
}

/// Prints what `volmig report` or `volmig run --dry-run --once` rendered and exits as
/// `volmig report` does: 0, 1, or 2 on errors.
fn print_rendered(result: anyhow::Result<volmig::report::Rendered>) -> ExitCode {
    match result {
        Ok(rendered) => {
            print!("{}", rendered.stdout);
            if let Some(line) = &rendered.stderr {
                eprintln!("{line}");
            }
            ExitCode::from(rendered.exit_code())
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(volmig::report::EXIT_ERROR)
        }
    }
}
