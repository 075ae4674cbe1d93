#!/bin/bash
# Regenerates the captured exchanges of SOAP-NOTES.md: starts the harness, sends
# hand-written SOAP requests with curl and records each request and the simulator's
# answer. Usage: soap-samples.sh HARNESS_BINARY > samples.md
set -euo pipefail
BIN=$1
WORK=$(mktemp -d)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

start() { # start FLAGS...: starts the harness, sets URL CA DC BASE JAR
  [ -n "$PID" ] && { kill "$PID"; wait "$PID" 2>/dev/null || true; }
  local dir; dir=$(mktemp -d "$WORK/run.XXXX")
  "$BIN" -vmdks 1 -datastore-dir "$dir/ds" -cert-out "$dir/ca.pem" "$@" > "$dir/start.json" 2> "$dir/stderr" &
  PID=$!
  for _ in $(seq 100); do [ -s "$dir/start.json" ] && break; sleep 0.1; done
  J=$dir/start.json
  URL=$(python3 -c "import json;print(json.load(open('$J'))['url'])")
  CA=$(python3 -c "import json;print(json.load(open('$J'))['cert'])")
  DC=$(python3 -c "import json;print(json.load(open('$J'))['datacenters'][0])")
  BASE=${URL%/sdk}
  JAR=$dir/cookies.txt
  HDR=""
  echo "Harness flags: \`-vmdks 1 $*\` — start line:"
  echo
  echo '```json'
  cat "$J"
  echo '```'
  echo
}
OUT=/dev/stdout
pretty() { python3 -c '
import sys, xml.dom.minidom
b=sys.stdin.read()
try:
  p=xml.dom.minidom.parseString(b.encode()).toprettyxml(indent="  ")
  print("\n".join(l for l in p.split("\n")[1:] if l.strip()))
except Exception as e:
  print(b)
'; }
# call TITLE PATH BODY [extra curl args]
call() {
  local title=$1 path=$2 body=$3; shift 3
  local env="<?xml version=\"1.0\" encoding=\"UTF-8\"?>
<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\" xmlns:xsd=\"http://www.w3.org/2001/XMLSchema\" xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\">$HDR<soapenv:Body>$body</soapenv:Body></soapenv:Envelope>"
  local resp hdrs
  hdrs=$(mktemp)
  resp=$(curl -s --cacert $CA -b $JAR -c $JAR -D $hdrs -H 'Content-Type: text/xml; charset=utf-8' -H 'SOAPAction: "urn:vim25/7.0.3.0"' -A volmig-notes --data-binary "$env" "$@" $BASE$path)
  if [ "${SHOW:-all}" != all ] && ! [[ "$title" =~ $SHOW ]]; then LAST="$resp"; rm -f $hdrs; return; fi
  {
    echo "### $title"
    echo
    echo "\`POST $path\` — HTTP $(head -1 $hdrs | awk '{print $2}')$(grep -i '^set-cookie' $hdrs | sed 's/^/, /' | tr -d '\r')"
    echo
    echo '```xml'
    echo "$env" | pretty
    echo '```'
    echo
    echo '```xml'
    echo "$resp" | pretty
    echo '```'
    echo
  }
  LAST="$resp"
  rm -f $hdrs
}
full() {
HDR=""
call "RetrieveServiceContent (no session needed)" /sdk '<RetrieveServiceContent xmlns="urn:vim25"><_this type="ServiceInstance">ServiceInstance</_this></RetrieveServiceContent>'
call "Login with a wrong password" /sdk '<Login xmlns="urn:vim25"><_this type="SessionManager">SessionManager</_this><userName>user</userName><password>wrong</password></Login>'
call "Any call without a session" /sdk '<QueryVirtualDiskUuid xmlns="urn:vim25"><_this type="VirtualDiskManager">virtualDiskManager</_this><name>[LocalDS_0] kubevols/disk-0001.vmdk</name><datacenter type="Datacenter">datacenter-2</datacenter></QueryVirtualDiskUuid>'
call "Login" /sdk '<Login xmlns="urn:vim25"><_this type="SessionManager">SessionManager</_this><userName>user</userName><password>pass</password></Login>'
COOKIE=$(grep vmware_soap_session $JAR | awk '{print $7}' | tr -d '"')
call "FindByInventoryPath (datacenter)" /sdk "<FindByInventoryPath xmlns=\"urn:vim25\"><_this type=\"SearchIndex\">SearchIndex</_this><inventoryPath>$DC</inventoryPath></FindByInventoryPath>"
call "FindByInventoryPath (no such path: empty response, no returnval)" /sdk "<FindByInventoryPath xmlns=\"urn:vim25\"><_this type=\"SearchIndex\">SearchIndex</_this><inventoryPath>/NoSuchDC</inventoryPath></FindByInventoryPath>"
call "RetrievePropertiesEx: every Datacenter (name, parent) and its datastores (name), in one call" /sdk '<RetrievePropertiesEx xmlns="urn:vim25"><_this type="PropertyCollector">propertyCollector</_this><specSet><propSet><type>Folder</type><pathSet>name</pathSet><pathSet>parent</pathSet></propSet><propSet><type>Datacenter</type><pathSet>name</pathSet><pathSet>parent</pathSet><pathSet>datastore</pathSet></propSet><propSet><type>Datastore</type><pathSet>name</pathSet></propSet><objectSet><obj type="Folder">group-d1</obj><skip>false</skip><selectSet xsi:type="TraversalSpec"><name>folderChildren</name><type>Folder</type><path>childEntity</path><skip>false</skip><selectSet><name>folderChildren</name></selectSet><selectSet><name>dcDatastores</name></selectSet></selectSet><selectSet xsi:type="TraversalSpec"><name>dcDatastores</name><type>Datacenter</type><path>datastore</path><skip>false</skip></selectSet></objectSet></specSet><options><maxObjects>100</maxObjects></options></RetrievePropertiesEx>'
DCREF=$(echo "$LAST" | python3 -c 'import sys,re; print(re.search(r"<obj type=\"Datacenter\">([^<]+)</obj>", sys.stdin.read()).group(1))')
call "QueryVirtualDiskUuid (exists)" /sdk "<QueryVirtualDiskUuid xmlns=\"urn:vim25\"><_this type=\"VirtualDiskManager\">virtualDiskManager</_this><name>[LocalDS_0] kubevols/disk-0001.vmdk</name><datacenter type=\"Datacenter\">$DCREF</datacenter></QueryVirtualDiskUuid>"
call "QueryVirtualDiskUuid (missing file)" /sdk "<QueryVirtualDiskUuid xmlns=\"urn:vim25\"><_this type=\"VirtualDiskManager\">virtualDiskManager</_this><name>[LocalDS_0] kubevols/missing.vmdk</name><datacenter type=\"Datacenter\">$DCREF</datacenter></QueryVirtualDiskUuid>"
call "QueryVirtualDiskUuid (unknown datastore)" /sdk "<QueryVirtualDiskUuid xmlns=\"urn:vim25\"><_this type=\"VirtualDiskManager\">virtualDiskManager</_this><name>[NoSuchDS] kubevols/disk-0001.vmdk</name><datacenter type=\"Datacenter\">$DCREF</datacenter></QueryVirtualDiskUuid>"
HDR="<soapenv:Header><vcSessionCookie>$COOKIE</vcSessionCookie></soapenv:Header>"
DCQ=$(python3 -c "import urllib.parse,sys;print(urllib.parse.quote('${DC#/}', safe='/'))")
HOSTPORT=${BASE#https://}
BURL="https://$HOSTPORT/folder/kubevols/disk-0001.vmdk?dcPath=$DCQ&amp;dsName=LocalDS_0"
CREATE="<CnsCreateVolume xmlns=\"urn:vsan\"><_this type=\"CnsVolumeManager\">cns-volume-manager</_this><createSpecs><name>volmig-disk-0001-1a2b3c4d</name><volumeType>BLOCK</volumeType><metadata><containerCluster><clusterType>KUBERNETES</clusterType><clusterId>volmig-cluster</clusterId><vSphereUser>user</vSphereUser><clusterFlavor>VANILLA</clusterFlavor></containerCluster></metadata><backingObjectDetails xsi:type=\"CnsBlockBackingDetails\"><backingDiskUrlPath>$BURL</backingDiskUrlPath></backingObjectDetails></createSpecs></CnsCreateVolume>"
call "CnsCreateVolume (static registration of an existing vmdk)" /vsanHealth "$CREATE"
TASK=$(echo "$LAST" | python3 -c 'import sys,re; print(re.search(r"<returnval type=\"Task\">([^<]+)</returnval>", sys.stdin.read()).group(1))')
call "RetrievePropertiesEx on the Task: info.state, info.result, info.error" /sdk "<RetrievePropertiesEx xmlns=\"urn:vim25\"><_this type=\"PropertyCollector\">propertyCollector</_this><specSet><propSet><type>Task</type><pathSet>info.state</pathSet><pathSet>info.result</pathSet><pathSet>info.error</pathSet></propSet><objectSet><obj type=\"Task\">$TASK</obj><skip>false</skip></objectSet></specSet><options/></RetrievePropertiesEx>"
call "RetrievePropertiesEx on the Task: whole info" /sdk "<RetrievePropertiesEx xmlns=\"urn:vim25\"><_this type=\"PropertyCollector\">propertyCollector</_this><specSet><propSet><type>Task</type><pathSet>info</pathSet></propSet><objectSet><obj type=\"Task\">$TASK</obj><skip>false</skip></objectSet></specSet><options/></RetrievePropertiesEx>"
call "CnsCreateVolume again for the same vmdk (default: a second volume with a new ID; with -cns-already-registered: CnsAlreadyRegisteredFault)" /vsanHealth "$CREATE"
TASK2=$(echo "$LAST" | python3 -c 'import sys,re; print(re.search(r"<returnval type=\"Task\">([^<]+)</returnval>", sys.stdin.read()).group(1))')
call "... its task result" /sdk "<RetrievePropertiesEx xmlns=\"urn:vim25\"><_this type=\"PropertyCollector\">propertyCollector</_this><specSet><propSet><type>Task</type><pathSet>info.state</pathSet><pathSet>info.result</pathSet></propSet><objectSet><obj type=\"Task\">$TASK2</obj><skip>false</skip></objectSet></specSet><options/></RetrievePropertiesEx>"
MISSING=${CREATE//disk-0001.vmdk/missing.vmdk}
call "CnsCreateVolume for a vmdk that does not exist" /vsanHealth "$MISSING"
TASK3=$(echo "$LAST" | python3 -c 'import sys,re; print(re.search(r"<returnval type=\"Task\">([^<]+)</returnval>", sys.stdin.read()).group(1))')
call "... its task result (a fault inside the volume result; the task itself succeeds)" /sdk "<RetrievePropertiesEx xmlns=\"urn:vim25\"><_this type=\"PropertyCollector\">propertyCollector</_this><specSet><propSet><type>Task</type><pathSet>info.state</pathSet><pathSet>info.result</pathSet></propSet><objectSet><obj type=\"Task\">$TASK3</obj><skip>false</skip></objectSet></specSet><options/></RetrievePropertiesEx>"
call "CnsCreateVolume without createSpecs (the task itself fails)" /vsanHealth '<CnsCreateVolume xmlns="urn:vsan"><_this type="CnsVolumeManager">cns-volume-manager</_this></CnsCreateVolume>'
TASK5=$(echo "$LAST" | python3 -c 'import sys,re; print(re.search(r"<returnval type=\"Task\">([^<]+)</returnval>", sys.stdin.read()).group(1))')
call "... its task: info.state=error and info.error" /sdk "<RetrievePropertiesEx xmlns=\"urn:vim25\"><_this type=\"PropertyCollector\">propertyCollector</_this><specSet><propSet><type>Task</type><pathSet>info.state</pathSet><pathSet>info.result</pathSet><pathSet>info.error</pathSet></propSet><objectSet><obj type=\"Task\">$TASK5</obj><skip>false</skip></objectSet></specSet><options/></RetrievePropertiesEx>"
call "CnsQueryVolume by name, first page of 1" /vsanHealth '<CnsQueryVolume xmlns="urn:vsan"><_this type="CnsVolumeManager">cns-volume-manager</_this><filter><names>volmig-disk-0001-1a2b3c4d</names><cursor><offset>0</offset><limit>1</limit></cursor></filter></CnsQueryVolume>'
call "CnsQueryAllVolume" /vsanHealth '<CnsQueryAllVolume xmlns="urn:vsan"><_this type="CnsVolumeManager">cns-volume-manager</_this><filter></filter><selection></selection></CnsQueryAllVolume>'
VOL=$(echo "$LAST" | python3 -c 'import sys,re; print(re.findall(r"<id>([^<]+)</id>", sys.stdin.read())[-1])')
call "CnsDeleteVolume (deleteDisk=false), one existing and one unknown ID" /vsanHealth "<CnsDeleteVolume xmlns=\"urn:vsan\"><_this type=\"CnsVolumeManager\">cns-volume-manager</_this><volumeIds><id>$VOL</id></volumeIds><volumeIds><id>00000000-0000-0000-0000-000000000000</id></volumeIds><deleteDisk>false</deleteDisk></CnsDeleteVolume>"
TASK4=$(echo "$LAST" | python3 -c 'import sys,re; print(re.search(r"<returnval type=\"Task\">([^<]+)</returnval>", sys.stdin.read()).group(1))')
call "... its task result" /sdk "<RetrievePropertiesEx xmlns=\"urn:vim25\"><_this type=\"PropertyCollector\">propertyCollector</_this><specSet><propSet><type>Task</type><pathSet>info.state</pathSet><pathSet>info.result</pathSet></propSet><objectSet><obj type=\"Task\">$TASK4</obj><skip>false</skip></objectSet></specSet><options/></RetrievePropertiesEx>"
HDR=""
call "Logout" /sdk '<Logout xmlns="urn:vim25"><_this type="SessionManager">SessionManager</_this></Logout>'
}

echo "## Run 1: default flags"
echo
start
full
echo "## Run 2: datacenter inside a folder, CnsAlreadyRegisteredFault enabled"
echo
start -datacenter-folder Prod -cns-already-registered
SHOW='^(FindByInventoryPath \(datacenter\)|RetrievePropertiesEx: every|CnsCreateVolume again|\.\.\. its task result$)'
full
