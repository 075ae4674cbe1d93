// Command vcsim-harness runs the govmomi vCenter simulator (with its CNS endpoint) for
// volmig's tests: it builds a small inventory with persistent datastore directories,
// serves SOAP on one loopback listener, and adds admin JSON endpoints under /debug/ that
// read the simulator's own state. See README.md for the flags and the start-up line.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// delayFlag collects repeatable -delay Method=ms flags.
type delayFlag map[string]int

func (d delayFlag) String() string {
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, d[k]))
	}
	return strings.Join(parts, ",")
}

func (d delayFlag) Set(v string) error {
	for _, item := range strings.Split(v, ",") {
		kv := strings.SplitN(strings.TrimSpace(item), "=", 2)
		if len(kv) != 2 || kv[0] == "" {
			return fmt.Errorf("want Method=milliseconds, got %q", item)
		}
		ms, err := strconv.Atoi(kv[1])
		if err != nil || ms < 0 {
			return fmt.Errorf("delay for %s: %q is not a non-negative integer", kv[0], kv[1])
		}
		d[kv[0]] = ms
	}
	return nil
}

// options are the parsed command-line flags.
type options struct {
	listen           string
	plainHTTP        bool
	certOut          string
	username         string
	password         string
	delays           delayFlag
	vmdks            int
	folders          []string
	datacenterFolder string
	datastores       int
	datastoreDir     string
	trace            bool
	alreadyReg       bool
	cnsQuery         string
	cnsPageLimit     int
	stdinEOFExit     bool

	cnsTaskDuration     time.Duration
	dropCreateReplies   int
	failTaskPolls       int
	failTaskPollsWindow time.Duration
	vcenterVersion      string
}

// startLine is the one JSON line printed on stdout once the simulator is serving.
type startLine struct {
	URL         string           `json:"url"`
	Datacenter  string           `json:"datacenter"`
	Datacenters []string         `json:"datacenters"`
	Datastores  []datastoreEntry `json:"datastores"`
	Cert        string           `json:"cert"`
	Admin       string           `json:"admin"`
	Username    string           `json:"username"`
	CnsQuery    string           `json:"cnsQuery"`
}

type datastoreEntry struct {
	Name          string `json:"name"`
	Dir           string `json:"dir"`
	InventoryPath string `json:"inventoryPath"`
	Ref           string `json:"ref"`
}

func parseFlags() *options {
	o := &options{delays: delayFlag{}}
	var folders string
	flag.StringVar(&o.listen, "listen", "127.0.0.1:0", "listen address (loopback only unless you mean it; port 0 = free port)")
	flag.BoolVar(&o.plainHTTP, "plain-http", false, "serve plain HTTP instead of HTTPS")
	flag.BoolVar(&o.plainHTTP, "no-tls", false, "alias of -plain-http")
	tlsFlag := flag.Bool("tls", true, "serve HTTPS with a generated CA-signed certificate (the default)")
	flag.StringVar(&o.certOut, "cert-out", "", "write the CA certificate (PEM) here; with FILE.key next to it an existing CA is reused")
	flag.StringVar(&o.username, "username", "user", "the only user name Login accepts")
	flag.StringVar(&o.password, "password", "pass", "the only password Login accepts")
	flag.Var(o.delays, "delay", "per-method delay Method=ms (repeatable, e.g. CnsCreateVolume=200)")
	flag.IntVar(&o.vmdks, "vmdks", 0, "create N vmdk files disk-0001.vmdk.. in each -folders folder of the first datastore")
	flag.StringVar(&folders, "folders", "kubevols", "comma-separated datastore folders for -vmdks")
	flag.StringVar(&o.datacenterFolder, "datacenter-folder", "", "put the datacenter inside an inventory folder of this name")
	flag.IntVar(&o.datastores, "datastores", 1, "number of local datastores (LocalDS_0..)")
	flag.StringVar(&o.datastoreDir, "datastore-dir", "", "root directory for datastore directories (kept on exit; default: a temporary directory removed on exit)")
	flag.BoolVar(&o.trace, "trace", false, "log every SOAP request and response body to stderr")
	flag.BoolVar(&o.alreadyReg, "cns-already-registered", false, "CnsCreateVolume of a disk registered before the call arrived fails with CnsAlreadyRegisteredFault on every release (7.0.3 and 8.0.3 do so without it)")
	flag.StringVar(&o.cnsQuery, "cns-query", "vcenter", "CnsQueryVolume filters: vcenter (honour ids, names, cluster ids, datastores) or upstream (govmomi: volume ids only)")
	flag.IntVar(&o.cnsPageLimit, "cns-page-limit", 0, "cap on volumes per CnsQueryVolume page (0 = no cap)")
	flag.DurationVar(&o.cnsTaskDuration, "cns-task-duration", 0, "CnsCreateVolume tasks stay running this long (e.g. 3s) before the volume is created (0 = at once)")
	flag.IntVar(&o.dropCreateReplies, "drop-create-replies", 0, "the next N CnsCreateVolume calls run, but the connection is closed without a reply")
	flag.IntVar(&o.failTaskPolls, "fail-task-polls", 0, "the next N task polls (RetrieveProperties(Ex)/CreateFilter on a Task) answer HTTP 503")
	flag.DurationVar(&o.failTaskPollsWindow, "fail-task-polls-window", 0, "task polls answer HTTP 503 for this long after each CnsCreateVolume arrives")
	flag.StringVar(&o.vcenterVersion, "vcenter-version", "6.5", "about.version/apiVersion to report: 6.5 (govmomi default), 6.7.3, 6.7U3l, 7.0.0, 7.0.3 or 8.0.3")
	flag.BoolVar(&o.stdinEOFExit, "exit-on-stdin-eof", false, "exit when stdin reaches EOF (the parent died)")
	flag.Parse()
	if !*tlsFlag {
		o.plainHTTP = true
	}
	o.folders = nil
	for _, f := range strings.Split(folders, ",") {
		if f = strings.Trim(strings.TrimSpace(f), "/"); f != "" {
			o.folders = append(o.folders, f)
		}
	}
	if o.cnsQuery != "vcenter" && o.cnsQuery != "upstream" {
		log.Fatalf("-cns-query must be vcenter or upstream, got %q", o.cnsQuery)
	}
	if _, err := findVersion(o.vcenterVersion); err != nil {
		log.Fatalf("-vcenter-version: %v", err)
	}
	if o.dropCreateReplies < 0 || o.failTaskPolls < 0 || o.cnsTaskDuration < 0 || o.failTaskPollsWindow < 0 {
		log.Fatalf("-drop-create-replies, -fail-task-polls and the durations must not be negative")
	}
	if o.datastores < 1 {
		log.Fatalf("-datastores must be at least 1")
	}
	return o
}

func main() {
	log.SetPrefix("vcsim-harness: ")
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	opts := parseFlags()
	// The harness shares the machine's cores with the client under test (a real vCenter
	// runs elsewhere): collect garbage at 4x the live heap instead of 2x, which roughly
	// halves the collector's CPU for a few more MiB. GOGC, when set, still decides.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	// Installed before start-up, so a SIGTERM that arrives early still ends with exit 0.
	stop := make(chan os.Signal, 2)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)

	h, err := newHarness(opts)
	if err != nil {
		log.Fatalf("start: %v", err)
	}

	line, err := json.Marshal(h.startLine())
	if err != nil {
		log.Fatalf("encode start line: %v", err)
	}
	fmt.Println(string(line))
	_ = os.Stdout.Sync()

	if opts.stdinEOFExit {
		go func() {
			buf := make([]byte, 256)
			for {
				if _, err := os.Stdin.Read(buf); err != nil {
					stop <- syscall.SIGTERM
					return
				}
			}
		}()
	}
	sig := <-stop
	log.Printf("%v: shutting down", sig)
	h.close()
	os.Exit(0)
}
