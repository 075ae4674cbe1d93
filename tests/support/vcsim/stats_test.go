package main

import "testing"

// The byte scan must name the same method as the XML decoder wherever it answers.
func TestSoapMethodScanAgreesWithTheDecoder(t *testing.T) {
	bodies := map[string]string{
		"plain":                   `<?xml version="1.0" encoding="UTF-8"?><soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"><soapenv:Body><CnsCreateVolume xmlns="urn:vsan"><_this type="CnsVolumeManager">cns-volume-manager</_this></CnsCreateVolume></soapenv:Body></soapenv:Envelope>`,
		"header":                  `<Envelope xmlns="http://schemas.xmlsoap.org/soap/envelope/"><Header><operationID>a/b>c</operationID><vcSessionCookie>"x"</vcSessionCookie></Header><Body><RetrievePropertiesEx xmlns="urn:vim25"/></Body></Envelope>`,
		"attributes with > and /": `<s:Envelope a="1>2" b='x/'><s:Body c="/>"><m:QueryVirtualDiskUuid d="x"><name>[ds] a/b.vmdk</name></m:QueryVirtualDiskUuid></s:Body></s:Envelope>`,
		"self-closing body":       `<Envelope><Body/><Other><Inner/></Other></Envelope>`,
		"body not second level":   `<Envelope><Wrap><Body><Method/></Body></Wrap></Envelope>`,
		"whitespace":              "<Envelope>\n  <Body\n   >\n    <Login\txmlns=\"urn:vim25\">\n</Login></Body></Envelope>",
		"empty":                   ``,
		"not xml":                 `hello`,
		"no body":                 `<Envelope><Header/></Envelope>`,
		"comment":                 `<Envelope><!-- <Body><Wrong/></Body> --><Body><Right/></Body></Envelope>`,
		"cdata":                   `<Envelope><Body><![CDATA[<x>]]><M/></Body></Envelope>`,
		"truncated":               `<Envelope><Body><Method`,
	}
	for name, body := range bodies {
		want := decodeSOAPMethod([]byte(body))
		if got := soapMethod([]byte(body)); got != want {
			t.Errorf("%s: soapMethod = %q, the decoder says %q", name, got, want)
		}
	}
	// The cases the scan must hand to the decoder rather than answer itself.
	for _, name := range []string{"comment", "cdata", "truncated"} {
		if _, ok := scanSOAPMethod([]byte(bodies[name])); ok {
			t.Errorf("%s: the scan answered instead of asking the decoder", name)
		}
	}
	// And the ones it answers itself.
	for _, name := range []string{"plain", "header", "attributes with > and /", "whitespace"} {
		if _, ok := scanSOAPMethod([]byte(bodies[name])); !ok {
			t.Errorf("%s: the scan asked the decoder", name)
		}
	}
}
