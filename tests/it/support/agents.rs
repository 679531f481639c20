//! Real A2A agents run as child processes: those built on the official SDKs, the Python one
//! (`tests/agents/python`, a2a-sdk 1.3.0) and the JS one (`tests/agents/js`, @a2a-js/sdk 1.3.0),
//! and those built on independent A2A libraries ([`Library`], `tests/agents/<library>`: the
//! Python ones each in a virtualenv of its own, the Rust ones each a Cargo project of its own,
//! built by `.ci/run`). Each prints `READY <origin>` once it accepts connections.
//!
//! Where an SDK's runtime (or a Rust agent's binary) is missing the test is skipped loudly
//! (counted in the skip summary), unless `CARDGATE_REQUIRE_SDK_AGENTS=1` (set by `.ci/run`),
//! which makes it fail instead.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::repo_path;

/// Which SDK the agent is built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sdk {
    Python,
    Js,
}

impl Sdk {
    /// The program and script that run this SDK's agent, if its runtime is set up.
    fn command(self) -> Result<(PathBuf, PathBuf), String> {
        match self {
            Sdk::Python => {
                let python = std::env::var_os("CARDGATE_TEST_PYTHON")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| repo_path("tests/agents/python/.venv/bin/python"));
                if !python.exists() {
                    return Err(format!(
                        "the Python SDK agent's virtualenv is missing at {} (set CARDGATE_TEST_PYTHON or see tests/agents/python/README.md)",
                        python.display()
                    ));
                }
                Ok((python, repo_path("tests/agents/python/agent.py")))
            }
            Sdk::Js => {
                if !repo_path("tests/agents/js/node_modules/@a2a-js/sdk").exists() {
                    return Err(
                        "the JS SDK agent's packages are missing (run `npm ci` in tests/agents/js)"
                            .into(),
                    );
                }
                let node = std::env::var_os("CARDGATE_TEST_NODE")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| PathBuf::from("node"));
                Ok((node, repo_path("tests/agents/js/agent.mjs")))
            }
        }
    }
}

/// A running SDK agent; killed when dropped.
pub(crate) struct SdkAgent {
    /// Where the agent listens.
    pub origin: String,
    _child: Child,
}

impl SdkAgent {
    /// Starts the agent; `public_url` is the origin its card names (a proxy in front of it).
    /// `None` when the SDK's runtime is missing and the test may be skipped.
    pub(crate) async fn start(sdk: Sdk, public_url: Option<&str>) -> Option<Self> {
        Self::start_with(sdk, public_url, &[]).await
    }

    /// Starts the agent with extra arguments (e.g. the Python agent's `--grpc-only`).
    pub(crate) async fn start_with(
        sdk: Sdk,
        public_url: Option<&str>,
        extra: &[&str],
    ) -> Option<Self> {
        let (program, script) = match sdk.command() {
            Ok(found) => found,
            Err(why) => {
                super::skip(
                    &format!("{sdk:?} SDK agent"),
                    &why,
                    "CARDGATE_REQUIRE_SDK_AGENTS",
                );
                return None;
            }
        };
        let mut args = vec!["--host", "127.0.0.1", "--port", "0"];
        if sdk == Sdk::Python {
            args.extend(["--slow-seconds", "2"]);
        }
        if let Some(url) = public_url {
            args.extend(["--public-url", url]);
        }
        args.extend(extra);
        Some(Self::spawn(&format!("{sdk:?} SDK"), &program, Some(&script), &args).await)
    }

    /// Runs `program [script] args…` and waits for its `READY <origin>` line.
    async fn spawn(name: &str, program: &Path, script: Option<&Path>, args: &[&str]) -> Self {
        let mut child = Command::new(program)
            .args(script)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", program.display()));
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let origin = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(origin) = line.strip_prefix("READY ") {
                    return Some(origin.trim().to_string());
                }
            }
            None
        })
        .await
        .unwrap_or_else(|_| panic!("the {name} agent did not start within 60 s"))
        .unwrap_or_else(|| panic!("the {name} agent exited before it was ready"));
        Self {
            origin,
            _child: child,
        }
    }

    /// Starts the agent built on `library`; `None` when its virtualenv (or binary) is missing
    /// and the test may be skipped.
    pub(crate) async fn start_library(library: Library) -> Option<Self> {
        let found = if library.is_rust() {
            library.binary().map(|binary| (binary, None))
        } else {
            library.python().map(|python| {
                let script = repo_path(&format!("tests/agents/{}/agent.py", library.name()));
                (python, Some(script))
            })
        };
        let (program, script) = match found {
            Ok(found) => found,
            Err(why) => {
                super::skip(
                    &format!("{} agent", library.name()),
                    &why,
                    "CARDGATE_REQUIRE_SDK_AGENTS",
                );
                return None;
            }
        };
        let args = ["--host", "127.0.0.1", "--port", "0"];
        Some(Self::spawn(library.name(), &program, script.as_deref(), &args).await)
    }
}

/// The OpenID Connect provider the credential tests authenticate against
/// (`tests/agents/js/oidc.mjs`, on the npm package `oidc-provider`); `origin` is its issuer.
pub(crate) async fn start_oidc(args: &[&str]) -> Option<SdkAgent> {
    let (node, _) = match Sdk::Js.command() {
        Ok(found) => found,
        Err(why) => {
            super::skip(
                "OpenID Connect provider",
                &why,
                "CARDGATE_REQUIRE_SDK_AGENTS",
            );
            return None;
        }
    };
    let script = repo_path("tests/agents/js/oidc.mjs");
    let mut all = vec!["--host", "127.0.0.1", "--port", "0"];
    all.extend(args);
    Some(SdkAgent::spawn("OpenID Connect provider", &node, Some(&script), &all).await)
}

/// An A2A server library other than the official SDKs, as a test agent: its own
/// implementation of the protocol, built the way its documentation shows
/// (`tests/agents/<name>/README.md` says how, and what it sends).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Library {
    /// pydantic's FastA2A (`fasta2a` on PyPI).
    Fasta2a,
    /// `python-a2a` on PyPI.
    PythonA2a,
    /// chuk's `a2a-server` on PyPI (with `a2a-json-rpc` 0.3.0).
    A2aServer,
    /// `turul-a2a` on crates.io (a Rust binary, `turul-a2a-agent`).
    TurulA2a,
    /// `a2a-protocol-server` on crates.io, tomtom215's a2a-rust (a Rust binary,
    /// `a2a-protocol-server-agent`).
    A2aProtocolServer,
}

impl Library {
    /// The folder under `tests/agents` (and the virtualenv's suffix, or the binary's prefix).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Library::Fasta2a => "fasta2a",
            Library::PythonA2a => "python-a2a",
            Library::A2aServer => "a2a-server",
            Library::TurulA2a => "turul-a2a",
            Library::A2aProtocolServer => "a2a-protocol-server",
        }
    }

    /// Whether the agent is a Rust binary rather than a Python script.
    fn is_rust(self) -> bool {
        matches!(self, Library::TurulA2a | Library::A2aProtocolServer)
    }

    /// The `CARDGATE_TEST_*_<NAME>` suffix: the name in upper case, `-` as `_`.
    fn env_suffix(self) -> String {
        self.name().to_ascii_uppercase().replace('-', "_")
    }

    /// The Rust agent's binary: `CARDGATE_TEST_AGENT_<NAME>` (set by `.ci/run`), else
    /// `<name>-agent` in the debug directory of `$CARGO_TARGET_DIR` (`target` in the repo when
    /// unset), where `cargo build --manifest-path tests/agents/<name>/Cargo.toml` puts it.
    fn binary(self) -> Result<PathBuf, String> {
        let var = format!("CARDGATE_TEST_AGENT_{}", self.env_suffix());
        let binary = std::env::var_os(&var)
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                std::env::var_os("CARGO_TARGET_DIR")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| repo_path("target"))
                    .join("debug")
                    .join(format!("{}-agent", self.name()))
            });
        if binary.exists() {
            Ok(binary)
        } else {
            Err(format!(
                "the {} agent's binary is missing at {} (set {var}, or build it: cargo build --manifest-path tests/agents/{}/Cargo.toml)",
                self.name(),
                binary.display(),
                self.name()
            ))
        }
    }

    /// The Python of the library's virtualenv: `CARDGATE_TEST_PYTHON_<NAME>` (set by
    /// `.ci/run`), else `/var/tmp/cardgate-pyenv-<name>`, where `.ci/run` creates it.
    fn python(self) -> Result<PathBuf, String> {
        let var = format!("CARDGATE_TEST_PYTHON_{}", self.env_suffix());
        let python = std::env::var_os(&var)
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(format!(
                    "/var/tmp/cardgate-pyenv-{}/bin/python",
                    self.name()
                ))
            });
        if python.exists() {
            Ok(python)
        } else {
            Err(format!(
                "the {} agent's virtualenv is missing at {} (set {var}, or see tests/agents/{}/README.md)",
                self.name(),
                python.display(),
                self.name()
            ))
        }
    }
}
