//! Who registers now, as the registrar, the metric, the log and the Events name it.

use std::fmt;

/// Who registers now (docs/design.md §8.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistrarMode {
    /// The syncer's Lease (or the driver's Deployment) has not been looked at yet: nobody is
    /// presumed absent.
    Unknown,
    /// `--hold-driver-syncer`: volmig is taking the syncer's Lease (free or expired) and
    /// creates nothing until it holds it.
    Acquiring,
    /// No live syncer: volmig registers.
    Own,
    /// volmig holds the driver syncer's Lease as `holder` (`--hold-driver-syncer`), so the
    /// stock syncer cannot lead: volmig registers.
    Hold {
        /// volmig's holder identity in the Lease (`volmig/<replica>`).
        holder: String,
    },
    /// The driver's syncer leads as `holder`: volmig creates nothing and adopts its IDs.
    Follow {
        /// The Lease's `holderIdentity`, or what runs without a Lease.
        holder: String,
    },
}

impl RegistrarMode {
    /// The value of the `mode` label of `volmig_registrar_mode`. Acquiring counts as
    /// `unknown`: volmig creates nothing, and an acquisition that never ends (e.g. no RBAC
    /// to write the Lease) is what the unknown-mode alert is for.
    pub fn label(&self) -> &'static str {
        match self {
            RegistrarMode::Unknown | RegistrarMode::Acquiring => "unknown",
            RegistrarMode::Own => "own",
            RegistrarMode::Hold { .. } => "hold",
            RegistrarMode::Follow { .. } => "follow",
        }
    }

    /// True when volmig may create CNS volumes in this mode.
    pub fn registers(&self) -> bool {
        matches!(self, RegistrarMode::Own | RegistrarMode::Hold { .. })
    }
}

impl fmt::Display for RegistrarMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegistrarMode::Unknown => f.write_str(
                "unknown (the CSI driver's syncer Lease or controller Deployment has not been read yet)",
            ),
            RegistrarMode::Acquiring => f.write_str(
                "acquiring (--hold-driver-syncer: volmig takes the CSI driver's syncer Lease and creates nothing until it holds it)",
            ),
            RegistrarMode::Own => f.write_str("own (no live CSI driver syncer: volmig registers)"),
            RegistrarMode::Hold { holder } => write!(
                f,
                "hold (volmig holds the CSI driver's syncer Lease as {holder}, so the driver's syncer cannot lead; volmig registers)"
            ),
            RegistrarMode::Follow { holder } => write!(
                f,
                "follow (the CSI driver's syncer {holder} leads and registers; volmig adopts)"
            ),
        }
    }
}
