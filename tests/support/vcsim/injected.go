package main

// Injected failures and held replies, per SOAP method, switched at run time with
// POST /debug/modes:
//
//	{"failCalls": {"QueryVirtualDiskUuid": {"count": 4, "answer": "http503"}}}
//	{"failCalls": {"TaskPoll": {"count": 2, "answer": "NotAuthenticated"}}}
//	{"replyDelaysMs": {"CnsCreateVolume": 2900, "RegisterDisk": 2900}}
//
// failCalls: the next `count` calls of the method get `answer` instead of the simulator's
// (the simulator never sees them): "http503" (HTTP 503, no SOAP body) or
// "NotAuthenticated" (HTTP 500 SOAP fault NotAuthenticated, as vCenter answers a call
// whose session is gone; the session itself stays valid, so a re-login works). The key
// "TaskPoll" names task polls (see isTaskPoll) whatever their method; a call matching
// both its method's entry and "TaskPoll" uses its method's. A count of 0 removes the
// entry. replyDelaysMs: the simulator answers the call at once (a create task starts
// running), and the reply is held that long before it is written; 0 removes the entry.
// Every entry given replaces the one of that method; other methods keep theirs.
//
// GET /debug/stats counts what was applied: "injected" (failures answered, by real
// method) and "delayed" (replies held, by method).

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"time"
)

// taskPollKey is the failCalls and replyDelaysMs key that names every task poll.
const taskPollKey = "TaskPoll"

// failAnswers are the answers failCalls can give.
var failAnswers = map[string]bool{"http503": true, "NotAuthenticated": true}

// failCall is one failCalls entry: what is left to fail, and how.
type failCall struct {
	Count  int    `json:"count"`
	Answer string `json:"answer"`
}

// injectedJSON are the fields of GET/POST /debug/modes this file adds.
type injectedJSON struct {
	FailCalls     map[string]failCall `json:"failCalls,omitempty"`
	ReplyDelaysMs map[string]int64    `json:"replyDelaysMs,omitempty"`
}

// injectedModes is the part of modes this file adds (guarded by modes.mu).
type injectedModes struct {
	failCalls   map[string]failCall
	replyDelays map[string]time.Duration
}

func (im injectedModes) toJSON() injectedJSON {
	out := injectedJSON{FailCalls: map[string]failCall{}, ReplyDelaysMs: map[string]int64{}}
	for k, v := range im.failCalls {
		out.FailCalls[k] = v
	}
	for k, v := range im.replyDelays {
		out.ReplyDelaysMs[k] = v.Milliseconds()
	}
	return out
}

// validate checks a POST body before anything is applied.
func (p injectedJSON) validate() error {
	for method, fc := range p.FailCalls {
		if method == "" {
			return fmt.Errorf("failCalls: empty method name")
		}
		if fc.Count < 0 {
			return fmt.Errorf("failCalls %s: count must not be negative", method)
		}
		if fc.Count > 0 && !failAnswers[fc.Answer] {
			return fmt.Errorf("failCalls %s: unknown answer %q (http503 or NotAuthenticated)", method, fc.Answer)
		}
	}
	for method, ms := range p.ReplyDelaysMs {
		if method == "" {
			return fmt.Errorf("replyDelaysMs: empty method name")
		}
		if ms < 0 {
			return fmt.Errorf("replyDelaysMs %s: must not be negative", method)
		}
	}
	return nil
}

// apply writes the given entries (the caller holds modes.mu).
func (im *injectedModes) apply(p injectedJSON) {
	for method, fc := range p.FailCalls {
		if im.failCalls == nil {
			im.failCalls = map[string]failCall{}
		}
		if fc.Count == 0 {
			delete(im.failCalls, method)
		} else {
			im.failCalls[method] = fc
		}
	}
	for method, ms := range p.ReplyDelaysMs {
		if im.replyDelays == nil {
			im.replyDelays = map[string]time.Duration{}
		}
		if ms == 0 {
			delete(im.replyDelays, method)
		} else {
			im.replyDelays[method] = time.Duration(ms) * time.Millisecond
		}
	}
}

// injectedFailure says whether this call must get an injected answer, and which (one of
// the count is used up).
func (m *modes) injectedFailure(method string, taskPoll bool) (answer string, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, key := range []string{method, taskPollKey} {
		if key == taskPollKey && !taskPoll {
			continue
		}
		fc, found := m.injected.failCalls[key]
		if !found || fc.Count <= 0 {
			continue
		}
		fc.Count--
		if fc.Count == 0 {
			delete(m.injected.failCalls, key)
		} else {
			m.injected.failCalls[key] = fc
		}
		return fc.Answer, true
	}
	return "", false
}

// replyDelay is how long the reply of this call is held (0 = not held).
func (m *modes) replyDelay(method string, taskPoll bool) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d, ok := m.injected.replyDelays[method]; ok {
		return d
	}
	if taskPoll {
		return m.injected.replyDelays[taskPollKey]
	}
	return 0
}

// serveInjected writes the injected answer.
func serveInjected(w http.ResponseWriter, answer string) {
	switch answer {
	case "NotAuthenticated":
		w.Header().Set("Content-Type", "text/xml; charset=utf-8")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, envelopeHead+`<soapenv:Fault><faultcode>ServerFaultCode</faultcode>`+
			`<faultstring>The session is not authenticated.</faultstring><detail>`+
			`<NotAuthenticatedFault xmlns="urn:vim25" xsi:type="NotAuthenticated">`+
			`<object type="SessionManager">SessionManager</object><privilegeId>System.View</privilegeId>`+
			`</NotAuthenticatedFault></detail></soapenv:Fault></soapenv:Body></soapenv:Envelope>`)
	default:
		http.Error(w, "503 Service Unavailable (vcsim-harness: failCalls)", http.StatusServiceUnavailable)
	}
}

// heldReply buffers a reply to write it later.
type heldReply struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *heldReply) Header() http.Header { return b.header }

func (b *heldReply) WriteHeader(code int) {
	if b.status == 0 {
		b.status = code
	}
}

func (b *heldReply) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}

// serveHeld lets next answer at once, holds the reply for d (less if the client goes
// away), then writes it to w.
func serveHeld(w http.ResponseWriter, r *http.Request, next http.Handler, d time.Duration) {
	held := &heldReply{header: http.Header{}}
	next.ServeHTTP(held, r)
	timer := time.NewTimer(d)
	select {
	case <-timer.C:
	case <-r.Context().Done():
		timer.Stop()
	}
	for k, v := range held.header {
		w.Header()[k] = v
	}
	if held.status == 0 {
		held.status = http.StatusOK
	}
	w.WriteHeader(held.status)
	_, _ = w.Write(held.body.Bytes())
}
