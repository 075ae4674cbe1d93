package main

import "testing"

// failCalls: counts are used up per method, "TaskPoll" only matches task polls, a
// method's own entry goes first, and a count of 0 removes an entry.
func TestInjectedFailures(t *testing.T) {
	m := &modes{}
	p := injectedJSON{FailCalls: map[string]failCall{
		"QueryVirtualDiskUuid": {Count: 2, Answer: "http503"},
		taskPollKey:            {Count: 1, Answer: "NotAuthenticated"},
	}}
	if err := p.validate(); err != nil {
		t.Fatal(err)
	}
	m.injected.apply(p)
	for i := 0; i < 2; i++ {
		if a, ok := m.injectedFailure("QueryVirtualDiskUuid", false); !ok || a != "http503" {
			t.Fatalf("call %d: %q %v", i, a, ok)
		}
	}
	if _, ok := m.injectedFailure("QueryVirtualDiskUuid", false); ok {
		t.Fatal("a third call failed")
	}
	if _, ok := m.injectedFailure("RetrievePropertiesEx", false); ok {
		t.Fatal("a call that is no task poll matched TaskPoll")
	}
	if a, ok := m.injectedFailure("RetrievePropertiesEx", true); !ok || a != "NotAuthenticated" {
		t.Fatalf("task poll: %q %v", a, ok)
	}
	if _, ok := m.injectedFailure("RetrievePropertiesEx", true); ok {
		t.Fatal("a second task poll failed")
	}
	m.injected.apply(injectedJSON{FailCalls: map[string]failCall{"Login": {Count: 3, Answer: "http503"}}})
	m.injected.apply(injectedJSON{FailCalls: map[string]failCall{"Login": {Count: 0}}})
	if len(m.injected.failCalls) != 0 {
		t.Fatalf("left: %v", m.injected.failCalls)
	}
	for _, bad := range []injectedJSON{
		{FailCalls: map[string]failCall{"X": {Count: 1, Answer: "teapot"}}},
		{FailCalls: map[string]failCall{"X": {Count: -1}}},
		{ReplyDelaysMs: map[string]int64{"X": -5}},
	} {
		if bad.validate() == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
}

// replyDelaysMs: a method's own delay, else the TaskPoll one for task polls.
func TestReplyDelays(t *testing.T) {
	m := &modes{}
	m.injected.apply(injectedJSON{ReplyDelaysMs: map[string]int64{"CnsCreateVolume": 2900, taskPollKey: 10}})
	if d := m.replyDelay("CnsCreateVolume", false); d.Milliseconds() != 2900 {
		t.Errorf("CnsCreateVolume: %v", d)
	}
	if d := m.replyDelay("RetrievePropertiesEx", true); d.Milliseconds() != 10 {
		t.Errorf("task poll: %v", d)
	}
	if d := m.replyDelay("RetrievePropertiesEx", false); d != 0 {
		t.Errorf("other: %v", d)
	}
	m.injected.apply(injectedJSON{ReplyDelaysMs: map[string]int64{"CnsCreateVolume": 0}})
	if d := m.replyDelay("CnsCreateVolume", false); d != 0 {
		t.Errorf("removed: %v", d)
	}
}
