package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// adminVolume is one entry of GET /debug/cns/volumes.
type adminVolume struct {
	ID                 string `json:"id"`
	Name               string `json:"name"`
	VolumeType         string `json:"volumeType"`
	BackingPath        string `json:"backingPath"`
	BackingDiskURLPath string `json:"backingDiskUrlPath"`
	Datastore          string `json:"datastore"`
	ClusterID          string `json:"clusterId"`
	CreateTime         string `json:"createTime"`
	// KeepAfterDeleteVM is the keepAfterDeleteVm flag of the volume's FCD.
	KeepAfterDeleteVM bool `json:"keepAfterDeleteVm"`
}

func writeJSON(w http.ResponseWriter, code int, v interface{}) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// serveAdmin serves the unauthenticated test endpoints; they read and change the
// simulator's state directly, never through SOAP.
func (h *harness) serveAdmin(w http.ResponseWriter, r *http.Request) {
	p := strings.TrimSuffix(r.URL.Path, "/")
	switch {
	case p == "/debug/cns/volumes" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, h.listVolumes())
	case strings.HasPrefix(p, "/debug/cns/volumes/") && r.Method == http.MethodDelete:
		id := strings.TrimPrefix(p, "/debug/cns/volumes/")
		var found bool
		h.cnsReg.WithLock(h.cns, func() { found = h.cns.removeVolume(context.Background(), id, false) })
		if !found {
			writeError(w, http.StatusNotFound, fmt.Sprintf("CNS volume %s not found", id))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case p == "/debug/vmdks" && r.Method == http.MethodPost:
		h.postVmdk(w, r)
	case p == "/debug/stats" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, h.stats.snapshot())
	case p == "/debug/stats/reset" && r.Method == http.MethodPost:
		h.stats.reset()
		w.WriteHeader(http.StatusNoContent)
	case p == "/debug/sessions/expire" && r.Method == http.MethodPost:
		writeJSON(w, http.StatusOK, map[string]int{"expired": h.expireSessions()})
	case p == "/debug/modes" && (r.Method == http.MethodGet || r.Method == http.MethodPost):
		h.serveModes(w, r)
	case p == "/debug/credentials" && r.Method == http.MethodPost:
		h.serveCredentials(w, r)
	case p == "/debug/credentials" && r.Method == http.MethodGet:
		user, pass := h.credentials()
		writeJSON(w, http.StatusOK, map[string]string{"username": user, "password": pass})
	case p == "/debug/cns/creates" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, h.creates.list())
	case p == "/debug/cns/creates" && r.Method == http.MethodDelete:
		h.creates.reset()
		w.WriteHeader(http.StatusNoContent)
	case p == "/debug/vslm/objects" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, h.fcds.list())
	case p == "/debug" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, h.startLine())
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no admin endpoint %s %s", r.Method, r.URL.Path))
	}
}

func (h *harness) listVolumes() []adminVolume {
	out := []adminVolume{}
	h.cnsReg.WithLock(h.cns, func() {
		for _, v := range h.cns.allVolumes(context.Background()) {
			av := adminVolume{ID: v.VolumeId.Id, Name: v.Name, VolumeType: v.VolumeType, ClusterID: v.Metadata.ContainerCluster.ClusterId}
			if vm := h.cns.meta[v.VolumeId.Id]; vm != nil {
				av.Datastore = vm.datastore
				av.BackingDiskURLPath = vm.backingURL
				if vm.relPath != "" {
					av.BackingPath = fmt.Sprintf("[%s] %s", vm.datastore, vm.relPath)
				}
				av.CreateTime = vm.createTime.UTC().Format(time.RFC3339Nano)
				av.KeepAfterDeleteVM = h.fcds.keepsAfterDeleteVM(vm.fcdID())
			}
			out = append(out, av)
		}
	})
	return out
}

var dsPathRE = regexp.MustCompile(`^\[([^\]]+)\]\s*(.+)$`)

// postVmdk creates a vmdk file from {"path":"[LocalDS_0] folder/x.vmdk"}.
func (h *harness) postVmdk(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Path string `json:"path"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "body must be {\"path\":\"[datastore] folder/file.vmdk\"}: "+err.Error())
		return
	}
	m := dsPathRE.FindStringSubmatch(strings.TrimSpace(req.Path))
	if m == nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%q is not a datastore path", req.Path))
		return
	}
	ds := h.datastoreByName(m[1])
	if ds == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("datastore %q not found", m[1]))
		return
	}
	if hasDotDot(m[2]) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%q contains ..", req.Path))
		return
	}
	file, err := h.createVmdk(ds, m[2])
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusCreated, map[string]string{"path": req.Path, "file": file})
}
