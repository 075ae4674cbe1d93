//! How the in-memory backend plays a vCenter release: what registration protects, whether
//! flags stick, what queries report, and whether CNS refuses a second registration
//! (docs/design.md §8.3, §8.7).

use super::InMemoryBackend;

impl InMemoryBackend {
    /// Behave like vCenter 8.0.3 and later (`true`: a registration sets `keepAfterDeleteVm`,
    /// and [`VolumeBackend::protect_from_vm_delete`] registers the volume again, which sets
    /// it) or like older ones (`false`, the default: it sets the flag and reads it back).
    /// Either way, volumes created before keep the flag they had.
    pub fn set_registration_protects(&self, protects: bool) {
        self.lock().registration_protects = protects;
    }

    /// Below 8.0.3: setting `keepAfterDeleteVm` answers success but sets nothing (a flag
    /// that does not stick), so only reading it back tells.
    pub fn set_flags_ignored(&self, ignored: bool) {
        self.lock().flags_ignored = ignored;
    }

    /// Whether [`VolumeBackend::refuses_re_registration`] reports a release from 7.0
    /// Update 1 on (`true`, the default) or an older one.
    pub fn set_refuses_re_registration(&self, refuses: bool) {
        self.lock().before_7_0_u1 = !refuses;
    }

    /// Whether queries report each volume's creation time (`true`, the default) or leave
    /// it out as CNS does (`false`: only [`VolumeBackend::creation_time`] tells).
    pub fn set_queries_report_created(&self, report: bool) {
        self.lock().hide_created = !report;
    }
}
