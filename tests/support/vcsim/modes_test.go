package main

import "testing"

// CnsAlreadyRegisteredFault exists since vSphere 7.0 Update 1: only the 7.0.3 and 8.0.3
// releases refuse a second registration by themselves.
func TestReleasesWithAlreadyRegisteredFault(t *testing.T) {
	want := map[string]bool{"6.5": false, "6.7.3": false, "6.7U3l": false, "7.0.0": false, "7.0.3": true, "8.0.3": true}
	for _, v := range vcVersions {
		if got, ok := want[v.Name]; !ok || v.refusesReRegistration() != got {
			t.Errorf("%s: refusesReRegistration() = %v, want %v (known: %v)", v.Name, v.refusesReRegistration(), got, ok)
		}
	}
}

// A volume's FCD is the one a backingDiskId registration named, else the volume itself.
func TestVolumeFcdID(t *testing.T) {
	if got := (&volumeMeta{id: "v1"}).fcdID(); got != "v1" {
		t.Errorf("by URL: %q", got)
	}
	if got := (&volumeMeta{id: "v2", backingDiskID: "f1"}).fcdID(); got != "f1" {
		t.Errorf("by backingDiskId: %q", got)
	}
}
