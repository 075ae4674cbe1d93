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
    /// No CSI driver is deployed and volmig holds the driver syncer's Lease as `holder`,
    /// without hand-over: volmig registers, and a driver installed later finds the Lease held.
    Own {
        /// volmig's holder identity in the Lease (`volmig/<replica>`).
        holder: String,
    },
    /// volmig holds the driver syncer's Lease as `holder` (`--hold-driver-syncer`) until every
    /// path is Registered and published, so the stock syncer cannot lead: volmig registers.
    Hold {
        /// volmig's holder identity in the Lease (`volmig/<replica>`).
        holder: String,
    },
    /// `--driver-syncer-lease` is empty: volmig registers without any Lease (an explicit
    /// opt-out for clusters that will never run the CSI driver's syncer; unit tests).
    Unguarded,
    /// Nobody may register now and volmig may not take the Lease: the driver's syncer Lease
    /// lapsed while its controller Deployment stands (a rollout, a crash loop: the next syncer
    /// leads soon), or a lapsed syncer's `registerVolume` may still run (the in-flight grace).
    Waiting {
        /// Why, for the log, the Event and `volmig report`.
        reason: String,
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
            RegistrarMode::Own { .. } | RegistrarMode::Unguarded => "own",
            RegistrarMode::Hold { .. } => "hold",
            // The driver's syncer is the registrar-to-be: volmig creates nothing, as in follow.
            RegistrarMode::Follow { .. } | RegistrarMode::Waiting { .. } => "follow",
        }
    }

    /// True when volmig may create CNS volumes in this mode: only while it holds the driver
    /// syncer's Lease (docs/design.md §8.2).
    pub fn registers(&self) -> bool {
        matches!(
            self,
            RegistrarMode::Own { .. } | RegistrarMode::Hold { .. } | RegistrarMode::Unguarded
        )
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
            RegistrarMode::Own { holder } => write!(
                f,
                "own (no CSI driver is deployed; volmig holds its syncer Lease as {holder}, without hand-over, and registers)"
            ),
            RegistrarMode::Unguarded => f.write_str(
                "unguarded (--driver-syncer-lease is empty: volmig registers without holding any Lease; never run it so beside the CSI driver)",
            ),
            RegistrarMode::Hold { holder } => write!(
                f,
                "hold (volmig holds the CSI driver's syncer Lease as {holder}, so the driver's syncer cannot lead; volmig registers)"
            ),
            RegistrarMode::Follow { holder } => write!(
                f,
                "follow (the CSI driver's syncer {holder} leads and registers; volmig adopts)"
            ),
            RegistrarMode::Waiting { reason } => write!(
                f,
                "waiting ({reason}; volmig creates nothing and adopts what the driver registers)"
            ),
        }
    }
}
