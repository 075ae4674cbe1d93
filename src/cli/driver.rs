//! Where the vSphere CSI driver runs, and how volmig stands beside it (docs/design.md §8.7).

use clap::Args;

/// Where the vSphere CSI driver runs (`volmig run` and `volmig report`, docs/design.md §8).
#[derive(Debug, Clone, Args)]
pub struct DriverArgs {
    /// Namespace of the vSphere CSI driver (where its syncer's Lease and its cluster-ID
    /// ConfigMap `vsphere-csi-cluster-id` live).
    #[arg(
        long,
        env = "VOLMIG_DRIVER_NAMESPACE",
        default_value = "vmware-system-csi",
        value_parser = clap::builder::NonEmptyStringValueParser::new()
    )]
    pub driver_namespace: String,

    /// The Lease the CSI driver's syncer leads with. While another holder renews it, the
    /// driver registers in-tree vmdks itself and volmig creates nothing (it adopts); an
    /// empty value never follows the driver (only where no driver syncer runs).
    #[arg(
        long,
        env = "VOLMIG_DRIVER_SYNCER_LEASE",
        default_value = "vsphere-syncer"
    )]
    pub driver_syncer_lease: String,

    /// The CSI driver's controller Deployment. When its `vsphere-syncer` container runs
    /// without `--leader-election` (and has an available replica), the driver registers
    /// without any Lease: volmig follows it. Empty: not looked at.
    #[arg(
        long,
        env = "VOLMIG_DRIVER_DEPLOYMENT",
        default_value = "vsphere-csi-controller"
    )]
    pub driver_deployment: String,
}

impl DriverArgs {
    /// The driver syncer's Lease to follow.
    pub fn syncer_lease(&self) -> crate::syncer_lease::SyncerLeaseConfig {
        crate::syncer_lease::SyncerLeaseConfig {
            namespace: self.driver_namespace.clone(),
            lease_name: self.driver_syncer_lease.clone(),
            deployment: self.driver_deployment.clone(),
        }
    }
}
