package main

import (
	"bytes"
	"encoding/xml"
	"net/http"
	"sync"
)

// stats counts SOAP calls per method as they arrive at the listener (before any
// simulator delay), so "in flight" includes the time a call spends in its delay.
type stats struct {
	mu          sync.Mutex
	calls       map[string]int
	faults      map[string]int
	inFlight    map[string]int
	maxInFlight map[string]int
	byUA        map[string]map[string]int
	faultsByUA  map[string]map[string]int
	dropped     map[string]int
	injected    map[string]int
	delayed     map[string]int
}

// statsSnapshot is the JSON of GET /debug/stats.
type statsSnapshot struct {
	Calls            map[string]int            `json:"calls"`
	Faults           map[string]int            `json:"faults"`
	InFlight         map[string]int            `json:"inFlight"`
	MaxInFlight      map[string]int            `json:"maxInFlight"`
	CallsByUserAgent map[string]map[string]int `json:"callsByUserAgent"`
	// FaultsByUserAgent counts HTTP errors per User-Agent and method (a failed Login is
	// an InvalidLogin fault, HTTP 500).
	FaultsByUserAgent map[string]map[string]int `json:"faultsByUserAgent"`
	// Dropped counts calls whose reply the harness dropped (-drop-create-replies).
	Dropped map[string]int `json:"dropped"`
	// Injected counts calls answered with an injected failure (failCalls, injected.go).
	Injected map[string]int `json:"injected"`
	// Delayed counts replies held (replyDelaysMs, injected.go).
	Delayed map[string]int `json:"delayed"`
}

func newStats() *stats {
	s := &stats{inFlight: map[string]int{}}
	s.reset()
	return s
}

// reset clears the counters; calls in flight stay counted in inFlight and maxInFlight.
func (s *stats) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = map[string]int{}
	s.faults = map[string]int{}
	s.byUA = map[string]map[string]int{}
	s.faultsByUA = map[string]map[string]int{}
	s.dropped = map[string]int{}
	s.injected = map[string]int{}
	s.delayed = map[string]int{}
	s.maxInFlight = map[string]int{}
	for k, v := range s.inFlight {
		if v > 0 {
			s.maxInFlight[k] = v
		}
	}
}

func (s *stats) snapshot() statsSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	cp := func(m map[string]int) map[string]int {
		out := make(map[string]int, len(m))
		for k, v := range m {
			if v != 0 {
				out[k] = v
			}
		}
		return out
	}
	ua := make(map[string]map[string]int, len(s.byUA))
	for k, v := range s.byUA {
		ua[k] = cp(v)
	}
	fua := make(map[string]map[string]int, len(s.faultsByUA))
	for k, v := range s.faultsByUA {
		fua[k] = cp(v)
	}
	return statsSnapshot{
		Calls:             cp(s.calls),
		Faults:            cp(s.faults),
		InFlight:          cp(s.inFlight),
		MaxInFlight:       cp(s.maxInFlight),
		CallsByUserAgent:  ua,
		FaultsByUserAgent: fua,
		Dropped:           cp(s.dropped),
		Injected:          cp(s.injected),
		Delayed:           cp(s.delayed),
	}
}

func (s *stats) begin(method, ua string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[method]++
	if s.byUA[ua] == nil {
		s.byUA[ua] = map[string]int{}
	}
	s.byUA[ua][method]++
	s.inFlight[method]++
	if s.inFlight[method] > s.maxInFlight[method] {
		s.maxInFlight[method] = s.inFlight[method]
	}
}

func (s *stats) end(method, ua string, status int, dropped bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inFlight[method]--
	if dropped {
		s.dropped[method]++
	}
	if status >= 400 {
		s.faults[method]++
		if s.faultsByUA[ua] == nil {
			s.faultsByUA[ua] = map[string]int{}
		}
		s.faultsByUA[ua][method]++
	}
}

// inject counts a call answered with an injected failure.
func (s *stats) inject(method string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.injected[method]++
}

// delay counts a reply held back.
func (s *stats) delay(method string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delayed[method]++
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// soapMethod returns the local name of the first element inside the SOAP Body, or
// unknownMethod when the body is not a SOAP envelope. A byte scan answers for the plain
// envelopes clients send; anything it does not handle goes to the XML decoder. The
// decoder on every call was a twentieth of the harness's CPU, on the cores volmig shares.
func soapMethod(body []byte) string {
	if method, ok := scanSOAPMethod(body); ok {
		return method
	}
	return decodeSOAPMethod(body)
}

// unknownMethod names the method of a body that is not a SOAP envelope.
const unknownMethod = "(unknown)"

// envelopeWalk follows the elements of a SOAP envelope, in document order, to the first
// element inside its Body (the Body at depth 2, the method at depth 3).
type envelopeWalk struct {
	depth  int
	inBody bool
}

// open enters an element with local name local; found is true when it is the method.
func (w *envelopeWalk) open(local string) (method string, found bool) {
	w.depth++
	if w.inBody && w.depth == 3 {
		return local, true
	}
	if w.depth == 2 && local == "Body" {
		w.inBody = true
	}
	return "", false
}

// close leaves the innermost open element.
func (w *envelopeWalk) close() {
	if w.depth == 2 {
		w.inBody = false
	}
	w.depth--
}

// scanSOAPMethod walks the tags of body: ok is false (ask the decoder) at a comment,
// CDATA section, DOCTYPE, a name it does not expect, or a tag that does not end.
func scanSOAPMethod(body []byte) (method string, ok bool) {
	var walk envelopeWalk
	i := 0
	for {
		lt := bytes.IndexByte(body[i:], '<')
		if lt < 0 {
			return unknownMethod, true
		}
		i += lt + 1
		if i >= len(body) {
			return "", false
		}
		switch body[i] {
		case '!':
			return "", false
		case '?':
			end := bytes.Index(body[i:], []byte("?>"))
			if end < 0 {
				return "", false
			}
			i += end + 2
			continue
		case '/':
			end := bytes.IndexByte(body[i:], '>')
			if end < 0 {
				return "", false
			}
			i += end + 1
			walk.close()
			continue
		}
		nameEnd := i
		for nameEnd < len(body) && isNameByte(body[nameEnd]) {
			nameEnd++
		}
		if nameEnd == i || nameEnd >= len(body) {
			return "", false
		}
		name := body[i:nameEnd]
		if c := body[nameEnd]; c != '>' && c != '/' && c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return "", false
		}
		tagEnd, selfClosing, found := endOfTag(body, nameEnd)
		if !found {
			return "", false
		}
		if method, found := walk.open(string(name[bytes.LastIndexByte(name, ':')+1:])); found {
			return method, true
		}
		if selfClosing {
			walk.close()
		}
		i = tagEnd
	}
}

// endOfTag returns the index after the '>' that closes the tag whose attributes start at
// from (quoted attribute values may hold '>' and '/'), and whether the tag closes itself.
func endOfTag(body []byte, from int) (next int, selfClosing bool, found bool) {
	var quote byte
	for j := from; j < len(body); j++ {
		c := body[j]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '>':
			return j + 1, j > from && body[j-1] == '/', true
		}
	}
	return 0, false, false
}

// isNameByte: the bytes of the element names SOAP clients send (ASCII names, prefixes).
func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '-' || c == '.' || c == ':'
}

// decodeSOAPMethod is soapMethod by the XML decoder (raw tokens: only local names count).
func decodeSOAPMethod(body []byte) string {
	d := xml.NewDecoder(bytes.NewReader(body))
	var walk envelopeWalk
	for {
		tok, err := d.RawToken()
		if err != nil {
			return unknownMethod
		}
		switch t := tok.(type) {
		case xml.StartElement:
			if method, found := walk.open(t.Name.Local); found {
				return method
			}
		case xml.EndElement:
			walk.close()
		}
	}
}
