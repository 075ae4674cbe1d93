package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/vmware/govmomi/object"
	pbmsim "github.com/vmware/govmomi/pbm/simulator"
	"github.com/vmware/govmomi/simulator"
	vim "github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
	"github.com/vmware/govmomi/vslm"
	vslmmethods "github.com/vmware/govmomi/vslm/methods"
	vslmtypes "github.com/vmware/govmomi/vslm/types"
)

// fcd is one First Class Disk as the harness's VSLM endpoint sees it: made by
// RegisterDisk (vim25) or by a CNS static registration (whose volume ID is the FCD ID,
// as on vCenter).
type fcd struct {
	ID         string
	Name       string
	Datastore  *datastore
	RelPath    string
	File       string
	URL        string // the backing URL RegisterDisk was given (empty for CNS-made FCDs)
	Source     string // "RegisterDisk" or "CnsCreateVolume"
	CreateTime time.Time
	Flags      map[string]bool
}

type fcdStore struct {
	mu   sync.Mutex
	byID map[string]*fcd
	ids  []string // insertion order
}

func newFcdStore() *fcdStore { return &fcdStore{byID: map[string]*fcd{}} }

func (s *fcdStore) add(f *fcd) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Flags == nil {
		f.Flags = map[string]bool{}
	}
	if _, ok := s.byID[f.ID]; !ok {
		s.ids = append(s.ids, f.ID)
	}
	s.byID[f.ID] = f
}

func (s *fcdStore) get(id string) (fcd, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.byID[id]
	if !ok {
		return fcd{}, false
	}
	cp := *f
	cp.Flags = map[string]bool{}
	for k, v := range f.Flags {
		cp.Flags[k] = v
	}
	return cp, true
}

func (s *fcdStore) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byID[id]; !ok {
		return
	}
	delete(s.byID, id)
	for i, v := range s.ids {
		if v == id {
			s.ids = append(s.ids[:i], s.ids[i+1:]...)
			break
		}
	}
}

// setFlags sets (on=true) or clears control flags; false when the FCD is unknown.
func (s *fcdStore) setFlags(id string, flags []string, on bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.byID[id]
	if !ok {
		return false
	}
	for _, fl := range flags {
		f.Flags[strings.TrimSpace(fl)] = on
	}
	return true
}

// keepsAfterDeleteVM tells whether the FCD id carries keepAfterDeleteVm (false when the
// FCD is unknown).
func (s *fcdStore) keepsAfterDeleteVM(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.byID[id]
	return ok && f.Flags[string(types.VslmVStorageObjectControlFlagKeepAfterDeleteVm)]
}

// adminFcd is one entry of GET /debug/vslm/objects.
type adminFcd struct {
	ID                string   `json:"id"`
	Name              string   `json:"name"`
	BackingPath       string   `json:"backingPath"`
	KeepAfterDeleteVM bool     `json:"keepAfterDeleteVm"`
	ControlFlags      []string `json:"controlFlags"`
	Source            string   `json:"source"`
	CreateTime        string   `json:"createTime"`
}

func (s *fcdStore) list() []adminFcd {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []adminFcd{}
	for _, id := range s.ids {
		f := s.byID[id]
		out = append(out, adminFcd{
			ID:                f.ID,
			Name:              f.Name,
			BackingPath:       fmt.Sprintf("[%s] %s", f.Datastore.name, f.RelPath),
			KeepAfterDeleteVM: f.Flags[string(types.VslmVStorageObjectControlFlagKeepAfterDeleteVm)],
			ControlFlags:      sortedFlags(f.Flags),
			Source:            f.Source,
			CreateTime:        f.CreateTime.UTC().Format(time.RFC3339Nano),
		})
	}
	return out
}

func boolp(b bool) *bool { return &b }

// vStorageObject renders an FCD as the vim25 VStorageObject VSLM returns.
func (f fcd) vStorageObject() types.VStorageObject {
	return types.VStorageObject{
		Config: types.VStorageObjectConfigInfo{
			BaseConfigInfo: types.BaseConfigInfo{
				Id:                          types.ID{Id: f.ID},
				Name:                        f.Name,
				CreateTime:                  f.CreateTime,
				KeepAfterDeleteVm:           boolp(f.Flags[string(types.VslmVStorageObjectControlFlagKeepAfterDeleteVm)]),
				RelocationDisabled:          boolp(f.Flags[string(types.VslmVStorageObjectControlFlagDisableRelocation)]),
				NativeSnapshotSupported:     boolp(false),
				ChangedBlockTrackingEnabled: boolp(f.Flags[string(types.VslmVStorageObjectControlFlagEnableChangedBlockTracking)]),
				Backing: &types.BaseConfigInfoDiskFileBackingInfo{
					BaseConfigInfoFileBackingInfo: types.BaseConfigInfoFileBackingInfo{
						BaseConfigInfoBackingInfo: types.BaseConfigInfoBackingInfo{Datastore: f.Datastore.ref},
						FilePath:                  (&object.DatastorePath{Datastore: f.Datastore.name, Path: f.RelPath}).String(),
					},
					ProvisioningType: "thin",
				},
			},
			CapacityInMB:    1,
			ConsumptionType: []string{"disk"},
		},
	}
}

// vsoManager wraps the simulator's vim25 VcenterVStorageObjectManager so that FCDs made by
// RegisterDisk are known to the harness (for CnsCreateVolume by backingDiskId and VSLM).
type vsoManager struct {
	*simulator.VcenterVStorageObjectManager
	h *harness
}

// RegisterDisk lets upstream register the vmdk (it checks the URL, the file and that the
// path is not an FCD yet) and records the new FCD.
func (m *vsoManager) RegisterDisk(ctx *simulator.Context, req *types.RegisterDisk) soap.HasFault {
	res := m.VcenterVStorageObjectManager.RegisterDisk(ctx, req)
	body, ok := res.(*vim.RegisterDiskBody)
	if !ok || body.Res == nil {
		return res
	}
	obj := body.Res.Returnval
	if err := m.h.recordRegisteredDisk(obj, req.Path); err != nil {
		return &vim.RegisterDiskBody{Fault_: simulator.Fault(err.Error(), &types.InvalidArgument{InvalidProperty: "path"})}
	}
	return res
}

func (h *harness) recordRegisteredDisk(obj types.VStorageObject, rawURL string) error {
	backing, ok := obj.Config.Backing.(*types.BaseConfigInfoDiskFileBackingInfo)
	if !ok {
		return fmt.Errorf("RegisterDisk returned no file backing")
	}
	var p object.DatastorePath
	if !p.FromString(backing.FilePath) {
		return fmt.Errorf("RegisterDisk returned path %q", backing.FilePath)
	}
	ds := h.datastoreByName(p.Datastore)
	if ds == nil {
		return fmt.Errorf("datastore %q not found", p.Datastore)
	}
	rel := strings.TrimPrefix(p.Path, "/")
	f := &fcd{
		ID: obj.Config.Id.Id, Name: obj.Config.Name, Datastore: ds, RelPath: rel,
		File: filepath.Join(ds.dir, filepath.FromSlash(rel)), URL: rawURL,
		Source: "RegisterDisk", CreateTime: obj.Config.CreateTime,
	}
	f.Flags = map[string]bool{}
	if obj.Config.KeepAfterDeleteVm != nil && *obj.Config.KeepAfterDeleteVm {
		f.Flags[string(types.VslmVStorageObjectControlFlagKeepAfterDeleteVm)] = true
	}
	h.fcds.add(f)
	return nil
}

// installVStorageObjectManager replaces the model's VcenterVStorageObjectManager by the
// recording wrapper (same MoRef).
func (h *harness) installVStorageObjectManager() error {
	ref := *h.model.ServiceContent.VStorageObjectManager
	upstream, ok := simulator.Map.Get(ref).(*simulator.VcenterVStorageObjectManager)
	if !ok {
		return fmt.Errorf("model has no VcenterVStorageObjectManager")
	}
	simulator.Map.Put(&vsoManager{VcenterVStorageObjectManager: upstream, h: h})
	return nil
}

// VSLM endpoint (/vslm/sdk, namespace urn:vslm).

var (
	vslmSessionManagerRef = types.ManagedObjectReference{Type: "VslmSessionManager", Value: "SessionManager"}
	vslmObjectManagerRef  = types.ManagedObjectReference{Type: "VslmVStorageObjectManager", Value: "VStorageObjectManager"}
	vslmLifecycleRef      = types.ManagedObjectReference{Type: "VslmStorageLifecycleManager", Value: "StorageLifecycleManager"}
)

type vslmServiceInstance struct {
	types.ManagedObjectReference
	h *harness
}

// RetrieveContent answers the VslmServiceInstanceContent.
func (s *vslmServiceInstance) RetrieveContent(*vslmtypes.RetrieveContent) soap.HasFault {
	v := s.h.modes.currentVersion()
	return &vslmmethods.RetrieveContentBody{Res: &vslmtypes.RetrieveContentResponse{Returnval: vslmtypes.VslmServiceInstanceContent{
		AboutInfo: vslmtypes.VslmAboutInfo{
			Name:         "VMware Virtual Storage Lifecycle Manager Service",
			FullName:     fmt.Sprintf("VMware Virtual Storage Lifecycle Manager Service %s", v.Version),
			Vendor:       "VMware, Inc.",
			ApiVersion:   v.APIVersion,
			InstanceUuid: "a1b0d6e0-5a6e-4c4f-9d7e-2f0c3c9b1e5f",
		},
		SessionManager:          vslmSessionManagerRef,
		VStorageObjectManager:   vslmObjectManagerRef,
		StorageLifecycleManager: vslmLifecycleRef,
	}}}
}

type vslmObjectManager struct {
	types.ManagedObjectReference
	h *harness
}

func notFound(id string) *soap.Fault {
	return simulator.Fault(fmt.Sprintf("The object or item referred to could not be found: %s", id), &types.NotFound{})
}

// VslmRetrieveVStorageObject answers the FCD with its control flags as config booleans.
func (m *vslmObjectManager) VslmRetrieveVStorageObject(req *vslmtypes.VslmRetrieveVStorageObject) soap.HasFault {
	f, ok := m.h.fcds.get(req.Id.Id)
	if !ok {
		return &vslmmethods.VslmRetrieveVStorageObjectBody{Fault_: notFound(req.Id.Id)}
	}
	return &vslmmethods.VslmRetrieveVStorageObjectBody{Res: &vslmtypes.VslmRetrieveVStorageObjectResponse{Returnval: f.vStorageObject()}}
}

// VslmSetVStorageObjectControlFlags sets the given flags (keepAfterDeleteVm, ...); with
// the vslmSetFlagsIgnored mode it answers success and sets nothing.
func (m *vslmObjectManager) VslmSetVStorageObjectControlFlags(req *vslmtypes.VslmSetVStorageObjectControlFlags) soap.HasFault {
	if m.h.modes.setFlagsIgnored() {
		if _, ok := m.h.fcds.get(req.Id.Id); !ok {
			return &vslmmethods.VslmSetVStorageObjectControlFlagsBody{Fault_: notFound(req.Id.Id)}
		}
		return &vslmmethods.VslmSetVStorageObjectControlFlagsBody{Res: &vslmtypes.VslmSetVStorageObjectControlFlagsResponse{}}
	}
	if !m.h.fcds.setFlags(req.Id.Id, req.ControlFlags, true) {
		return &vslmmethods.VslmSetVStorageObjectControlFlagsBody{Fault_: notFound(req.Id.Id)}
	}
	return &vslmmethods.VslmSetVStorageObjectControlFlagsBody{Res: &vslmtypes.VslmSetVStorageObjectControlFlagsResponse{}}
}

// VslmClearVStorageObjectControlFlags clears the given flags.
func (m *vslmObjectManager) VslmClearVStorageObjectControlFlags(req *vslmtypes.VslmClearVStorageObjectControlFlags) soap.HasFault {
	if !m.h.fcds.setFlags(req.Id.Id, req.ControlFlags, false) {
		return &vslmmethods.VslmClearVStorageObjectControlFlagsBody{Fault_: notFound(req.Id.Id)}
	}
	return &vslmmethods.VslmClearVStorageObjectControlFlagsBody{Res: &vslmtypes.VslmClearVStorageObjectControlFlagsResponse{}}
}

// installVSLM registers /vslm/sdk the way govmomi's endpoints are registered
// (Service.RegisterSDK with a Registry of the endpoint's namespace and path).
func (h *harness) installVSLM() {
	reg := simulator.NewRegistry()
	reg.Namespace = vslm.Namespace
	reg.Path = vslm.Path
	reg.Put(&vslmServiceInstance{ManagedObjectReference: vslm.ServiceInstance, h: h})
	reg.Put(&vslmObjectManager{ManagedObjectReference: vslmObjectManagerRef, h: h})
	h.model.Service.RegisterSDK(reg)
}

// installPBM registers govmomi's PBM simulator (RegisterEndpoints is off, see
// newHarness), with its default policies ("vSAN Default Storage Policy", ...), at /pbm
// (govmomi's pbm.Path) and at /pbm/sdk (what pyVmomi and the vSphere docs use): one
// registry, so both paths share the policies.
func (h *harness) installPBM() {
	reg := pbmsim.New()
	h.model.Service.RegisterSDK(reg)
	reg.Path = "/pbm/sdk"
	h.model.Service.RegisterSDK(reg)
}
