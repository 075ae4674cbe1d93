package main

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/types"
)

// vcVersion is one vCenter release the harness can claim to be (about.version,
// about.apiVersion and the build as real vCenters of that release report them).
type vcVersion struct {
	Name       string
	Version    string
	APIVersion string
	Build      string
}

// vcVersions are the releases -vcenter-version accepts. "6.5" is govmomi's simulator
// default (what the harness reported before the flag existed, and still the default).
var vcVersions = []vcVersion{
	{Name: "6.5", Version: "6.5.0", APIVersion: "6.5", Build: "5973321"},
	{Name: "6.7.3", Version: "6.7.0", APIVersion: "6.7.3", Build: "14367737"},
	// 6.7 Update 3l: the same version and API version as any 6.7 Update 3, told apart
	// only by the build (the vSphere CSI driver registers by RegisterDisk from it on).
	{Name: "6.7U3l", Version: "6.7.0", APIVersion: "6.7.3", Build: "17137327"},
	{Name: "7.0.0", Version: "7.0.0", APIVersion: "7.0.0.0", Build: "15952498"},
	{Name: "7.0.3", Version: "7.0.3", APIVersion: "7.0.3.0", Build: "18700403"},
	{Name: "8.0.3", Version: "8.0.3", APIVersion: "8.0.3.0", Build: "24022515"},
}

func findVersion(name string) (vcVersion, error) {
	for _, v := range vcVersions {
		if v.Name == name {
			return v, nil
		}
	}
	names := make([]string, 0, len(vcVersions))
	for _, v := range vcVersions {
		names = append(names, v.Name)
	}
	return vcVersion{}, fmt.Errorf("unknown vCenter version %q (one of %s)", name, strings.Join(names, ", "))
}

// atLeast803 tells whether registration itself sets keepAfterDeleteVm (vCenter 8.0.3+).
func (v vcVersion) atLeast803() bool {
	return v.Name == "8.0.3"
}

// refusesReRegistration tells whether CNS answers CnsAlreadyRegisteredFault for a disk that
// is a CNS volume already (the fault exists since vSphere 7.0 Update 1; older CNS made
// another volume).
func (v vcVersion) refusesReRegistration() bool {
	return v.Name == "7.0.3" || v.Name == "8.0.3"
}

// modes are the fault and behaviour switches that tests flip at start (flags) or at run
// time (POST /debug/modes); every field is guarded by mu.
type modes struct {
	mu sync.Mutex
	// CnsCreateVolume tasks stay "running" this long, then complete (0 = at once).
	taskDuration time.Duration
	// The next N CnsCreateVolume calls run, but their HTTP connection is closed unanswered.
	dropCreateReplies int
	// The next N task polls answer HTTP 503.
	failTaskPolls int
	// Task polls answer HTTP 503 for this long after each CnsCreateVolume arrives.
	failTaskPollsWindow time.Duration
	lastCreate          time.Time
	version             vcVersion
	// VslmSetVStorageObjectControlFlags answers success but sets nothing.
	vslmSetFlagsIgnored bool
	// Hostile answers and certificates (hostile.go).
	hostile hostileModes
	// Injected failures and held replies per method (injected.go).
	injected injectedModes
}

// modesJSON is GET/POST /debug/modes. On POST every field is optional.
type modesJSON struct {
	CnsTaskDurationMs     *int64  `json:"cnsTaskDurationMs,omitempty"`
	DropCreateReplies     *int    `json:"dropCreateReplies,omitempty"`
	FailTaskPolls         *int    `json:"failTaskPolls,omitempty"`
	FailTaskPollsWindowMs *int64  `json:"failTaskPollsWindowMs,omitempty"`
	VcenterVersion        *string `json:"vcenterVersion,omitempty"`
	AboutVersion          string  `json:"aboutVersion,omitempty"`
	AboutAPIVersion       string  `json:"aboutApiVersion,omitempty"`
	AboutBuild            string  `json:"aboutBuild,omitempty"`
	VslmSetFlagsIgnored   *bool   `json:"vslmSetFlagsIgnored,omitempty"`
	hostileJSON
	injectedJSON
}

func (m *modes) snapshot() modesJSON {
	m.mu.Lock()
	defer m.mu.Unlock()
	task := m.taskDuration.Milliseconds()
	drop := m.dropCreateReplies
	fail := m.failTaskPolls
	window := m.failTaskPollsWindow.Milliseconds()
	name := m.version.Name
	ignored := m.vslmSetFlagsIgnored
	return modesJSON{
		CnsTaskDurationMs:     &task,
		DropCreateReplies:     &drop,
		FailTaskPolls:         &fail,
		FailTaskPollsWindowMs: &window,
		VcenterVersion:        &name,
		AboutVersion:          m.version.Version,
		AboutAPIVersion:       m.version.APIVersion,
		AboutBuild:            m.version.Build,
		VslmSetFlagsIgnored:   &ignored,
		hostileJSON:           m.hostile.toJSON(),
		injectedJSON:          m.injected.toJSON(),
	}
}

func (m *modes) taskDurationNow() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.taskDuration
}

func (m *modes) currentVersion() vcVersion {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.version
}

// setFlagsIgnored says whether VslmSetVStorageObjectControlFlags must leave the flags as
// they are (and answer success all the same).
func (m *modes) setFlagsIgnored() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.vslmSetFlagsIgnored
}

// createArrived notes a CnsCreateVolume (for the poll-failure window) and says whether
// its reply must be dropped.
func (m *modes) createArrived() (drop bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastCreate = time.Now()
	if m.dropCreateReplies > 0 {
		m.dropCreateReplies--
		return true
	}
	return false
}

// failPoll says whether this task poll must answer 503.
func (m *modes) failPoll() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failTaskPolls > 0 {
		m.failTaskPolls--
		return true
	}
	return m.failTaskPollsWindow > 0 && !m.lastCreate.IsZero() &&
		time.Since(m.lastCreate) < m.failTaskPollsWindow
}

// applyVersion writes the version into the ServiceInstance content every client reads
// with RetrieveServiceContent.
func (h *harness) applyVersion(v vcVersion) {
	si, ok := simulator.Map.Get(types.ManagedObjectReference{Type: "ServiceInstance", Value: "ServiceInstance"}).(*simulator.ServiceInstance)
	if !ok {
		return
	}
	simulator.Map.WithLock(si, func() {
		a := &si.Content.About
		a.Version = v.Version
		a.ApiVersion = v.APIVersion
		a.Build = v.Build
		a.FullName = fmt.Sprintf("VMware vCenter Server %s build-%s", v.Version, v.Build)
	})
	h.modes.mu.Lock()
	h.modes.version = v
	h.modes.mu.Unlock()
}

// patchModes applies a POST /debug/modes body.
func (h *harness) patchModes(p modesJSON) error {
	if err := p.hostileJSON.validate(); err != nil {
		return err
	}
	if err := p.injectedJSON.validate(); err != nil {
		return err
	}
	if p.VcenterVersion != nil {
		v, err := findVersion(*p.VcenterVersion)
		if err != nil {
			return err
		}
		h.applyVersion(v)
	}
	for _, n := range []*int{p.DropCreateReplies, p.FailTaskPolls} {
		if n != nil && *n < 0 {
			return fmt.Errorf("counts must not be negative")
		}
	}
	for _, n := range []*int64{p.CnsTaskDurationMs, p.FailTaskPollsWindowMs} {
		if n != nil && *n < 0 {
			return fmt.Errorf("durations must not be negative")
		}
	}
	m := h.modes
	m.mu.Lock()
	defer m.mu.Unlock()
	if p.CnsTaskDurationMs != nil {
		m.taskDuration = time.Duration(*p.CnsTaskDurationMs) * time.Millisecond
	}
	if p.DropCreateReplies != nil {
		m.dropCreateReplies = *p.DropCreateReplies
	}
	if p.FailTaskPolls != nil {
		m.failTaskPolls = *p.FailTaskPolls
	}
	if p.FailTaskPollsWindowMs != nil {
		m.failTaskPollsWindow = time.Duration(*p.FailTaskPollsWindowMs) * time.Millisecond
	}
	if p.VslmSetFlagsIgnored != nil {
		m.vslmSetFlagsIgnored = *p.VslmSetFlagsIgnored
	}
	m.hostile.apply(p.hostileJSON)
	m.injected.apply(p.injectedJSON)
	return nil
}

// serveModes handles GET and POST /debug/modes.
func (h *harness) serveModes(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		var p modesJSON
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			writeError(w, http.StatusBadRequest, "body must be a JSON object: "+err.Error())
			return
		}
		if err := h.patchModes(p); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	writeJSON(w, http.StatusOK, h.modes.snapshot())
}

// credentials returns the user name and password Login accepts now.
func (h *harness) credentials() (string, string) {
	var user, pass string
	sm := simulator.Map.SessionManager()
	simulator.Map.WithLock(sm, func() {
		if u := h.model.Service.Listen.User; u != nil {
			user = u.Username()
			pass, _ = u.Password()
		}
	})
	return user, pass
}

// setCredentials changes what Login accepts (sessions already handed out stay valid).
// Login runs under the SessionManager's lock, so the change is taken under it too.
func (h *harness) setCredentials(user, pass string) {
	sm := simulator.Map.SessionManager()
	simulator.Map.WithLock(sm, func() {
		h.model.Service.Listen.User = url.UserPassword(user, pass)
	})
}

// serveCredentials handles POST /debug/credentials {"username","password"}.
func (h *harness) serveCredentials(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Username *string `json:"username"`
		Password *string `json:"password"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Username == nil || req.Password == nil ||
		*req.Username == "" || *req.Password == "" {
		writeError(w, http.StatusBadRequest, "body must be {\"username\":\"..\",\"password\":\"..\"} (both non-empty)")
		return
	}
	h.setCredentials(*req.Username, *req.Password)
	w.WriteHeader(http.StatusNoContent)
}

// createRecord is one CnsCreateVolume spec as received (GET /debug/cns/creates).
type createRecord struct {
	Name                  string             `json:"name"`
	VolumeType            string             `json:"volumeType"`
	ContainerCluster      *containerCluster  `json:"containerCluster"`
	ContainerClusterArray []containerCluster `json:"containerClusterArray"`
	ProfileIDs            []string           `json:"profileIds"`
	BackingDiskURLPath    string             `json:"backingDiskUrlPath"`
	BackingDiskID         string             `json:"backingDiskId"`
	Datastores            []string           `json:"datastores"`
	UserAgent             string             `json:"userAgent"`
	Time                  string             `json:"time"`
}

type containerCluster struct {
	ClusterType         string `xml:"clusterType" json:"clusterType"`
	ClusterID           string `xml:"clusterId" json:"clusterId"`
	VSphereUser         string `xml:"vSphereUser" json:"vSphereUser"`
	ClusterFlavor       string `xml:"clusterFlavor" json:"clusterFlavor"`
	ClusterDistribution string `xml:"clusterDistribution" json:"clusterDistribution"`
}

// createEnvelope reads exactly the fields of a CnsCreateVolume request that
// GET /debug/cns/creates reports, independent of the simulator's own decoding (which
// drops what govmomi 0.24.2's types do not know, e.g. clusterDistribution).
type createEnvelope struct {
	Body struct {
		Create struct {
			Specs []struct {
				Name       string `xml:"name"`
				VolumeType string `xml:"volumeType"`
				Datastores []struct {
					Value string `xml:",chardata"`
				} `xml:"datastores"`
				Metadata struct {
					ContainerCluster      *containerCluster  `xml:"containerCluster"`
					ContainerClusterArray []containerCluster `xml:"containerClusterArray"`
				} `xml:"metadata"`
				BackingObjectDetails struct {
					BackingDiskURLPath string `xml:"backingDiskUrlPath"`
					BackingDiskID      string `xml:"backingDiskId"`
				} `xml:"backingObjectDetails"`
				Profile []struct {
					ProfileID string `xml:"profileId"`
				} `xml:"profile"`
			} `xml:"createSpecs"`
		} `xml:"CnsCreateVolume"`
	} `xml:"Body"`
}

// createLog keeps every CnsCreateVolume body as it arrived and parses the bodies only
// when the log is read: parsing each create on arrival cost the harness a full XML decode
// per registration, on the cores volmig shares with it.
type createLog struct {
	mu       sync.Mutex
	arrivals []createArrival
}

// createArrival is one CnsCreateVolume body, who sent it and when.
type createArrival struct {
	body []byte
	ua   string
	at   time.Time
}

// record keeps a CnsCreateVolume body (the caller's buffer is not reused after the call).
func (c *createLog) record(body []byte, ua string) {
	now := time.Now()
	c.mu.Lock()
	c.arrivals = append(c.arrivals, createArrival{body: body, ua: ua, at: now})
	c.mu.Unlock()
}

// list returns every spec of the bodies received, in arrival order (unparseable bodies
// add nothing; the simulator answers them with a fault).
func (c *createLog) list() []createRecord {
	c.mu.Lock()
	arrivals := make([]createArrival, len(c.arrivals))
	copy(arrivals, c.arrivals)
	c.mu.Unlock()
	out := []createRecord{}
	for _, a := range arrivals {
		out = append(out, parseCreate(a)...)
	}
	return out
}

// parseCreate reads the specs of one CnsCreateVolume body.
func parseCreate(a createArrival) []createRecord {
	var env createEnvelope
	if err := xml.Unmarshal(a.body, &env); err != nil {
		return nil
	}
	now := a.at.UTC().Format(time.RFC3339Nano)
	var out []createRecord
	for _, s := range env.Body.Create.Specs {
		rec := createRecord{
			Name:                  strings.TrimSpace(s.Name),
			VolumeType:            strings.TrimSpace(s.VolumeType),
			ContainerCluster:      s.Metadata.ContainerCluster,
			ContainerClusterArray: s.Metadata.ContainerClusterArray,
			ProfileIDs:            []string{},
			Datastores:            []string{},
			BackingDiskURLPath:    strings.TrimSpace(s.BackingObjectDetails.BackingDiskURLPath),
			BackingDiskID:         strings.TrimSpace(s.BackingObjectDetails.BackingDiskID),
			UserAgent:             a.ua,
			Time:                  now,
		}
		if rec.ContainerClusterArray == nil {
			rec.ContainerClusterArray = []containerCluster{}
		}
		for _, p := range s.Profile {
			if id := strings.TrimSpace(p.ProfileID); id != "" {
				rec.ProfileIDs = append(rec.ProfileIDs, id)
			}
		}
		for _, d := range s.Datastores {
			rec.Datastores = append(rec.Datastores, strings.TrimSpace(d.Value))
		}
		out = append(out, rec)
	}
	return out
}

func (c *createLog) reset() {
	c.mu.Lock()
	c.arrivals = nil
	c.mu.Unlock()
}

// sortedFlags lists the set flags of an FCD.
func sortedFlags(flags map[string]bool) []string {
	out := []string{}
	for f, on := range flags {
		if on {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}
