package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/vmware/govmomi/cns"
	"github.com/vmware/govmomi/cns/methods"
	cnssim "github.com/vmware/govmomi/cns/simulator"
	cnstypes "github.com/vmware/govmomi/cns/types"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// cnsManager wraps govmomi's simulated CnsVolumeManager (which keeps the volumes) and
// closes the gaps that matter for volmig, in govmomi 0.24.2:
//   - a static registration (BackingDiskUrlPath, no datastores) creates nothing upstream;
//     the wrapper resolves dcPath/dsName from the URL and passes the datastore, so every
//     call creates a new volume with a new ID, as vCenter does for parallel registrations;
//   - the backing disk must exist (else the volume result carries a CnsFault);
//   - CnsAlreadyRegisteredFault for a disk registered before the call arrived, on the
//     releases whose CNS has it (7.0.3, 8.0.3) or with -cns-already-registered; on 8.0.3 a
//     registration by backingDiskId refused so sets keepAfterDeleteVm first;
//   - queries return CnsBlockBackingDetails (backingDiskId, backingDiskUrlPath), are sorted
//     by creation, honour the filters vCenter honours and the cursor (see -cns-query);
//   - CnsDeleteVolume of an unknown ID yields a NotFound fault in its volume result, and
//     deleteDisk=true removes the vmdk file;
//   - the creation time of every volume is kept for the admin listing.
//
// Every SOAP call runs under the registry lock of this object (simulator.Service.call);
// the admin endpoints take the same lock, so meta needs no lock of its own.
type cnsManager struct {
	*cnssim.CnsVolumeManager
	h    *harness
	meta map[string]*volumeMeta
	// byName indexes meta by volume name (name -> IDs): a query by name is a map look-up,
	// as in vCenter's database, not a scan of every volume. The scan made the harness's
	// CPU per query grow with the volumes it holds, on the cores volmig shares with it.
	byName map[string]map[string]bool
}

// remember records vm in meta and in the name index.
func (m *cnsManager) remember(vm *volumeMeta) {
	m.forget(vm.id)
	m.meta[vm.id] = vm
	ids := m.byName[vm.name]
	if ids == nil {
		ids = map[string]bool{}
		m.byName[vm.name] = ids
	}
	ids[vm.id] = true
}

// forget drops the volume id from meta and from the name index; it returns what meta held.
func (m *cnsManager) forget(id string) *volumeMeta {
	vm := m.meta[id]
	if vm == nil {
		return nil
	}
	delete(m.meta, id)
	if ids := m.byName[vm.name]; ids != nil {
		delete(ids, id)
		if len(ids) == 0 {
			delete(m.byName, vm.name)
		}
	}
	return vm
}

// volumeMeta is what the harness remembers about a volume besides what upstream keeps.
type volumeMeta struct {
	id         string
	name       string
	createTime time.Time
	backingURL string
	datastore  string
	relPath    string
	file       string
	// backingDiskID is the FCD a backingDiskId registration named (else the volume ID).
	backingDiskID string
}

func faultResult(id string, fault types.BaseMethodFault, msg string) *cnstypes.CnsVolumeOperationResult {
	return &cnstypes.CnsVolumeOperationResult{
		VolumeId: cnstypes.CnsVolumeId{Id: id},
		Fault:    &types.LocalizedMethodFault{Fault: fault, LocalizedMessage: msg},
	}
}

func createFault(name string, fault types.BaseMethodFault, msg string) cnstypes.BaseCnsVolumeOperationResult {
	return &cnstypes.CnsVolumeCreateResult{
		CnsVolumeOperationResult: *faultResult("", fault, msg),
		Name:                     name,
	}
}

// CnsCreateVolume creates one volume per create spec (per datastore for dynamic specs).
// With a task duration (-cns-task-duration or POST /debug/modes) the task is answered in
// state running and the volumes are created only when it completes.
func (m *cnsManager) CnsCreateVolume(ctx *simulator.Context, req *cnstypes.CnsCreateVolume) soap.HasFault {
	arrival := time.Now().Add(-time.Duration(m.h.opts.delays["CnsCreateVolume"]) * time.Millisecond)
	run := func(*simulator.Task) (types.AnyType, types.BaseMethodFault) {
		if len(req.CreateSpecs) == 0 {
			return nil, &types.InvalidArgument{InvalidProperty: "CnsVolumeCreateSpec"}
		}
		var results []cnstypes.BaseCnsVolumeOperationResult
		for _, spec := range req.CreateSpecs {
			results = append(results, m.createOne(ctx, spec, arrival)...)
		}
		return &cnstypes.CnsVolumeOperationBatchResult{VolumeResults: results}, nil
	}
	task := simulator.CreateTask(m, "CnsCreateVolume", run)
	d := m.h.modes.taskDurationNow()
	if d <= 0 {
		return &methods.CnsCreateVolumeBody{Res: &cnstypes.CnsCreateVolumeResponse{Returnval: task.Run()}}
	}
	simulator.Map.WithLock(task, func() {
		simulator.Map.Update(task, []types.PropertyChange{
			{Name: "info.startTime", Val: time.Now()},
			{Name: "info.state", Val: types.TaskInfoStateRunning},
		})
	})
	go m.completeLater(task, d)
	return &methods.CnsCreateVolumeBody{Res: &cnstypes.CnsCreateVolumeResponse{Returnval: task.Self}}
}

// completeLater runs a slow task's work after d (under the CNS manager's lock, like a
// SOAP call) and publishes its outcome as Task.Run does.
func (m *cnsManager) completeLater(task *simulator.Task, d time.Duration) {
	time.Sleep(d)
	var res types.AnyType
	var fault types.BaseMethodFault
	m.h.cnsReg.WithLock(m, func() { res, fault = task.Execute(task) })
	state := types.TaskInfoStateSuccess
	var lf interface{}
	if fault != nil {
		state = types.TaskInfoStateError
		lf = types.LocalizedMethodFault{Fault: fault, LocalizedMessage: fmt.Sprintf("%T", fault)}
	}
	simulator.Map.WithLock(task, func() {
		simulator.Map.Update(task, []types.PropertyChange{
			{Name: "info.completeTime", Val: time.Now()},
			{Name: "info.state", Val: state},
			{Name: "info.result", Val: res},
			{Name: "info.error", Val: lf},
		})
	})
}

func (m *cnsManager) createOne(ctx context.Context, spec cnstypes.CnsVolumeCreateSpec, arrival time.Time) []cnstypes.BaseCnsVolumeOperationResult {
	if spec.BackingObjectDetails == nil {
		return []cnstypes.BaseCnsVolumeOperationResult{createFault(spec.Name, &types.InvalidArgument{InvalidProperty: "backingObjectDetails"}, "backingObjectDetails is required")}
	}
	block, isBlock := spec.BackingObjectDetails.(*cnstypes.CnsBlockBackingDetails)
	if !isBlock || (block.BackingDiskUrlPath == "" && block.BackingDiskId == "") {
		for _, ref := range spec.Datastores {
			if m.h.datastoreByRef(ref) == nil {
				return []cnstypes.BaseCnsVolumeOperationResult{createFault(spec.Name, &types.ManagedObjectNotFound{Obj: ref}, fmt.Sprintf("datastore %s not found", ref.Value))}
			}
		}
		return m.delegateCreate(ctx, spec, nil)
	}

	var ds *datastore
	var rel, backingURL, diskID string
	if block.BackingDiskId != "" {
		// An FCD made by RegisterDisk (or an earlier registration): vCenter 6.7 Update 3l
		// (API 6.7.3, build >= 17137327) up to API 7.0.0 registers this way. The first CNS
		// volume takes the FCD's ID.
		f, ok := m.h.fcds.get(block.BackingDiskId)
		if !ok {
			msg := fmt.Sprintf("The object or item referred to could not be found: FCD %s", block.BackingDiskId)
			return []cnstypes.BaseCnsVolumeOperationResult{createFault(spec.Name, &cnstypes.CnsFault{Reason: msg}, msg)}
		}
		ds, rel, backingURL, diskID = f.Datastore, f.RelPath, f.URL, f.ID
	} else {
		var err error
		ds, rel, err = m.h.resolveBackingURL(block.BackingDiskUrlPath)
		if err != nil {
			return []cnstypes.BaseCnsVolumeOperationResult{createFault(spec.Name, &cnstypes.CnsFault{Reason: err.Error()}, err.Error())}
		}
		backingURL = block.BackingDiskUrlPath
	}
	file := filepath.Join(ds.dir, filepath.FromSlash(rel))
	if _, err := os.Stat(file); err != nil {
		msg := fmt.Sprintf("File [%s] %s was not found", ds.name, rel)
		return []cnstypes.BaseCnsVolumeOperationResult{createFault(spec.Name, &cnstypes.CnsFault{Reason: msg}, msg)}
	}
	if m.refusesReRegistration() {
		if vm := m.registeredBefore(block.BackingDiskId, ds.name, rel, arrival); vm != nil {
			if block.BackingDiskId != "" && m.h.modes.currentVersion().atLeast803() {
				// From 8.0.3 the CSI driver protects an existing volume this way
				// (ProtectVolumeFromVMDeletion): CNS sets the flag, then refuses.
				m.h.fcds.setFlags(vm.fcdID(), []string{string(types.VslmVStorageObjectControlFlagKeepAfterDeleteVm)}, true)
			}
			msg := fmt.Sprintf("The input volume [%s] %s is already registered as %s", ds.name, rel, vm.id)
			return []cnstypes.BaseCnsVolumeOperationResult{createFault(spec.Name, &cnstypes.CnsAlreadyRegisteredFault{VolumeId: cnstypes.CnsVolumeId{Id: vm.id}}, msg)}
		}
	}
	spec.Datastores = []types.ManagedObjectReference{ds.ref}
	tmpl := &volumeMeta{backingURL: backingURL, datastore: ds.name, relPath: rel, file: file, backingDiskID: diskID}
	if diskID != "" {
		if _, taken := m.meta[diskID]; !taken {
			// upstream keeps the FCD ID as volume ID (in its "any datastore" bucket);
			// the wrapper's metadata supplies the real datastore.
			return m.delegateCreate(ctx, spec, tmpl)
		}
		// A further registration of the same FCD: a new volume with a new ID, the same
		// duplicate behaviour as for backingDiskUrlPath.
		spec.BackingObjectDetails = &cnstypes.CnsBlockBackingDetails{CnsBackingObjectDetails: block.CnsBackingObjectDetails}
	} else {
		spec.BackingObjectDetails = &cnstypes.CnsBlockBackingDetails{CnsBackingObjectDetails: block.CnsBackingObjectDetails, BackingDiskUrlPath: block.BackingDiskUrlPath}
	}
	res := m.delegateCreate(ctx, spec, tmpl)
	if diskID == "" {
		// Every static registration makes an FCD whose ID is the volume ID.
		keep := m.h.modes.currentVersion().atLeast803()
		for _, r := range res {
			op := r.GetCnsVolumeOperationResult()
			if op.Fault != nil || op.VolumeId.Id == "" {
				continue
			}
			f := &fcd{ID: op.VolumeId.Id, Name: spec.Name, Datastore: ds, RelPath: rel, File: file,
				Source: "CnsCreateVolume", CreateTime: time.Now(), Flags: map[string]bool{}}
			if keep {
				f.Flags[string(types.VslmVStorageObjectControlFlagKeepAfterDeleteVm)] = true
			}
			m.h.fcds.add(f)
		}
	}
	return res
}

// delegateCreate lets upstream create the volume(s) and records their metadata.
func (m *cnsManager) delegateCreate(ctx context.Context, spec cnstypes.CnsVolumeCreateSpec, tmpl *volumeMeta) []cnstypes.BaseCnsVolumeOperationResult {
	body := m.CnsVolumeManager.CnsCreateVolume(ctx, &cnstypes.CnsCreateVolume{This: cns.CnsVolumeManagerInstance, CreateSpecs: []cnstypes.CnsVolumeCreateSpec{spec}})
	res := m.innerTaskResult(body.(*methods.CnsCreateVolumeBody).Res.Returnval)
	now := time.Now()
	for _, r := range res {
		op := r.GetCnsVolumeOperationResult()
		if op.Fault != nil || op.VolumeId.Id == "" {
			continue
		}
		vm := &volumeMeta{}
		if tmpl != nil {
			*vm = *tmpl
		} else if cr, ok := r.(*cnstypes.CnsVolumeCreateResult); ok && len(cr.PlacementResults) > 0 {
			if ds := m.h.datastoreByRef(cr.PlacementResults[0].Datastore); ds != nil {
				vm.datastore = ds.name
			}
		}
		vm.id = op.VolumeId.Id
		vm.name = spec.Name
		vm.createTime = now
		m.remember(vm)
	}
	return res
}

// innerTaskResult reads the result of a task upstream ran synchronously, then drops the
// task: the client only ever sees the wrapper's own task.
func (m *cnsManager) innerTaskResult(ref types.ManagedObjectReference) []cnstypes.BaseCnsVolumeOperationResult {
	t, ok := simulator.Map.Get(ref).(*simulator.Task)
	if !ok {
		return nil
	}
	simulator.Map.Remove(ref)
	if batch, ok := t.Info.Result.(*cnstypes.CnsVolumeOperationBatchResult); ok {
		return batch.VolumeResults
	}
	return nil
}

// refusesReRegistration tells whether a create of a disk registered before the call
// arrived answers CnsAlreadyRegisteredFault: always with -cns-already-registered, else on
// the releases whose CNS has the fault.
func (m *cnsManager) refusesReRegistration() bool {
	return m.h.opts.alreadyReg || m.h.modes.currentVersion().refusesReRegistration()
}

// registeredBefore returns the volume the disk is registered as since before arrival, or
// nil: the volume of ID diskID when the create names that FCD (its first registration took
// the FCD's ID), else the oldest volume of the disk rel on datastore ds.
func (m *cnsManager) registeredBefore(diskID, ds, rel string, arrival time.Time) *volumeMeta {
	if vm := m.meta[diskID]; diskID != "" && vm != nil && vm.createTime.Before(arrival) {
		return vm
	}
	return m.firstRegistered(ds, rel, arrival)
}

// fcdID is the ID of the FCD behind the volume: the FCD a backingDiskId registration
// named, else the volume ID (a registration by URL makes an FCD of that ID).
func (vm *volumeMeta) fcdID() string {
	if vm.backingDiskID != "" {
		return vm.backingDiskID
	}
	return vm.id
}

// firstRegistered returns the oldest volume (by creation, then ID) registered for the
// disk rel on datastore ds before arrival, or nil: one pass, no sort of every volume.
func (m *cnsManager) firstRegistered(ds, rel string, arrival time.Time) *volumeMeta {
	var first *volumeMeta
	for _, vm := range m.meta {
		if vm.datastore != ds || vm.relPath != rel || !vm.createTime.Before(arrival) {
			continue
		}
		if first == nil || vm.createTime.Before(first.createTime) ||
			(vm.createTime.Equal(first.createTime) && vm.id < first.id) {
			first = vm
		}
	}
	return first
}

// allVolumes returns upstream's volumes, decorated and sorted by creation.
func (m *cnsManager) allVolumes(ctx context.Context) []cnstypes.CnsVolume {
	return m.volumesAmong(ctx, nil)
}

// volumesAmong returns upstream's volumes whose IDs are in ids (every volume when ids is
// nil), decorated and sorted by creation. Only the selected volumes are copied and sorted:
// a query by name or ID costs what it costs a vCenter (an index lookup), not a sort of
// every volume under the CNS manager's lock, which made each query slower as volumes
// accumulated and serialised every client behind it.
func (m *cnsManager) volumesAmong(ctx context.Context, ids map[string]bool) []cnstypes.CnsVolume {
	var vols []cnstypes.CnsVolume
	switch {
	case ids == nil:
		body := m.CnsVolumeManager.CnsQueryAllVolume(ctx, &cnstypes.CnsQueryAllVolume{This: cns.CnsVolumeManagerInstance})
		vols = body.(*methods.CnsQueryAllVolumeBody).Res.Returnval.Volumes
	case len(ids) == 0:
		return nil
	default:
		filter := cnstypes.CnsQueryFilter{}
		for id := range ids {
			filter.VolumeIds = append(filter.VolumeIds, cnstypes.CnsVolumeId{Id: id})
		}
		body := m.CnsVolumeManager.CnsQueryVolume(ctx, &cnstypes.CnsQueryVolume{This: cns.CnsVolumeManagerInstance, Filter: filter})
		vols = body.(*methods.CnsQueryVolumeBody).Res.Returnval.Volumes
	}
	for i := range vols {
		v := &vols[i]
		vm := m.meta[v.VolumeId.Id]
		if vm == nil || (vm.backingURL == "" && vm.backingDiskID == "") {
			continue
		}
		var base cnstypes.CnsBackingObjectDetails
		if v.BackingObjectDetails != nil {
			base = *v.BackingObjectDetails.GetCnsBackingObjectDetails()
		}
		diskID := vm.backingDiskID
		if diskID == "" {
			diskID = v.VolumeId.Id
		}
		v.BackingObjectDetails = &cnstypes.CnsBlockBackingDetails{
			CnsBackingObjectDetails: base,
			BackingDiskId:           diskID,
			BackingDiskUrlPath:      vm.backingURL,
		}
	}
	created := func(v cnstypes.CnsVolume) time.Time {
		if vm := m.meta[v.VolumeId.Id]; vm != nil {
			return vm.createTime
		}
		return time.Time{}
	}
	sort.SliceStable(vols, func(i, j int) bool {
		ti, tj := created(vols[i]), created(vols[j])
		if !ti.Equal(tj) {
			return ti.Before(tj)
		}
		return vols[i].VolumeId.Id < vols[j].VolumeId.Id
	})
	return vols
}

func stringSet(items []string) map[string]bool {
	if len(items) == 0 {
		return nil
	}
	s := make(map[string]bool, len(items))
	for _, it := range items {
		s[it] = true
	}
	return s
}

// candidateIDs returns the IDs of the volumes a filter by volume IDs or names can match,
// or nil when it names neither (every volume is a candidate). Every volume has metadata
// (delegateCreate records it; removeVolume drops both), so names resolve through byName.
func (m *cnsManager) candidateIDs(filter cnstypes.CnsQueryFilter) map[string]bool {
	if len(filter.VolumeIds) > 0 {
		ids := make(map[string]bool, len(filter.VolumeIds))
		for _, id := range filter.VolumeIds {
			ids[id.Id] = true
		}
		return ids
	}
	if len(filter.Names) == 0 {
		return nil
	}
	ids := map[string]bool{}
	for _, name := range filter.Names {
		for id := range m.byName[name] {
			ids[id] = true
		}
	}
	return ids
}

// query applies the filter and cursor the way -cns-query says.
func (m *cnsManager) query(ctx context.Context, filter cnstypes.CnsQueryFilter) cnstypes.CnsQueryResult {
	if m.h.opts.cnsQuery == "upstream" {
		all := m.allVolumes(ctx)
		// govmomi 0.24.2: only volumeIds is honoured, no paging, empty cursor.
		if filter.VolumeIds == nil {
			return cnstypes.CnsQueryResult{Volumes: all}
		}
		ids := map[string]bool{}
		for _, id := range filter.VolumeIds {
			ids[id.Id] = true
		}
		var out []cnstypes.CnsVolume
		for _, v := range all {
			if ids[v.VolumeId.Id] {
				out = append(out, v)
			}
		}
		return cnstypes.CnsQueryResult{Volumes: out}
	}

	// The filters below still apply in full; the candidates only spare copying and
	// sorting volumes that cannot match.
	all := m.volumesAmong(ctx, m.candidateIDs(filter))
	var ids []string
	for _, id := range filter.VolumeIds {
		ids = append(ids, id.Id)
	}
	idSet, nameSet, clusterSet := stringSet(ids), stringSet(filter.Names), stringSet(filter.ContainerClusterIds)
	dsURLs, dsNames := map[string]bool{}, map[string]bool{}
	for _, ref := range filter.Datastores {
		if ds := m.h.datastoreByRef(ref); ds != nil {
			dsURLs[ds.dir] = true
			dsNames[ds.name] = true
		} else {
			dsURLs["\x00unknown:"+ref.Value] = true
		}
	}
	var matched []cnstypes.CnsVolume
	for _, v := range all {
		if idSet != nil && !idSet[v.VolumeId.Id] {
			continue
		}
		if nameSet != nil && !nameSet[v.Name] {
			continue
		}
		if clusterSet != nil && !inCluster(v, clusterSet) {
			continue
		}
		if len(dsURLs) > 0 && !m.onDatastore(v, dsURLs, dsNames) {
			continue
		}
		if filter.StoragePolicyId != "" && v.StoragePolicyId != filter.StoragePolicyId {
			continue
		}
		matched = append(matched, v)
	}

	total := int64(len(matched))
	var offset, limit int64
	if filter.Cursor != nil {
		offset, limit = filter.Cursor.Offset, filter.Cursor.Limit
	}
	if offset < 0 || offset > total {
		offset = total
	}
	if limit <= 0 {
		limit = total - offset
	}
	if cap := int64(m.h.opts.cnsPageLimit); cap > 0 && limit > cap {
		limit = cap
	}
	end := offset + limit
	if end > total {
		end = total
	}
	page := matched[offset:end]
	return cnstypes.CnsQueryResult{
		Volumes: page,
		Cursor:  cnstypes.CnsCursor{Offset: end, Limit: limit, TotalRecords: total},
	}
}

func inCluster(v cnstypes.CnsVolume, set map[string]bool) bool {
	if set[v.Metadata.ContainerCluster.ClusterId] {
		return true
	}
	for _, c := range v.Metadata.ContainerClusterArray {
		if set[c.ClusterId] {
			return true
		}
	}
	return false
}

// CnsQueryVolume answers one page of volumes matching the filter.
func (m *cnsManager) CnsQueryVolume(ctx *simulator.Context, req *cnstypes.CnsQueryVolume) soap.HasFault {
	return &methods.CnsQueryVolumeBody{Res: &cnstypes.CnsQueryVolumeResponse{Returnval: m.query(ctx, req.Filter)}}
}

// CnsQueryAllVolume answers like CnsQueryVolume; the selection is ignored.
func (m *cnsManager) CnsQueryAllVolume(ctx *simulator.Context, req *cnstypes.CnsQueryAllVolume) soap.HasFault {
	return &methods.CnsQueryAllVolumeBody{Res: &cnstypes.CnsQueryAllVolumeResponse{Returnval: m.query(ctx, req.Filter)}}
}

// CnsDeleteVolume removes registrations; deleteDisk=true also removes the vmdk file.
func (m *cnsManager) CnsDeleteVolume(ctx *simulator.Context, req *cnstypes.CnsDeleteVolume) soap.HasFault {
	task := simulator.CreateTask(m, "CnsDeleteVolume", func(*simulator.Task) (types.AnyType, types.BaseMethodFault) {
		var results []cnstypes.BaseCnsVolumeOperationResult
		for _, id := range req.VolumeIds {
			if !m.removeVolume(ctx, id.Id, req.DeleteDisk) {
				results = append(results, faultResult(id.Id, &types.NotFound{}, fmt.Sprintf("CNS volume %s not found", id.Id)))
				continue
			}
			results = append(results, &cnstypes.CnsVolumeOperationResult{VolumeId: id})
		}
		return &cnstypes.CnsVolumeOperationBatchResult{VolumeResults: results}, nil
	})
	return &methods.CnsDeleteVolumeBody{Res: &cnstypes.CnsDeleteVolumeResponse{Returnval: task.Run()}}
}

// removeVolume deletes one volume from upstream's state; false when it did not exist.
func (m *cnsManager) removeVolume(ctx context.Context, id string, deleteDisk bool) bool {
	body := m.CnsVolumeManager.CnsDeleteVolume(ctx, &cnstypes.CnsDeleteVolume{
		This:      cns.CnsVolumeManagerInstance,
		VolumeIds: []cnstypes.CnsVolumeId{{Id: id}},
	})
	res := m.innerTaskResult(body.(*methods.CnsDeleteVolumeBody).Res.Returnval)
	vm := m.forget(id)
	if len(res) == 0 {
		return false
	}
	if deleteDisk && vm != nil && vm.file != "" {
		m.h.fileMu.Lock()
		_ = os.Remove(vm.file)
		m.h.fileMu.Unlock()
		m.h.fcds.remove(id)
	}
	return true
}

// resolveBackingURL checks https://host/folder/<path>?dcPath=<dc>&dsName=<ds> against the
// inventory and returns the datastore and the cleaned relative file path.
func (h *harness) resolveBackingURL(raw string) (*datastore, string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, "", fmt.Errorf("backingDiskUrlPath %q is not a URL: %v", raw, err)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return nil, "", fmt.Errorf("backingDiskUrlPath %q: scheme must be https", raw)
	}
	if !strings.HasPrefix(u.Path, "/folder/") {
		return nil, "", fmt.Errorf("backingDiskUrlPath %q: path must start with /folder/", raw)
	}
	rel := strings.TrimPrefix(u.Path, "/folder/")
	q := u.Query()
	dcPath, dsName := q.Get("dcPath"), q.Get("dsName")
	if dsName == "" || dcPath == "" {
		return nil, "", fmt.Errorf("backingDiskUrlPath %q: dcPath and dsName are required", raw)
	}
	if strings.Trim(dcPath, "/") != strings.Trim(h.dcPath, "/") {
		return nil, "", fmt.Errorf("backingDiskUrlPath %q: datacenter %q not found", raw, dcPath)
	}
	ds := h.datastoreByName(dsName)
	if ds == nil {
		return nil, "", fmt.Errorf("backingDiskUrlPath %q: datastore %q not found in %s", raw, dsName, h.dcPath)
	}
	clean := path.Clean("/" + rel)
	if clean == "/" || hasDotDot(rel) {
		return nil, "", fmt.Errorf("backingDiskUrlPath %q: invalid file path %q", raw, rel)
	}
	return ds, strings.TrimPrefix(clean, "/"), nil
}

func hasDotDot(rel string) bool {
	for _, seg := range strings.Split(rel, "/") {
		if seg == ".." {
			return true
		}
	}
	return false
}
