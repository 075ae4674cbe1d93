package main

import (
	"testing"

	cnstypes "github.com/vmware/govmomi/cns/types"
)

// A datastore filter goes by the datastore the harness recorded for a volume (upstream
// files backingDiskId registrations under any datastore), else by its DatastoreUrl.
func TestOnDatastore(t *testing.T) {
	m := &cnsManager{meta: map[string]*volumeMeta{
		"a": {id: "a", datastore: "LocalDS_1"},
		"b": {id: "b"},
	}}
	urls, names := map[string]bool{"/ds/LocalDS_1": true}, map[string]bool{"LocalDS_1": true}
	vol := func(id, url string) cnstypes.CnsVolume {
		return cnstypes.CnsVolume{VolumeId: cnstypes.CnsVolumeId{Id: id}, DatastoreUrl: url}
	}
	if !m.onDatastore(vol("a", "/ds/LocalDS_0"), urls, names) {
		t.Error("recorded on LocalDS_1, whatever upstream's URL")
	}
	if m.onDatastore(vol("a", "/ds/LocalDS_1"), urls, map[string]bool{"LocalDS_0": true}) {
		t.Error("recorded on LocalDS_1, filter names LocalDS_0")
	}
	if !m.onDatastore(vol("b", "/ds/LocalDS_1"), urls, names) || m.onDatastore(vol("c", "/ds/LocalDS_0"), urls, names) {
		t.Error("without a recorded datastore the URL decides")
	}
}
