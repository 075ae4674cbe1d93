package main

import (
	"bytes"
	"context"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/vmware/govmomi/cns"
	cnssim "github.com/vmware/govmomi/cns/simulator"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// harness owns one simulator instance and everything the admin endpoints need.
type harness struct {
	opts       *options
	model      *simulator.Model
	server     *simulator.Server
	cnsReg     *simulator.Registry
	cns        *cnsManager
	stats      *stats
	tmp        string
	certFile   string
	url        string
	admin      string
	dcRef      types.ManagedObjectReference
	dcPath     string
	datastores []*datastore

	fileMu sync.Mutex

	sessionMu sync.Mutex
	sessions  map[string]bool // keys handed out by Login, for POST /debug/sessions/expire

	modes   *modes     // runtime-switchable behaviour (POST /debug/modes)
	creates *createLog // every CnsCreateVolume spec received (GET /debug/cns/creates)
	fcds    *fcdStore  // FCDs for RegisterDisk, backingDiskId and VSLM
}

// datastore is one local datastore and the directory that backs it.
type datastore struct {
	name    string
	dir     string
	invPath string
	ref     types.ManagedObjectReference
}

func newHarness(opts *options) (h *harness, err error) {
	version, err := findVersion(opts.vcenterVersion)
	if err != nil {
		return nil, err
	}
	h = &harness{
		opts: opts, stats: newStats(), sessions: map[string]bool{},
		modes: &modes{
			taskDuration:        opts.cnsTaskDuration,
			dropCreateReplies:   opts.dropCreateReplies,
			failTaskPolls:       opts.failTaskPolls,
			failTaskPollsWindow: opts.failTaskPollsWindow,
			hostile:             defaultHostile(),
		},
		creates: &createLog{},
		fcds:    newFcdStore(),
	}
	defer func() {
		if err != nil && h.tmp != "" {
			_ = os.RemoveAll(h.tmp)
		}
	}()

	if opts.trace {
		simulator.Trace = true
		simulator.TraceFile = os.Stderr
	}

	m := simulator.VPX()
	m.Datastore = 0 // created below, in directories that survive a restart
	m.Machine = 0
	m.Autostart = false
	m.ClusterHost = 2
	if opts.datacenterFolder != "" {
		m.Folder = 1
	}
	m.DelayConfig.MethodDelay = map[string]int{}
	for k, v := range opts.delays {
		m.DelayConfig.MethodDelay[k] = v
	}
	if err = m.Create(); err != nil {
		return nil, fmt.Errorf("create model: %w", err)
	}
	h.model = m

	ctx := context.Background()
	c, err := vim25.NewClient(ctx, m.Service)
	if err != nil {
		return nil, fmt.Errorf("in-process client: %w", err)
	}
	if opts.datacenterFolder != "" {
		if err = renameTopFolder(ctx, c, opts.datacenterFolder); err != nil {
			return nil, err
		}
	}
	if err = h.createDatastores(ctx, c); err != nil {
		return nil, err
	}
	dc := simulator.Map.Any("Datacenter")
	if dc == nil {
		return nil, fmt.Errorf("model has no datacenter")
	}
	h.dcRef = dc.Reference()
	h.dcPath = inventoryPath(h.dcRef)
	if err = h.createVmdks(); err != nil {
		return nil, err
	}

	h.installCNS()
	h.applyVersion(version)
	if err = h.installVStorageObjectManager(); err != nil {
		return nil, err
	}
	h.installVSLM()
	h.installPBM()

	if !opts.plainHTTP {
		h.certFile = opts.certOut
		if h.certFile == "" {
			tmp, terr := h.tempDir()
			if terr != nil {
				return nil, terr
			}
			h.certFile = filepath.Join(tmp, "ca.pem")
		}
		if m.Service.TLS, err = serverTLS(h.certFile); err != nil {
			return nil, err
		}
		if err = h.installCertSwitch(m.Service.TLS); err != nil {
			return nil, err
		}
	}
	m.Service.Listen = &url.URL{Host: opts.listen, User: url.UserPassword(opts.username, opts.password)}
	// The CNS endpoint is installed by installCNS (a wrapped copy of cns/simulator's
	// registry), PBM by installPBM; RegisterEndpoints would register them a second time.
	m.Service.RegisterEndpoints = false
	if err = h.startServer(); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *harness) startServer() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("listen on %s: %v", h.opts.listen, r)
		}
	}()
	srv := h.model.Service.NewServer()
	// No client knows the port before the start line is printed, so replacing the handler
	// here is not observed by any request.
	srv.Config.Handler = h.handler(h.model.Service.ServeMux)
	h.server = srv
	u := *srv.URL
	u.User = nil
	h.url = u.String()
	h.admin = (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/debug"}).String()
	return nil
}

func (h *harness) close() {
	if h.server != nil {
		h.server.Close()
	}
	if h.model != nil {
		h.model.Remove()
	}
	if h.tmp != "" {
		_ = os.RemoveAll(h.tmp)
	}
}

// tempDir creates (once) the directory removed on exit; it is only needed when
// -datastore-dir or -cert-out is not given, so a SIGKILLed harness started with both
// leaves nothing behind.
func (h *harness) tempDir() (string, error) {
	if h.tmp == "" {
		dir, err := os.MkdirTemp("", "vcsim-harness-")
		if err != nil {
			return "", err
		}
		h.tmp = dir
	}
	return h.tmp, nil
}

func (h *harness) startLine() startLine {
	dss := make([]datastoreEntry, 0, len(h.datastores))
	for _, ds := range h.datastores {
		dss = append(dss, datastoreEntry{Name: ds.name, Dir: ds.dir, InventoryPath: ds.invPath, Ref: ds.ref.Value})
	}
	user, _ := h.credentials()
	return startLine{
		URL:         h.url,
		Datacenter:  filepath.Base(h.dcPath),
		Datacenters: []string{h.dcPath},
		Datastores:  dss,
		Cert:        h.certFile,
		Admin:       h.admin,
		Username:    user,
		CnsQuery:    h.opts.cnsQuery,
	}
}

// renameTopFolder renames the folder Model.Folder created above the datacenter ("F0").
func renameTopFolder(ctx context.Context, c *vim25.Client, name string) error {
	root, ok := simulator.Map.Get(c.ServiceContent.RootFolder).(*simulator.Folder)
	if !ok {
		return fmt.Errorf("root folder not found")
	}
	for _, child := range root.ChildEntity {
		if child.Type != "Folder" {
			continue
		}
		task, err := object.NewFolder(c, child).Rename(ctx, name)
		if err != nil {
			return fmt.Errorf("rename folder %s: %w", child.Value, err)
		}
		return task.Wait(ctx)
	}
	return fmt.Errorf("no datacenter folder to rename")
}

// createDatastores mounts -datastores local datastores on every host, backed by
// directories under -datastore-dir (or the temporary directory).
func (h *harness) createDatastores(ctx context.Context, c *vim25.Client) error {
	root := h.opts.datastoreDir
	if root == "" {
		tmp, err := h.tempDir()
		if err != nil {
			return err
		}
		root = filepath.Join(tmp, "datastores")
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	hosts := simulator.Map.All("HostSystem")
	if len(hosts) == 0 {
		return fmt.Errorf("model has no hosts")
	}
	for i := 0; i < h.opts.datastores; i++ {
		name := fmt.Sprintf("LocalDS_%d", i)
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		ds := &datastore{name: name, dir: dir}
		for _, host := range hosts {
			dss, err := object.NewHostSystem(c, host.Reference()).ConfigManager().DatastoreSystem(ctx)
			if err != nil {
				return err
			}
			obj, err := dss.CreateLocalDatastore(ctx, name, dir)
			if err != nil {
				return fmt.Errorf("create datastore %s on %s: %w", name, host.Reference().Value, err)
			}
			ds.ref = obj.Reference()
		}
		ds.invPath = inventoryPath(ds.ref)
		h.datastores = append(h.datastores, ds)
	}
	return nil
}

// inventoryPath walks the parents of an entity up to (not including) the root folder.
func inventoryPath(ref types.ManagedObjectReference) string {
	var parts []string
	for {
		e, ok := simulator.Map.Get(ref).(mo.Entity)
		if !ok {
			break
		}
		me := e.Entity()
		if me.Parent == nil {
			break
		}
		parts = append([]string{me.Name}, parts...)
		ref = *me.Parent
	}
	return "/" + strings.Join(parts, "/")
}

const vmdkDescriptor = `# Disk DescriptorFile
version=1
encoding="UTF-8"
CID=fffffffe
parentCID=ffffffff
createType="vmfs"

# Extent description
RW 2048 VMFS "%s"

ddb.adapterType = "lsilogic"
ddb.virtualHWVersion = "13"
`

// createVmdks creates disk-0001.vmdk.. in each folder of the first datastore; existing
// files are kept, so a restart with the same -datastore-dir changes nothing.
func (h *harness) createVmdks() error {
	if h.opts.vmdks <= 0 {
		return nil
	}
	for _, folder := range h.opts.folders {
		for i := 1; i <= h.opts.vmdks; i++ {
			rel := fmt.Sprintf("%s/disk-%04d.vmdk", folder, i)
			if _, err := h.createVmdk(h.datastores[0], rel); err != nil {
				return err
			}
		}
	}
	return nil
}

// createVmdk creates the file (and its folders) unless it exists; it returns the absolute
// file name.
func (h *harness) createVmdk(ds *datastore, rel string) (string, error) {
	clean := filepath.Clean("/" + rel)
	if clean == "/" || !strings.HasSuffix(strings.ToLower(clean), ".vmdk") {
		return "", fmt.Errorf("%q is not a vmdk path", rel)
	}
	file := filepath.Join(ds.dir, clean)
	h.fileMu.Lock()
	defer h.fileMu.Unlock()
	if _, err := os.Stat(file); err == nil {
		return file, nil
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return "", err
	}
	flat := strings.TrimSuffix(filepath.Base(file), ".vmdk") + "-flat.vmdk"
	if err := os.WriteFile(file, []byte(fmt.Sprintf(vmdkDescriptor, flat)), 0o644); err != nil {
		return "", err
	}
	return file, nil
}

func (h *harness) datastoreByName(name string) *datastore {
	for _, ds := range h.datastores {
		if ds.name == name {
			return ds
		}
	}
	return nil
}

func (h *harness) datastoreByRef(ref types.ManagedObjectReference) *datastore {
	for _, ds := range h.datastores {
		if ds.ref == ref {
			return ds
		}
	}
	return nil
}

// installCNS registers /vsanHealth with cns/simulator's CnsVolumeManager wrapped by
// cnsManager (see cns.go for what the wrapper adds).
func (h *harness) installCNS() {
	upstreamReg := cnssim.New()
	upstream := upstreamReg.Get(cns.CnsVolumeManagerInstance).(*cnssim.CnsVolumeManager)
	reg := simulator.NewRegistry()
	reg.Namespace = cns.Namespace
	reg.Path = cns.Path
	h.cns = &cnsManager{CnsVolumeManager: upstream, h: h, meta: map[string]*volumeMeta{}, byName: map[string]map[string]bool{}}
	reg.Put(h.cns)
	h.cnsReg = reg
	h.model.Service.RegisterSDK(reg)
}

// handler serves /debug/ itself and counts every SOAP call before the simulator sees it;
// the fault modes (dropped create replies, failing task polls) act here.
func (h *harness) handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/debug" || strings.HasPrefix(r.URL.Path, "/debug/") {
			h.serveAdmin(w, r)
			return
		}
		if r.Method == http.MethodPost {
			h.serveSOAP(w, r, next)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serveSOAP reads the body, names the SOAP method, counts the call around the simulator
// and applies the fault modes.
func (h *harness) serveSOAP(w http.ResponseWriter, r *http.Request, next http.Handler) {
	body, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	method := soapMethod(body)
	ua := r.UserAgent()
	if r.URL.Path != "/sdk" {
		sessionFromHeader(r, body)
	}
	h.stats.begin(method, ua)
	rec := &statusRecorder{ResponseWriter: w}
	counted := false
	defer func() {
		if !counted {
			h.stats.end(method, ua, rec.status, false)
		}
	}()

	drop := false
	if method == "CnsCreateVolume" {
		h.creates.record(body, ua)
		drop = h.modes.createArrived()
	}
	if hm, ok := h.modes.hostileFor(method); ok {
		flush := func() {
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
		serveHostile(rec, flush, r, method, hm)
		return
	}
	taskPoll := isTaskPoll(method, body)
	if answer, ok := h.modes.injectedFailure(method, taskPoll); ok {
		h.stats.inject(method)
		serveInjected(rec, answer)
		return
	}
	if taskPoll && h.modes.failPoll() {
		http.Error(rec, "503 Service Unavailable (vcsim-harness: failing task polls)", http.StatusServiceUnavailable)
		return
	}
	if drop {
		// The call runs to the end (the task and the volume exist), then the connection
		// is closed without an answer: a reply lost on the way back.
		next.ServeHTTP(&discardWriter{header: http.Header{}}, r)
		// Counted before the connection closes: a client that sees it close and asks for
		// the stats at once must find the dropped call counted.
		h.stats.end(method, ua, rec.status, true)
		counted = true
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler) // no hijacking (HTTP/2): abort the stream instead
	}
	if d := h.modes.replyDelay(method, taskPoll); d > 0 {
		h.stats.delay(method)
		serveHeld(rec, r, next, d)
	} else {
		next.ServeHTTP(rec, r)
	}
	if method == "Login" && rec.status == http.StatusOK {
		h.rememberSession(rec.Header())
	}
}

// discardWriter swallows the response of a call whose reply is dropped.
type discardWriter struct{ header http.Header }

func (d *discardWriter) Header() http.Header         { return d.header }
func (d *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (d *discardWriter) WriteHeader(int)             {}

var (
	taskObjRE     = regexp.MustCompile(`<(?:[A-Za-z0-9_]+:)?obj\b[^>]*\btype="Task"`)
	sessionHdrRE  = regexp.MustCompile(`<(?:[A-Za-z0-9_]+:)?vcSessionCookie>([^<]*)</`)
	taskPollCalls = map[string]bool{"RetrievePropertiesEx": true, "RetrieveProperties": true, "CreateFilter": true}
)

// isTaskPoll tells a task poll: RetrieveProperties(Ex) or CreateFilter whose object set
// names a Task (volmig and govmomi's task.Wait read a task this way).
func isTaskPoll(method string, body []byte) bool {
	return taskPollCalls[method] && taskObjRE.Match(body)
}

// sessionFromHeader lets a call to a non-vim25 endpoint (/vsanHealth, /pbm/sdk,
// /vslm/sdk) authenticate with only the vcSessionCookie SOAP header, as real vCenter's
// services do: the simulator itself reads only the vmware_soap_session cookie.
func sessionFromHeader(r *http.Request, body []byte) {
	if _, err := r.Cookie(soap.SessionCookieName); err == nil {
		return
	}
	m := sessionHdrRE.FindSubmatch(body)
	if m == nil {
		return
	}
	val := strings.Trim(html.UnescapeString(strings.TrimSpace(string(m[1]))), `"`)
	if val != "" {
		r.AddCookie(&http.Cookie{Name: soap.SessionCookieName, Value: val})
	}
}

// rememberSession records the session key a successful Login set as a cookie.
func (h *harness) rememberSession(header http.Header) {
	for _, c := range (&http.Response{Header: header}).Cookies() {
		if c.Name == soap.SessionCookieName && c.Value != "" {
			h.sessionMu.Lock()
			h.sessions[c.Value] = true
			h.sessionMu.Unlock()
		}
	}
}

// expireSessions terminates every session Login handed out (as vCenter does when sessions
// time out); the next call of such a client gets NotAuthenticated. Returns how many were
// still alive.
func (h *harness) expireSessions() int {
	h.sessionMu.Lock()
	keys := make([]string, 0, len(h.sessions))
	for k := range h.sessions {
		keys = append(keys, k)
	}
	h.sessions = map[string]bool{}
	h.sessionMu.Unlock()

	sm := simulator.Map.SessionManager()
	// TerminateSession refuses to end the caller's own session; the caller here is nobody.
	ctx := &simulator.Context{Context: context.Background(), Map: simulator.Map, Session: &simulator.Session{}}
	n := 0
	for _, k := range keys {
		var res soap.HasFault
		simulator.Map.WithLock(sm, func() {
			res = sm.TerminateSession(ctx, &types.TerminateSession{This: sm.Reference(), SessionId: []string{k}})
		})
		if res.Fault() == nil {
			n++
		}
	}
	return n
}
