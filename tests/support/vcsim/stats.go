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
// "(unknown)" when the body is not a SOAP envelope.
func soapMethod(body []byte) string {
	d := xml.NewDecoder(bytes.NewReader(body))
	depth := 0
	inBody := false
	for {
		tok, err := d.Token()
		if err != nil {
			return "(unknown)"
		}
		switch t := tok.(type) {
		case xml.StartElement:
			depth++
			if inBody && depth == 3 {
				return t.Name.Local
			}
			if depth == 2 && t.Name.Local == "Body" {
				inBody = true
			}
		case xml.EndElement:
			if depth == 2 {
				inBody = false
			}
			depth--
		}
	}
}
