//! What a harness run can fail with, typed at the library's edge.

/// Why a backend could not run a scheme (or the parts around it).
///
/// The testbed's drivers and the scheme parser keep `anyhow` chains inside (the context
/// they add is the message); they cross this edge as [`HarnessError::Other`] with that
/// chain intact, so `{:#}` prints what it printed before.
#[derive(Debug, thiserror::Error)]
pub enum HarnessError {
    /// The emulated testbed builds network namespaces: it needs root.
    #[error("--backend emu needs root (CAP_NET_ADMIN) to build network namespaces: {0}")]
    NeedsRoot(String),
    #[error(transparent)]
    Scenario(#[from] fbdt_scenario::ScenarioError),
    #[error(transparent)]
    Sim(#[from] fbdt_sim::SimError),
    #[error(transparent)]
    Testbed(#[from] fbdt_emu::Error),
    /// One run of one scheme failed.
    #[error("scheme {scheme}, seed {seed}")]
    Run {
        scheme: String,
        seed: u64,
        #[source]
        source: Box<HarnessError>,
    },
    /// A failure the scheme parser or a testbed driver described (context chain intact).
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl HarnessError {
    /// This error as the failure of `scheme`'s run with `seed`.
    pub fn in_run(self, scheme: &str, seed: u64) -> Self {
        HarnessError::Run {
            scheme: scheme.to_string(),
            seed,
            source: Box::new(self),
        }
    }
}
