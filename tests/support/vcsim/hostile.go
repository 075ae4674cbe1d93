package main

// Hostile vCenter modes: answers a broken, malicious or misconfigured server (or something
// in front of it) could give. Switched at run time with POST /debug/modes
// {"hostile":"KIND","hostileMethod":"M",...}; see README.md ("Hostile modes").

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// hostileKinds are the values of the "hostile" mode ("" = off).
var hostileKinds = map[string]bool{
	"":              true,
	"malformed-xml": true, // 200 text/xml, a truncated envelope
	"garbage-xml":   true, // 200 text/xml, bytes that are no XML at all
	"huge-body":     true, // 200 text/xml, hostileSizeBytes streamed (chunked, never allocated)
	"deep-nesting":  true, // 200 text/xml, hostileDepth nested elements inside the response
	"html-login":    true, // 200 text/html, a login page (a proxy or SSO portal in the way)
	"redirect":      true, // redirectStatus with Location: redirectTo + the request path
	"slowloris":     true, // 200 text/xml headers, then one byte every slowlorisIntervalMs
	"unknown-fault": true, // 500 SOAP fault of type faultName (no vim25 fault has this name)
}

// tlsCertKinds are the values of the "tlsCert" mode ("" = the normal certificate).
var tlsCertKinds = map[string]bool{
	"":           true,
	"rsa1024":    true, // RSA-1024 key, signed by the harness CA, right names
	"wrong-name": true, // signed by the harness CA, but only for vcenter.wrong-name.example
}

const (
	defaultHugeBytes     = 100 << 20 // 100 MiB
	defaultDepth         = 10000
	defaultSlowInterval  = 2 * time.Second
	defaultRedirect      = http.StatusTemporaryRedirect
	defaultFaultName     = "VolmigHarnessUnknownFault"
	slowlorisMaxDuration = 10 * time.Minute
	wrongCertName        = "vcenter.wrong-name.example"
)

// hostileModes is the hostile part of modes (guarded by modes.mu).
type hostileModes struct {
	kind         string
	method       string // only SOAP calls of this method ("" = every SOAP call)
	redirectTo   string
	redirectCode int
	sizeBytes    int64
	depth        int
	slowInterval time.Duration
	faultName    string
	tlsCert      string
}

func defaultHostile() hostileModes {
	return hostileModes{
		redirectCode: defaultRedirect,
		sizeBytes:    defaultHugeBytes,
		depth:        defaultDepth,
		slowInterval: defaultSlowInterval,
		faultName:    defaultFaultName,
	}
}

// hostileJSON are the hostile fields of GET/POST /debug/modes.
type hostileJSON struct {
	Hostile             *string `json:"hostile,omitempty"`
	HostileMethod       *string `json:"hostileMethod,omitempty"`
	RedirectTo          *string `json:"redirectTo,omitempty"`
	RedirectStatus      *int    `json:"redirectStatus,omitempty"`
	HostileSizeBytes    *int64  `json:"hostileSizeBytes,omitempty"`
	HostileDepth        *int    `json:"hostileDepth,omitempty"`
	SlowlorisIntervalMs *int64  `json:"slowlorisIntervalMs,omitempty"`
	FaultName           *string `json:"faultName,omitempty"`
	TLSCert             *string `json:"tlsCert,omitempty"`
}

func (hm hostileModes) toJSON() hostileJSON {
	kind, method, to, code := hm.kind, hm.method, hm.redirectTo, hm.redirectCode
	size, depth, ms, fault, cert := hm.sizeBytes, hm.depth, hm.slowInterval.Milliseconds(), hm.faultName, hm.tlsCert
	return hostileJSON{&kind, &method, &to, &code, &size, &depth, &ms, &fault, &cert}
}

// validate checks a POST body before anything is applied.
func (p hostileJSON) validate() error {
	if p.Hostile != nil && !hostileKinds[*p.Hostile] {
		return fmt.Errorf("unknown hostile mode %q", *p.Hostile)
	}
	if p.TLSCert != nil && !tlsCertKinds[*p.TLSCert] {
		return fmt.Errorf("unknown tlsCert %q (\"\", rsa1024 or wrong-name)", *p.TLSCert)
	}
	if p.RedirectStatus != nil && (*p.RedirectStatus < 300 || *p.RedirectStatus > 399) {
		return fmt.Errorf("redirectStatus must be 3xx")
	}
	if p.HostileSizeBytes != nil && *p.HostileSizeBytes < 0 {
		return fmt.Errorf("hostileSizeBytes must not be negative")
	}
	if p.HostileDepth != nil && *p.HostileDepth < 0 {
		return fmt.Errorf("hostileDepth must not be negative")
	}
	if p.SlowlorisIntervalMs != nil && *p.SlowlorisIntervalMs <= 0 {
		return fmt.Errorf("slowlorisIntervalMs must be positive")
	}
	if p.FaultName != nil && (*p.FaultName == "" || strings.ContainsAny(*p.FaultName, "<>&\"' ")) {
		return fmt.Errorf("faultName must be a non-empty XML name")
	}
	return nil
}

// apply writes the given fields (the caller holds modes.mu).
func (hm *hostileModes) apply(p hostileJSON) {
	if p.Hostile != nil {
		hm.kind = *p.Hostile
	}
	if p.HostileMethod != nil {
		hm.method = *p.HostileMethod
	}
	if p.RedirectTo != nil {
		hm.redirectTo = *p.RedirectTo
	}
	if p.RedirectStatus != nil {
		hm.redirectCode = *p.RedirectStatus
	}
	if p.HostileSizeBytes != nil {
		hm.sizeBytes = *p.HostileSizeBytes
	}
	if p.HostileDepth != nil {
		hm.depth = *p.HostileDepth
	}
	if p.SlowlorisIntervalMs != nil {
		hm.slowInterval = time.Duration(*p.SlowlorisIntervalMs) * time.Millisecond
	}
	if p.FaultName != nil {
		hm.faultName = *p.FaultName
	}
	if p.TLSCert != nil {
		hm.tlsCert = *p.TLSCert
	}
}

// hostileFor returns the hostile settings when a call of method must get a hostile answer.
func (m *modes) hostileFor(method string) (hostileModes, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	hm := m.hostile
	return hm, hm.kind != "" && (hm.method == "" || hm.method == method)
}

func (m *modes) tlsCertKind() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hostile.tlsCert
}

const envelopeHead = `<?xml version="1.0" encoding="UTF-8"?>` +
	`<soapenv:Envelope xmlns:soapenc="http://schemas.xmlsoap.org/soap/encoding/"` +
	` xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"` +
	` xmlns:xsd="http://www.w3.org/2001/XMLSchema"` +
	` xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"><soapenv:Body>`

// serveHostile answers one SOAP call of method according to hm.
func serveHostile(w http.ResponseWriter, flush func(), r *http.Request, method string, hm hostileModes) {
	resp := method + "Response"
	xmlHeader := func(code int) {
		w.Header().Set("Content-Type", "text/xml; charset=utf-8")
		w.WriteHeader(code)
	}
	switch hm.kind {
	case "malformed-xml":
		xmlHeader(http.StatusOK)
		body := envelopeHead + `<` + resp + ` xmlns="urn:vim25"><returnval><rootFolder type="Folder">group-d1</rootFolder><propertyCollector type="PropertyCollector">propColl`
		_, _ = io.WriteString(w, body)
	case "garbage-xml":
		xmlHeader(http.StatusOK)
		_, _ = w.Write([]byte("\x00\xff\xfe<<<</ >>> &&&; <?xml ?> \x01\x02 not xml at all </soapenv:Envelope>"))
	case "huge-body":
		xmlHeader(http.StatusOK)
		streamHuge(w, flush, r, envelopeHead+`<`+resp+` xmlns="urn:vim25"><returnval>`, hm.sizeBytes)
	case "deep-nesting":
		xmlHeader(http.StatusOK)
		var b strings.Builder
		b.WriteString(envelopeHead + `<` + resp + ` xmlns="urn:vim25"><returnval>`)
		for i := 0; i < hm.depth; i++ {
			b.WriteString("<x>")
		}
		for i := 0; i < hm.depth; i++ {
			b.WriteString("</x>")
		}
		b.WriteString(`</returnval></` + resp + `></soapenv:Body></soapenv:Envelope>`)
		_, _ = io.WriteString(w, b.String())
	case "html-login":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `<!DOCTYPE html><html><head><title>Sign in</title></head><body>`+
			`<form method="post" action="/login"><input name="username"><input name="password" type="password">`+
			`<button>Sign in</button></form></body></html>`)
	case "redirect":
		target := strings.TrimSuffix(hm.redirectTo, "/") + r.URL.RequestURI()
		w.Header().Set("Location", target)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(hm.redirectCode)
		_, _ = io.WriteString(w, `<html><body>moved to <a href="`+target+`">here</a></body></html>`)
	case "slowloris":
		xmlHeader(http.StatusOK)
		flush()
		dribble(w, flush, r, envelopeHead+`<`+resp+` xmlns="urn:vim25"><returnval>`, hm.slowInterval)
	case "unknown-fault":
		xmlHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, envelopeHead+`<soapenv:Fault><faultcode>ServerFaultCode</faultcode>`+
			`<faultstring>vcsim-harness: a fault type volmig does not know</faultstring><detail>`+
			`<`+hm.faultName+`Fault xmlns="urn:vim25" xsi:type="`+hm.faultName+`"></`+hm.faultName+`Fault>`+
			`</detail></soapenv:Fault></soapenv:Body></soapenv:Envelope>`)
	}
}

// streamHuge writes head, then filler up to total bytes, in 64 KiB writes of one reused
// buffer, stopping when the client goes away.
func streamHuge(w http.ResponseWriter, flush func(), r *http.Request, head string, total int64) {
	n, err := io.WriteString(w, head)
	if err != nil {
		return
	}
	written := int64(n)
	chunk := []byte(strings.Repeat("<pad>0123456789abcdef0123456789abcdef</pad>", 64*1024/42))
	for written < total {
		if r.Context().Err() != nil {
			return
		}
		part := chunk
		if rest := total - written; rest < int64(len(part)) {
			part = part[:rest]
		}
		n, err := w.Write(part)
		written += int64(n)
		if err != nil {
			return
		}
	}
	flush()
}

// dribble writes body one byte per interval (cycling) until the client goes away or
// slowlorisMaxDuration passes: a response that never ends.
func dribble(w http.ResponseWriter, flush func(), r *http.Request, body string, interval time.Duration) {
	deadline := time.Now().Add(slowlorisMaxDuration)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for i := 0; time.Now().Before(deadline); i++ {
		if _, err := w.Write([]byte{body[i%len(body)]}); err != nil {
			return
		}
		flush()
		select {
		case <-r.Context().Done():
			return
		case <-ticker.C:
		}
	}
}

// altCerts holds the lazily made certificates of the tlsCert modes.
type altCerts struct {
	mu    sync.Mutex
	certs map[string]*tls.Certificate
}

// certFor returns the certificate of kind, made once and signed by the harness CA.
func (a *altCerts) certFor(kind string, caCert *x509.Certificate, caKey interface{}) (*tls.Certificate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.certs[kind]; c != nil {
		return c, nil
	}
	bits := 2048
	names := []string{"localhost"}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	cn := "127.0.0.1"
	switch kind {
	case "rsa1024":
		bits = 1024
	case "wrong-name":
		names, ips, cn = []string{wrongCertName}, nil, wrongCertName
	}
	key, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		return nil, fmt.Errorf("generate %d-bit RSA key: %w", bits, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"volmig vcsim harness (" + kind + ")"}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(10 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     names,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("sign %s certificate: %w", kind, err)
	}
	c := &tls.Certificate{Certificate: [][]byte{der, caCert.Raw}, PrivateKey: key}
	if a.certs == nil {
		a.certs = map[string]*tls.Certificate{}
	}
	a.certs[kind] = c
	return c, nil
}

// installCertSwitch makes the server's TLS config serve the tlsCert mode's certificate to
// new connections (connections already open keep theirs).
func (h *harness) installCertSwitch(cfg *tls.Config) error {
	caCert, caKey, err := loadOrCreateCA(h.certFile)
	if err != nil {
		return err
	}
	alt := &altCerts{}
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		kind := h.modes.tlsCertKind()
		if kind == "" {
			return nil, nil
		}
		c, err := alt.certFor(kind, caCert, caKey)
		if err != nil {
			return nil, err
		}
		return &tls.Config{Certificates: []tls.Certificate{*c}, NextProtos: []string{"http/1.1"}}, nil
	}
	return nil
}
