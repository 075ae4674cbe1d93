package main

import cnstypes "github.com/vmware/govmomi/cns/types"

// onDatastore tells whether v lives on one of the filter's datastores: by the datastore
// the harness recorded for it (upstream files a registration by backingDiskId under any
// datastore, so its DatastoreUrl may name another one), else by its DatastoreUrl. A
// volmig look-up by backing disk on vCenters older than 7.0 Update 1 lists a datastore
// this way (docs/design.md §4.3).
func (m *cnsManager) onDatastore(v cnstypes.CnsVolume, urls, names map[string]bool) bool {
	if vm := m.meta[v.VolumeId.Id]; vm != nil && vm.datastore != "" {
		return names[vm.datastore]
	}
	return urls[v.DatastoreUrl]
}
